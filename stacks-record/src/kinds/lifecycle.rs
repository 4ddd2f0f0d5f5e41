//! exec, fork and exit of the traced processes, always recorded (bpf/kinds/lifecycle.bpf.h):
//! the kernel side follows forks and matches names at exec; here each process's caches start
//! over at its exec and are dropped at its exit, whose exit snapshot (if any) is kept.

use stacks_stream::kind;

use super::{Context, Decoded, Effects, EventKind, Life};
use crate::kernel::abi::types::{
    stacks_exec, stacks_exit, stacks_exit_map, stacks_exit_map_what as MapWhat, stacks_fork,
};
use crate::kernel::event::{Header, Kind as RecordKind, RawEvent, c_bytes, cstr, info_members};
use crate::output::rows::Extra;
use crate::process::exit_maps::{SnapMapping, What};
use crate::process::fdnames::walked_path;
use crate::spec::{EventSpec, StackSel};

info_members!(stacks_exec, stacks_fork, stacks_exit);

pub(crate) struct Lifecycle;

impl EventKind for Lifecycle {
    fn name(&self) -> &'static str {
        "process lifecycle"
    }

    fn event(&self) -> Option<&'static str> {
        None
    }

    /// The ring of its rows' kinds (`exec`, `fork`, `exit`).
    fn ring(&self) -> super::Ring {
        super::registry_ring(kind::EXEC)
    }

    fn programs(&self) -> &'static [&'static str] {
        &[
            "on_exec",
            "on_fork",
            "on_exit",
            "on_exit_snapshot",
            "on_new_mapping",
        ]
    }

    fn kstack_cached(&self) -> bool {
        false
    }

    /// `on_new_mapping` keeps the kernel's plain-address user frames honest (`maps_read`):
    /// needed only when some event takes user stacks. Of the two exit programs, the one with
    /// exit snapshots (`on_exit_snapshot`) loads when some event takes `d` stacks, `on_exit`
    /// otherwise: the snapshot's VMA walk is most of the exit program's verification time,
    /// which every recording would pay at its start.
    fn loads(&self, program: &str, spec: &EventSpec) -> bool {
        let mut stacks = spec
            .kinds
            .iter()
            .map(|k| k.stacks)
            .chain(spec.probes.iter().map(|p| p.stacks));
        match program {
            "on_new_mapping" => stacks.any(StackSel::user),
            "on_exit" => !stacks.any(StackSel::dwarf),
            "on_exit_snapshot" => stacks.any(StackSel::dwarf),
            _ => true,
        }
    }

    fn records(&self) -> &'static [RecordKind] {
        &[
            RecordKind::STACKS_EV_EXEC,
            RecordKind::STACKS_EV_FORK,
            RecordKind::STACKS_EV_EXIT,
        ]
    }

    /// An exec starts its process over, an exit ends it (see [`Life`]).
    fn effects(&self, record: RecordKind) -> Effects {
        let life = match record {
            RecordKind::STACKS_EV_EXEC => Life::Execs,
            RecordKind::STACKS_EV_EXIT => Life::Exits,
            _ => Life::Runs,
        };
        Effects {
            life,
            ..Effects::default()
        }
    }

    fn decode(&self, e: &RawEvent<'_>, cx: &mut Context<'_>) -> Option<Decoded> {
        let h = &e.h;
        Some(match h.kind {
            RecordKind::STACKS_EV_EXEC => exec(h, e.info(), cx),
            RecordKind::STACKS_EV_FORK => {
                let f: stacks_fork = e.info();
                row(
                    kind::FORK,
                    h,
                    Extra {
                        child: Some(f.child_pid as i32),
                        ..Extra::default()
                    },
                )
            }
            _ => {
                // An exit: the process's files and modules are forgotten, its exit snapshot
                // kept.
                let x: stacks_exit = e.info();
                cx.files.forget(h.pid);
                cx.modules.forget(h.pid);
                cx.exit_maps
                    .exited(h.pid, snapshot(e.after_header(), x.maps));
                row(
                    kind::EXIT,
                    h,
                    Extra {
                        exit_code: Some(x.exit_code),
                        ..Extra::default()
                    },
                )
            }
        })
    }
}

