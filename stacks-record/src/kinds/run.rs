//! A kind's part in one recording besides its programs and records ([`Run`]): what it checks
//! before the BPF object loads, sizes while it is open, attaches or starts once it is loaded
//! and the targets are handed over, does at an exec, at each poll and flush, and at the end.
//! [`Runs`] holds the parts of the kinds a recording has and calls each at its step, in the
//! registry's order (the last first when stopping); the recording loop (`record/mod.rs`) calls
//! the steps and names no kind.

use std::any::{Any, TypeId};
use std::collections::HashMap;

use anyhow::{Context as _, Result};

use super::{ALL, EventKind};
use crate::cli::Target;
use crate::kernel::abi::types::bss;
use crate::kernel::abi::{OpenStacksSkel, StacksSkel};
use crate::kernel::globals::Global64;
use crate::spec::{EventSpec, KindArgs};

/// What a kind's part is made from ([`EventKind::run`]).
pub(crate) struct Setup<'a> {
    pub(crate) spec: &'a EventSpec,
    pub(crate) target: &'a Target,
    /// The processes the target names that run now (by pid or by name): where a probe's bare
    /// library name is looked up, and which are warned about when a kind finds nothing in them.
    pub(crate) named: &'a [u32],
    /// Whether the `tracing` span of every event is read (not `--no-spans`).
    pub(crate) spans: bool,
    /// What decoding its records needs, kept by the converter ([`super::Context::data`]).
    pub(crate) data: &'a mut KindData,
}

impl Setup<'_> {
    /// `kind`'s `-e` entry, when the recording has it.
    pub(crate) fn on(&self, kind: &dyn EventKind) -> Option<KindArgs> {
        kind.event().and_then(|e| self.spec.get(e)).copied()
    }

    /// The command the recorder starts (`-- COMMAND`), if that is the target.
    pub(crate) fn command(&self) -> Option<&[String]> {
        match self.target {
            Target::Command(c) => Some(c),
            _ => None,
        }
    }
}

/// A kind's part in one recording. Each step does nothing unless the kind says otherwise.
pub(crate) trait Run {
    /// The BPF object is open, not loaded: size its tables, set what its programs read.
    fn configure(&mut self, _open: &mut OpenStacksSkel<'_>) -> Result<()> {
        Ok(())
    }

    /// The object is loaded, nothing attached yet: take what it needs of the skeleton
    /// (globals), attach what may be attached before the targets start.
    fn loaded(&mut self, _skel: &mut StacksSkel<'_>) -> Result<()> {
        Ok(())
    }

