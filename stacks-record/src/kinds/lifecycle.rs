//! exec, fork and exit of the traced processes, always recorded (bpf/kinds/lifecycle.bpf.h):
//! the kernel side follows forks and matches names at exec; here each process's caches start
//! over at its exec and are dropped at its exit.

use stacks_stream::kind;

use super::{Context, Decoded, EventKind};
use crate::kernel::abi::types::{stacks_exec, stacks_exit, stacks_fork};
use crate::kernel::event::{Header, Kind as RecordKind, RawEvent, c_bytes, cstr, info_members};
use crate::output::rows::Extra;
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

    fn programs(&self) -> &'static [&'static str] {
        &["on_exec", "on_fork", "on_exit", "on_new_mapping"]
    }

    /// `on_new_mapping` keeps the kernel's plain-address user frames honest (`maps_read`):
    /// needed only when some event takes user stacks.
    fn loads(&self, program: &str, spec: &EventSpec) -> bool {
        program != "on_new_mapping"
            || spec
                .kinds
                .iter()
                .map(|k| k.stacks)
                .chain(spec.probes.iter().map(|p| p.stacks))
                .any(StackSel::user)
    }

    fn records(&self) -> &'static [RecordKind] {
        &[
            RecordKind::STACKS_EV_EXEC,
            RecordKind::STACKS_EV_FORK,
            RecordKind::STACKS_EV_EXIT,
        ]
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
                // An exit: the process's files and modules are forgotten.
                let x: stacks_exit = e.info();
                cx.files.forget(h.pid);
                cx.modules.forget(h.pid);
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

/// A process lifecycle row: each stands for one event.
fn row(kind: &'static str, h: &Header, extra: Extra) -> Decoded {
    Decoded {
        kind,
        value: i64::from(h.count),
        extra,
    }
}