/// An exec: the process's caches start over with its new image.
fn exec(h: &Header, x: stacks_exec, cx: &mut Context<'_>) -> Decoded {
    cx.norm.forget(h.pid);
    cx.unwinders.forget(h.pid);
    cx.files.forget(h.pid);
    cx.modules.forget(h.pid);
    cx.modules.learn_process(h.pid);
    let filename = c_bytes(&x.filename);
    let p = cstr(&filename);
    cx.modules.learn_file(&p);
    row(
        kind::EXEC,
        h,
        Extra {
            path: (!p.is_empty()).then(|| p.into_owned()),
            ..Extra::default()
        },
    )
}

/// Most mappings an exit snapshot holds (`STACKS_EXIT_MAPS_MAX`).
const EXIT_MAPS_MAX: u32 = 128;

/// The `maps` mappings of an exit snapshot (`struct stacks_exit_map` each) at the start of
/// `bytes` (what follows an exit record's header); those cut off are left out.
fn snapshot(bytes: &[u8], maps: u32) -> Vec<SnapMapping> {
    let size = size_of::<stacks_exit_map>();
    bytes
        .chunks_exact(size)
        .take(maps.min(EXIT_MAPS_MAX) as usize)
        .filter_map(|b| {
            // SAFETY: `b` has the struct's size; it is plain integers (an enum newtype over
            // u32 among them), valid for every bit pattern.
            let m = unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<stacks_exit_map>()) };
            let what = match m.what {
                MapWhat::STACKS_MAP_FILE => What::File,
                MapWhat::STACKS_MAP_VDSO => What::Vdso,
                MapWhat::STACKS_MAP_STACK => What::Stack,
                _ => return None,
            };
            Some(SnapMapping::new(
                m.start..m.end,
                m.offset,
                what,
                m.dev,
                m.file.inode,
                walked_path(&m.file),
            ))
        })
        .collect()
}

/// A process lifecycle row: each stands for one event.
fn row(kind: &'static str, h: &Header, extra: Extra) -> Decoded {
    Decoded {
        kind,
        value: i64::from(h.count),
        extra,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_program_with_snapshots_loads_only_with_d_stacks() {
        for (spec, snapshot) in [
            ("profile:u", false),
            ("vfs:n,block:uk,switch:k", false),
            ("profile:d", true),
            ("vfs:u,switch:dk", true),
            ("tp:sched:sched_process_fork:d", true),
            ("tp:sched:sched_process_fork:u", false),
        ] {
            let spec = EventSpec::parse(spec).unwrap();
            assert_eq!(
                (
                    Lifecycle.loads("on_exit", &spec),
                    Lifecycle.loads("on_exit_snapshot", &spec)
                ),
                (!snapshot, snapshot),
                "{spec:?}"
            );
            assert!(Lifecycle.loads("on_exec", &spec) && Lifecycle.loads("on_fork", &spec));
        }
    }

    #[test]
    fn exit_snapshots_are_read_after_the_header() {
        let map = |start: u64, what: MapWhat, path: &[u8]| {
            let mut m = stacks_exit_map {
                start,
                end: start + 0x1000,
                offset: 0x2000,
                dev: (8 << 20) | 1,
                what,
                ..stacks_exit_map::default()
            };
            m.file.inode = 42;
            m.file.path_len = path.len() as u32;
            m.file.path_complete = 1;
            for (d, s) in m.file.path.iter_mut().zip(path) {
                *d = *s as i8;
            }
            // SAFETY: viewing a plain #[repr(C)] struct of integers as its bytes.
            unsafe {
                std::slice::from_raw_parts(
                    (&raw const m).cast::<u8>(),
                    size_of::<stacks_exit_map>(),
                )
            }
            .to_vec()
        };
        let mut bytes = map(0x1000, MapWhat::STACKS_MAP_FILE, b"app\0bin\0usr\0");
        bytes.extend(map(0x7000, MapWhat::STACKS_MAP_STACK, b""));
        bytes.extend(map(0x9000, MapWhat::STACKS_MAP_VDSO, b""));
        let s = snapshot(&bytes, 3);
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].range, 0x1000..0x2000);
        assert_eq!((s[0].offset, s[0].what), (0x2000, What::File));
        assert_eq!((s[0].dev.as_str(), s[0].inode), ("08:01", 42));
        assert_eq!(s[0].path.as_deref(), Some("/usr/bin/app"));
        assert_eq!((s[1].what, s[2].what), (What::Stack, What::Vdso));
        // Fewer sent than announced: only those there.
        assert_eq!(snapshot(&bytes[..bytes.len() - 8], 3).len(), 2);
        assert!(snapshot(&bytes, 0).is_empty());
    }
}