    /// Variables a `--` command gets in its environment.
    fn env(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Whether a `--` command must stop after its exec until every kind's
    /// [`Run::released`] has run (to be changed in its new image first).
    fn holds_exec(&self) -> bool {
        false
    }

    /// The targets are handed to the kernel side and the command is not released yet:
    /// start its own event source; `running`: the target's processes that run now.
    fn started(&mut self, _skel: &StacksSkel<'_>, _running: &[u32]) -> Result<()> {
        Ok(())
    }

    /// The command is released; `held`: its pid, stopped after its exec, when a kind
    /// [`Run::holds_exec`] (it runs once every kind's step is done).
    fn released(&mut self, _skel: &StacksSkel<'_>, _held: Option<u32>) -> Result<()> {
        Ok(())
    }

    /// Process `pid` runs a new image (its exec record is taken).
    fn exec(&mut self, _skel: &StacksSkel<'_>, _pid: u32) {}

    /// Records it makes in user space from its kernel tables, each handed to `each` as a
    /// ring buffer record would be: at each flush, and before a process's exit record is taken
    /// (while the process's maps are still known).
    fn records(&mut self, _skel: &StacksSkel<'_>, _each: &mut dyn FnMut(&[u8])) {}

    /// At every poll of the ring buffers (a few dozen a second) and before each write.
    fn poll(&mut self, _skel: &StacksSkel<'_>) {}

    /// After a batch was written during the recording (about once a second).
    fn flushed(&mut self, _skel: &StacksSkel<'_>) {}

    /// The recording's `-e` changed in place (`--control`): take this kind's entry of `spec`,
    /// whose argument (a rate, a MIN) may differ from the one it started with. Only the kinds
    /// `record::control` changes in place are asked.
    fn retune(&mut self, _spec: &EventSpec) -> Result<()> {
        Ok(())
    }

    /// The end, while the event sources still run: wait (briefly) for what is in flight to
    /// land, so that what [`Run::lost`] finds held is what was really lost.
    fn settle(&mut self, _skel: &StacksSkel<'_>) {}

    /// The end: stop its event source and detach its probes. An error its source met while
    /// running is returned.
    fn stop(&mut self) -> Result<()> {
        Ok(())
    }

    /// After the event sources are detached: events its kernel tables show were lost
    /// without a counter saying so, as (cause, count).
    fn lost(&mut self, _skel: &StacksSkel<'_>) -> Vec<(String, u64)> {
        Vec::new()
    }

    /// Its lines after the summary.
    fn report(&self) {}
}

/// The parts of the kinds a recording has, in [`ALL`]'s order.
pub(crate) struct Runs(Vec<Box<dyn Run>>);

impl Runs {
    /// Every kind's part for `setup` (the kinds that have none for it are left out).
    pub(crate) fn new(setup: &mut Setup<'_>) -> Result<Runs> {
        let mut runs = Vec::new();
        for k in ALL.iter() {
            if let Some(r) = k.run(setup)? {
                runs.push(r);
            }
        }
        Ok(Runs(runs))
    }

    pub(crate) fn configure(&mut self, open: &mut OpenStacksSkel<'_>) -> Result<()> {
        self.0.iter_mut().try_for_each(|r| r.configure(open))
    }

    pub(crate) fn loaded(&mut self, skel: &mut StacksSkel<'_>) -> Result<()> {
        self.0.iter_mut().try_for_each(|r| r.loaded(skel))
    }

    /// Every kind's variables for a `--` command.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        self.0.iter().flat_map(|r| r.env()).collect()
    }

    pub(crate) fn holds_exec(&self) -> bool {
        self.0.iter().any(|r| r.holds_exec())
    }

    pub(crate) fn started(&mut self, skel: &StacksSkel<'_>, running: &[u32]) -> Result<()> {
        self.0.iter_mut().try_for_each(|r| r.started(skel, running))
    }

    pub(crate) fn released(&mut self, skel: &StacksSkel<'_>, held: Option<u32>) -> Result<()> {
        self.0.iter_mut().try_for_each(|r| r.released(skel, held))
    }

    pub(crate) fn exec(&mut self, skel: &StacksSkel<'_>, pid: u32) {
        self.0.iter_mut().for_each(|r| r.exec(skel, pid));
    }

    pub(crate) fn records(&mut self, skel: &StacksSkel<'_>, each: &mut dyn FnMut(&[u8])) {
        self.0.iter_mut().for_each(|r| r.records(skel, each));
    }

    pub(crate) fn poll(&mut self, skel: &StacksSkel<'_>) {
        self.0.iter_mut().for_each(|r| r.poll(skel));
    }

    pub(crate) fn flushed(&mut self, skel: &StacksSkel<'_>) {
        self.0.iter_mut().for_each(|r| r.flushed(skel));
    }

    /// Every part takes `spec`'s arguments ([`Run::retune`]).
    pub(crate) fn retune(&mut self, spec: &EventSpec) -> Result<()> {
        self.0.iter_mut().try_for_each(|r| r.retune(spec))
    }

    /// Every part settles ([`Run::settle`]).
    pub(crate) fn settle(&mut self, skel: &StacksSkel<'_>) {
        self.0.iter_mut().for_each(|r| r.settle(skel));
    }

    /// Stop every part, the last first. Each is stopped even when one before it failed; the
    /// first error is returned.
    pub(crate) fn stop(&mut self) -> Result<()> {
        let mut first = Ok(());
        for r in self.0.iter_mut().rev() {
            let stopped = r.stop();
            if first.is_ok() {
                first = stopped;
            }
        }
        first
    }

    /// Every part's losses found at the end ([`Run::lost`]).
    pub(crate) fn lost(&mut self, skel: &StacksSkel<'_>) -> Vec<(String, u64)> {
        self.0.iter_mut().flat_map(|r| r.lost(skel)).collect()
    }

    pub(crate) fn report(&self) {
        self.0.iter().for_each(|r| r.report());
    }
}

/// What kinds keep for decoding their records, one value per type, put in by their
/// [`EventKind::run`] (the probes' names and arguments), read while decoding.
#[derive(Default)]
pub(crate) struct KindData(HashMap<TypeId, Box<dyn Any>>);

impl KindData {
    /// Keep `value` (in place of one of its type kept before).
    pub(crate) fn insert<T: Any>(&mut self, value: T) {
        self.0.insert(TypeId::of::<T>(), Box::new(value));
    }

    /// The value of type `T` kept, if any.
    pub(crate) fn get<T: Any>(&self) -> Option<&T> {
        self.0.get(&TypeId::of::<T>())?.downcast_ref()
    }
}

/// A kind's arguments kept in 64-bit globals of the BPF object's .bss, written once the object
/// is loaded and again when they change in place (`--control`): `switch`'s MIN and N,
/// `uring`'s MIN, `wake`'s N.
pub(crate) struct ArgGlobals {
    kind: &'static str,
    /// Each global: what it holds of the kind's `-e` entry, where it is, and its handle once
    /// loaded.
    globals: Vec<ArgGlobal>,
}

/// What a global holds of a kind's `-e` entry ([`arg`], [`one_in`]), and where in the .bss it
/// is.
pub(crate) type ArgField = (fn(&KindArgs) -> u64, fn(&mut bss) -> &mut u64);

/// One of [`ArgGlobals`].
struct ArgGlobal {
    value: u64,
    of: fn(&KindArgs) -> u64,
    field: fn(&mut bss) -> &mut u64,
    global: Option<Global64>,
}

/// A kind's MIN or N (its argument; 0 when it has none).
pub(crate) fn arg(on: &KindArgs) -> u64 {
    on.arg.unwrap_or(0)
}

/// A kind's second argument N ([`KindArgs::one_in`]; 1 when it has none).
pub(crate) fn one_in(on: &KindArgs) -> u64 {
    on.one_in.unwrap_or(1)
}

impl ArgGlobals {
    /// The part of kind `on` whose arguments are the globals `fields` pick out of the .bss,
    /// each with what it holds of the entry ([`arg`], [`one_in`]).
    pub(crate) fn boxed(on: &KindArgs, fields: &[ArgField]) -> Box<dyn Run> {
        Box::new(ArgGlobals {
            kind: on.name,
            globals: fields
                .iter()
                .map(|&(of, field)| ArgGlobal {
                    value: of(on),
                    of,
                    field,
                    global: None,
                })
                .collect(),
        })
    }
}

impl Run for ArgGlobals {
    fn loaded(&mut self, skel: &mut StacksSkel<'_>) -> Result<()> {
        for a in &mut self.globals {
            let g = Global64::new(skel, a.field).with_context(|| {
                format!("the BPF object has no .bss for {}'s arguments", self.kind)
            })?;
            g.set(a.value);
            a.global = Some(g);
        }
        Ok(())
    }

    fn retune(&mut self, spec: &EventSpec) -> Result<()> {
        let Some(on) = spec.get(self.kind) else {
            return Ok(());
        };
        for a in &mut self.globals {
            if let Some(g) = &a.global {
                a.value = (a.of)(on);
                g.set(a.value);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_data_keeps_one_value_per_type() {
        let mut d = KindData::default();
        assert!(d.get::<u32>().is_none());
        d.insert(7u32);
        d.insert(String::from("x"));
        d.insert(8u32);
        assert_eq!(d.get::<u32>(), Some(&8));
        assert_eq!(d.get::<String>().map(String::as_str), Some("x"));
        assert!(d.get::<u64>().is_none());
    }
}
