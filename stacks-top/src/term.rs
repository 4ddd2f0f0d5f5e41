//! The terminal: drawn on `/dev/tty` (stdin may be the live stream, stdout stays free), in raw
//! mode on the alternate screen, and always given back — when the screen ends, on an error
//! (the guard's drop), on a panic (a hook restores before the message), and on SIGINT,
//! SIGTERM or SIGHUP (caught as a flag the input thread reads). Keys are read on a thread of
//! their own ([`Screen::input`]) into the screen's event queue ([`crate::runner`]).

use std::fs::{File, OpenOptions};
use std::io::Write;

use anyhow::{Context, Result};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::{cursor, event, execute, terminal};
use std::sync::mpsc::Sender;

use crate::runner::Event;

/// The terminal, restored when dropped.
pub(crate) struct Screen {
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
    pub(crate) fn open() -> Result<Self> {
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
}

/// Wait up to `timeout` for input on `fd`: poll(2), since crossterm's own wait spins on a
/// terminal that hung up (reads of 0 bytes), and SIGTERM could not end it; poll(2) says so,
/// and returns early on a signal.
fn wait(fd: std::os::fd::RawFd, timeout: std::time::Duration) -> Wait {
    let mut p = libc::pollfd {
        fd,
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

/// How long the input thread waits on the terminal before it looks for a signal again.
const INPUT_TICK: std::time::Duration = std::time::Duration::from_millis(50);

impl Screen {
    /// Read the terminal on a thread of its own: keys and resizes go into `tx` as they come,
    /// then [`Event::HungUp`] when the terminal goes, or [`Event::Signal`] when a signal is
    /// caught. It ends when the queue does.
    pub(crate) fn input(&self, tx: Sender<Event>) -> Result<()> {
        let fd = self.fd;
        std::thread::Builder::new()
            .name("stacks-top-keys".into())
            .spawn(move || input(fd, &tx))
            .context("cannot start the input thread")?;
        Ok(())
    }
}

/// The input thread: until the queue or the terminal is gone.
fn input(fd: std::os::fd::RawFd, tx: &Sender<Event>) {
    loop {
        if stacks_stream::sys::signal_caught() {
            let _ = tx.send(Event::Signal);
            return;
        }
        match wait(fd, INPUT_TICK) {
            Wait::Timeout => continue,
            Wait::HungUp => {
                let _ = tx.send(Event::HungUp);
                return;
            }
            Wait::Input => {}
        }
        // Every event crossterm has read (one read may bring several keys).
        loop {
            let ev = match event::poll(std::time::Duration::ZERO) {
                Ok(true) => event::read(),
                Ok(false) => break,
                Err(e) => Err(e),
            };
            let sent = match ev {
                Ok(event::Event::Key(k)) if k.kind != event::KeyEventKind::Release => {
                    tx.send(Event::Key(k))
                }
                Ok(event::Event::Resize(..)) => tx.send(Event::Resize),
                Ok(_) => Ok(()),
                Err(_) => tx.send(Event::HungUp),
            };
            if sent.is_err() {
                return;
            }
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}
