//! A terminal program driven in tmux, as a person would: a tmux server of its own, keys sent
//! with `send-keys`, the screen read with `capture-pane` (stacks-top's end-to-end tests).

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use stacks_testkit::bin_dir;

use crate::check;

/// A tmux server of its own (`-L`), one session of `width`x`height` running `command`
/// under the test binaries' PATH.
pub struct Tmux {
    socket: String,
}

impl Tmux {
    pub fn start(name: &str, command: &str) -> Self {
        let socket = format!("stacks-top-{name}-{}", std::process::id());
        let path = format!(
            "{}:{}",
            bin_dir().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let t = Tmux { socket };
        let out = t.run(&[
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            "160",
            "-y",
            "45",
            &format!("export PATH='{path}'; {command}; echo TOP-EXIT=$?; sleep 600"),
        ]);
        check(&out, "tmux new-session");
        t
    }

    pub fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux")
    }

    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "t"]).stdout).into_owned()
    }

    /// Type `keys` (tmux key names), one at a time: an Esc followed at once by a letter reads
    /// as Alt+letter.
    pub fn keys(&self, keys: &[&str]) {
        for k in keys {
            self.run(&["send-keys", "-t", "t", k]);
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// Wait until the screen satisfies `ok`, for at most `secs`.
    pub fn wait(&self, secs: u64, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let t0 = Instant::now();
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(secs),
                "waited {secs}s for {what}:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Tmux {
    /// [`Self::wait`] for a screen satisfying `ok` whose title line (stacks-top's) says
    /// nothing is being computed: the table and view shown are those of the last key.
    /// A screen is taken again 300 ms after it first satisfies `ok`, and that one is returned
    /// if it still does: capture-pane may catch a frame half drawn (under load, a CI run once
    /// read a table of one row followed by blank lines, its other rows not drawn yet).
    pub fn settled(&self, secs: u64, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let done = |s: &str| ok(s) && !s.lines().next().unwrap_or("").contains("computing");
        let t0 = Instant::now();
        loop {
            let left = Duration::from_secs(secs).saturating_sub(t0.elapsed());
            self.wait(left.as_secs().max(1), what, done);
            std::thread::sleep(Duration::from_millis(300));
            let s = self.screen();
            if done(&s) {
                return s;
            }
        }
    }
}

impl Tmux {
    /// Assert that the terminal was given back: the alternate screen is off.
    pub fn assert_alternate_screen_off(&self) {
        let alt = self.run(&["display", "-p", "-t", "t", "#{alternate_on}"]);
        assert_eq!(
            String::from_utf8_lossy(&alt.stdout).trim(),
            "0",
            "still on the alternate screen"
        );
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.run(&["kill-server"]);
    }
}
