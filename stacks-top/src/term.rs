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
        let terminal = match Terminal::new(CrosstermBackend::new(out)) {
            Ok(t) => t,
            Err(e) => {
                restore();
                return Err(e).context("cannot take the terminal");
            }
        };
        Ok(Screen { terminal })
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}
