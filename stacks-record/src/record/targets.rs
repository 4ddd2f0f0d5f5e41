//! The targets of a recording: handing them to the kernel side at the start (a command we
//! spawn and hold at its gate, pids, names), letting them go once everything is attached, and
//! naming them.

use anyhow::Result;

use crate::cli::Target;
use crate::kernel::load as bpf;
use crate::process::cgroups::{CgroupTarget, pids_in};
use crate::process::target::{Child, check_pid, is_alive, scan_names};

/// The processes handed to the kernel side at the start: a command we run, or pids to watch.
pub(super) struct Targets {
    pub(super) child: Option<Child>,
    watched_pids: Vec<u32>,
    /// `--cgroup`: the cgroups, resolved.
    pub(super) cgroups: Vec<CgroupTarget>,
}

impl Targets {
    /// Hand the target to the kernel side (a command is spawned with `env` set, held until
    /// released, and with `stop_at_exec` held again after its exec until its
    /// [`Child::resume`]).
    pub(super) fn add(
        skel: &crate::kernel::abi::StacksSkel<'_>,
        target: &Target,
        stop_at_exec: bool,
        env: &[(String, String)],
    ) -> Result<Self> {
        let mut t = Targets {
            child: None,
            watched_pids: Vec::new(),
            cgroups: Vec::new(),
        };
        match target {
            Target::Command(argv) => {
                let c = Child::spawn(argv, stop_at_exec, env)?;
                bpf::add_target(skel, c.pid)?;
                t.child = Some(c);
            }
            Target::Select { names, pids } => {
                for n in names {
                    bpf::add_target_comm(skel, n)?;
                }
                for &p in pids {
                    let tgid = check_pid(p)?;
                    bpf::add_target(skel, tgid)?;
                    t.watched_pids.push(tgid);
                }
            }
            Target::All { .. } | Target::Cgroups(_) => {}
        }
        Ok(t)
    }

    /// Everything is attached: now nothing that starts can be missed. Hand the processes
    /// already running under the names asked for (`running`, from [`running_pids`]) to the
    /// kernel side, and let the command run.
    pub(super) fn go(
        &mut self,
        skel: &crate::kernel::abi::StacksSkel<'_>,
        target: &Target,
        running: &[u32],
    ) -> Result<()> {
        if let Target::Select { .. } = target {
            for &pid in running {
                bpf::add_target(skel, pid)?;
            }
        }
        if let Some(c) = self.child.as_mut() {
            c.release()?;
        }
        Ok(())
    }

    /// `Some` once the recording should end because its targets are gone: with the command's
    /// exit status, or `None` when every watched pid has exited.
    pub(super) fn ended(&mut self, target: &Target) -> Option<Option<u8>> {
        if let Some(c) = self.child.as_mut()
            && let Some(status) = c.try_wait()
        {
            return Some(Some(status));
        }
        if !self.watched_pids.is_empty()
            && matches!(target, Target::Select { names, .. } if names.is_empty())
            && self.watched_pids.iter().all(|&p| !is_alive(p))
        {
            eprintln!("stacks-record: every traced pid has exited");
            return Some(None);
        }
        None
    }
}

/// The target's processes that run now (none for a command not started yet): every process
/// for `--all`, those in its cgroups, or those it names by pid or name ([`target_pids`]).
pub(super) fn running_pids(target: &Target, cgroups: &[CgroupTarget]) -> Vec<u32> {
    match target {
        Target::All { .. } => crate::process::target::all_pids(),
        Target::Cgroups(_) => pids_in(cgroups),
        Target::Select { .. } => target_pids(target),
        Target::Command(_) => Vec::new(),
    }
}

/// The running processes a target names now (where a bare library name of a probe is looked
/// up); none for a command not started yet or `--all`.
pub(super) fn target_pids(target: &Target) -> Vec<u32> {
    match target {
        Target::Select { names, pids } => {
            let mut all = pids.clone();
            all.extend(scan_names(names));
            all
        }
        _ => Vec::new(),
    }
}

pub(super) fn describe(target: &Target) -> String {
    match target {
        Target::All { idle: false } => "all processes".into(),
        Target::All { idle: true } => "all processes and idle".into(),
        Target::Command(argv) => format!("command `{}` and its children", argv.join(" ")),
        Target::Cgroups(paths) => format!("cgroup {} and below", paths.join(", ")),
        Target::Select { names, pids } => {
            let mut parts = Vec::new();
            if !names.is_empty() {
                parts.push(format!("processes named {}", names.join(", ")));
            }
            if !pids.is_empty() {
                let p: Vec<String> = pids.iter().map(u32::to_string).collect();
                parts.push(format!("pid {}", p.join(", ")));
            }
            parts.join(" and ")
        }
    }
}
