//! The mount tables of other processes ([`on_fuse`]), kept per view: one per mount namespace
//! and root. Every process of a host (or of a container) has the same table, and the recorder
//! checks each file a new process maps against it. A view is read once, and again only when
//! the kernel reports a change in its namespace (`poll` on the open table).

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Mount, changed, fuse_among, parse, read_again};

/// A view unused this long is closed: its open table holds its namespace's mounts (a
/// container's, after its processes exited) until then.
const IDLE: Duration = Duration::from_secs(5);

/// Views kept open at most; a process of another view past them has its table read each time.
const MAX_VIEWS: usize = 64;

/// What makes two processes' mount tables the same text: their mount namespace (the device
/// and inode of `/proc/PID/ns/mnt`) and their root (`/proc/PID/root`: a process chrooted
/// sees the mounts below its root only, named from it).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    ns: (u64, u64),
    root: PathBuf,
}

/// The namespace and root of `pid`: a `stat` of the namespace's file (nsfs) and the link's
/// text (the kernel's name of the root), neither asking the process's file systems.
fn key_of(pid: u32) -> Option<Key> {
    let ns = std::fs::metadata(format!("/proc/{pid}/ns/mnt")).ok()?;
    let root = std::fs::read_link(format!("/proc/{pid}/root")).ok()?;
    Some(Key {
        ns: (ns.dev(), ns.ino()),
        root,
    })
}

struct View {
    /// The table, open: `poll` on it says when the namespace's mounts changed.
    file: File,
    mounts: Vec<Mount>,
    used: Instant,
}

static VIEWS: Mutex<BTreeMap<Key, View>> = Mutex::new(BTreeMap::new());

/// Whether `path`, as process `pid` sees it, lies on a FUSE mount by its mount table
/// ([`fuse_in`](super::fuse_in)); false when the table cannot be read (the process is gone).
/// The table of the process's view is read again when the kernel reports a change of its
/// namespace's mounts, so a FUSE file system mounted since is seen at the next check.
pub fn on_fuse(pid: u32, path: &str) -> bool {
    let Some(key) = key_of(pid) else {
        return false;
    };
    let now = Instant::now();
    let mut views = VIEWS.lock().unwrap_or_else(|p| p.into_inner());
    drop_idle(&mut views, now);
    if let Some(view) = views.get_mut(&key) {
        let current = !changed(&view.file)
            || read_again(&mut view.file)
                .map(|text| view.mounts = parse(&text).collect())
                .is_ok();
        if current {
            view.used = now;
            return fuse_among(&view.mounts, path);
        }
        // A table that can no longer be read is opened afresh below.
        views.remove(&key);
    }
    let Ok(mut file) = File::open(format!("/proc/{pid}/mountinfo")) else {
        return false;
    };
    let Ok(text) = read_again(&mut file) else {
        return false;
    };
    let mounts: Vec<Mount> = parse(&text).collect();
    let fuse = fuse_among(&mounts, path);
    // Kept only when the process had the same namespace and root after the table was read
    // as before (it may have entered another between the two).
    if views.len() < MAX_VIEWS && key_of(pid).as_ref() == Some(&key) {
        views.insert(
            key,
            View {
                file,
                mounts,
                used: now,
            },
        );
    }
    fuse
}

/// Close the views unused for a while: call now and then (the recorder does at each flush),
/// so that a namespace whose processes have all exited is not held by its open table.
pub fn forget_idle() {
    drop_idle(
        &mut VIEWS.lock().unwrap_or_else(|p| p.into_inner()),
        Instant::now(),
    );
}

fn drop_idle(views: &mut BTreeMap<Key, View>, now: Instant) {
    views.retain(|_, v| now.duration_since(v.used) < IDLE);
}

/// Views open now.
#[cfg(test)]
fn views() -> usize {
    VIEWS.lock().unwrap_or_else(|p| p.into_inner()).len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::{Child, Command};

    /// A shell in a mount namespace of its own that, once told (`go` exists), mounts a FUSE
    /// file system (a `/dev/fuse` connection no server answers: nothing here looks inside it)
    /// over `dir`, then says so (`done`) and waits.
    struct Namespace {
        child: Child,
        dir: PathBuf,
        go: PathBuf,
        done: PathBuf,
    }

    impl Namespace {
        fn start(scratch: &Path) -> Self {
            let dir = scratch.join("mnt");
            std::fs::create_dir(&dir).unwrap();
            let (ready, go, done) = (
                scratch.join("ready"),
                scratch.join("go"),
                scratch.join("done"),
            );
            let script = format!(
                "touch {r}; while [ ! -e {g} ]; do sleep 0.02; done; exec 3<>/dev/fuse; \
                 mount -i -t fuse.stackstest -o fd=3,rootmode=40000,user_id=0,group_id=0 \
                 stackstest {d} && touch {n}; exec sleep 60",
                r = ready.display(),
                g = go.display(),
                d = dir.display(),
                n = done.display()
            );
            let child = Command::new("unshare")
                .args(["-m", "--propagation", "private", "sh", "-c", &script])
                .spawn()
                .expect("unshare runs");
            wait_for(&ready);
            Namespace {
                child,
                dir,
                go,
                done,
            }
        }

        fn mount_fuse(&self) {
            std::fs::write(&self.go, "").unwrap();
            wait_for(&self.done);
        }
    }

    impl Drop for Namespace {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn wait_for(file: &Path) {
        let until = Instant::now() + Duration::from_secs(20);
        while !file.exists() {
            assert!(Instant::now() < until, "{} never appeared", file.display());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A process's view, read once, still sees a FUSE file system mounted in its namespace
    /// after it was read; the recorder's own namespace, another view, does not.
    #[test]
    fn a_fuse_mount_made_after_a_view_was_read_is_seen() {
        if !stacks_testkit::root_available("a_fuse_mount_made_after_a_view_was_read_is_seen") {
            return;
        }
        let scratch = stacks_testkit::tool::scratch("fuse-view");
        let ns = Namespace::start(&scratch);
        let pid = ns.child.id();
        let file = ns.dir.join("lib.so");
        let file = file.to_str().unwrap();
        assert!(!on_fuse(pid, file), "nothing is mounted there yet");
        assert!(views() >= 1, "the namespace's view is kept");
        ns.mount_fuse();
        assert!(on_fuse(pid, file), "the mount made since is seen");
        assert!(!on_fuse(pid, "/usr/lib/x.so"), "beside the mount: not FUSE");
        assert!(
            !on_fuse(std::process::id(), file),
            "this process's namespace has no such mount"
        );
        // The same namespace by another of its processes: the view is shared, and current.
        let other = Command::new("nsenter")
            .args(["-t", &pid.to_string(), "-m", "sleep", "30"])
            .spawn()
            .unwrap();
        let other_pid = other.id();
        let until = Instant::now() + Duration::from_secs(10);
        while key_of(other_pid) != key_of(pid) {
            assert!(
                Instant::now() < until,
                "nsenter never entered the namespace"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(on_fuse(other_pid, file));
        let mut other = other;
        let _ = other.kill();
        let _ = other.wait();
    }

    #[test]
    fn a_process_gone_is_not_on_fuse() {
        assert!(!on_fuse(u32::MAX - 1, "/x"));
    }
}
