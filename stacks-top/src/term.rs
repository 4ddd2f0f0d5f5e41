//! The terminal: drawn on `/dev/tty` (stdin may be the live stream, stdout stays free), in raw
//! mode on the alternate screen, and always given back — when the screen ends, on an error
//! (the guard's drop), on a panic (a hook restores before the message), and on SIGINT,
//! SIGTERM or SIGHUP (caught as a flag the main loop reads).

use std::fs::{File, OpenOptions};
use std::io::Write;

use anyhow::{Context, Result};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::{cursor, execute, terminal};

/// The terminal, restored when dropped.
pub struct Screen {
    pub terminal: Terminal<CrosstermBackend<File>>,
    /// The terminal's fd, to wait on.
    fd: std::os::fd::RawFd,
}

/// What waiting for a key found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    Input,
    /// Nothing came (or a signal arrived).
    Timeout,
    /// The terminal is gone (its window closed, its tmux server killed).
    HungUp,
}

fn tty() -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .context("no terminal to draw on (/dev/tty): use --once for text output")
}

/// Give the terminal back: leave the alternate screen, show the cursor, end raw mode.
pub fn restore() {
    if let Ok(mut t) = tty() {
        let _ = execute!(t, terminal::LeaveAlternateScreen, cursor::Show);
        let _ = t.flush();
    }
    let _ = terminal::disable_raw_mode();
}

impl Screen {
    /// Take the terminal.
    pub fn open() -> Result<Self> {
        let mut out = tty()?;
        stacks_stream::sys::catch_signals(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP])
            .context("cannot catch signals")?;
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            default(info);
        }));
        terminal::enable_raw_mode().context("cannot put the terminal in raw mode")?;
        if let Err(e) = execute!(out, terminal::EnterAlternateScreen, cursor::Hide) {
            restore();
            return Err(e).context("cannot take the terminal");
        }
        let fd = std::os::fd::AsRawFd::as_raw_fd(&out);
        let terminal = match Terminal::new(CrosstermBackend::new(out)) {
            Ok(t) => t,
            Err(e) => {
                restore();
                return Err(e).context("cannot take the terminal");
            }
        };
        Ok(Screen { terminal, fd })
    }

    /// Wait up to `timeout` for input on the terminal.
    pub fn wait(&self, timeout: std::time::Duration) -> Wait {
        let mut p = libc::pollfd {
            fd: self.fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, for the duration of the call.
        let n = unsafe { libc::poll(&mut p, 1, timeout.as_millis() as libc::c_int) };
        if n <= 0 {
            return Wait::Timeout;
        }
        if p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            Wait::HungUp
        } else {
            Wait::Input
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}
