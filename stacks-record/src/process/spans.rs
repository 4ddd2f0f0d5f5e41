//! Span labels: finds tracing-stacks' thread context (the OpenTelemetry thread-context TLS
//! pointer `otel_thread_ctx_v1`, OTEP 4947, and its canary) in each traced process's executable
//! and hands its offsets from the thread pointer to the kernel side (`span_procs`), which reads
//! the span of every event through them; decodes the span part of a record into columns.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::rc::Rc;

use libbpf_rs::MapCore;
use libbpf_rs::MapFlags;
use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
use object::{Object, ObjectSymbol, ReadCache, SymbolKind, elf};

use crate::kernel::abi::StacksSkel;
use crate::kernel::abi::types::{stacks_span, stacks_span_proc};

/// The thread-context pointer's symbol (OTEP 4947).
pub(crate) const CONTEXT_SYMBOL: &str = "otel_thread_ctx_v1";
/// tracing-stacks' canary, a TLS u64 holding [`CANARY`].
pub(crate) const CANARY_SYMBOL: &str = "stacks_tracing_canary";
/// Attribute keys of the record (tracing-stacks' `ATTR_NAME`, `ATTR_PARENT`).
const ATTR_NAME: u8 = 0;
const ATTR_PARENT: u8 = 1;

/// Offsets of the thread context and the canary from a thread's thread pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TlsOffsets {
    pub context: i64,
    pub canary: i64,
    /// The executable has tracing-stacks' USDT probes `stacks_tracing:enter`/`exit`.
    pub probes: bool,
}

/// USDT provider and probe names of span enter and exit.
const PROVIDER: &str = "stacks_tracing";

/// Where the executable at `path` keeps the thread context, from its `.dynsym` (exported) or
/// `.symtab`; `None` when it has none. x86_64 only (TLS variant II: the executable's TLS block
/// ends at the thread pointer, placed as glibc's `_dl_determine_tlsoffset` places it).
pub(crate) fn find(path: &Path) -> Result<Option<TlsOffsets>, String> {
    let file = File::open(path).map_err(|e| e.to_string())?;
    let cache = ReadCache::new(file);
    let Ok(elf) = ElfFile64::<object::Endianness, _>::parse(&cache) else {
        return Ok(None); // not a 64-bit ELF file (a script's interpreter is traced instead)
    };
    if elf.elf_header().e_machine(elf.endian()) != elf::EM_X86_64 {
        return Ok(None);
    }
    let endian = elf.endian();
    let Some(tls) = elf
        .elf_program_headers()
        .iter()
        .find(|p| p.p_type(endian) == elf::PT_TLS)
    else {
        return Ok(None);
    };
    let (memsz, vaddr) = (tls.p_memsz(endian), tls.p_vaddr(endian));
    let align = tls.p_align(endian).max(1);
    let firstbyte = vaddr.wrapping_neg() & (align - 1);
    let block = (memsz - firstbyte).next_multiple_of(align) + firstbyte;
    let lookup = |symbols: &mut dyn Iterator<Item = (String, SymbolKind, u64)>| {
        let (mut context, mut canary) = (None, None);
        for (name, kind, value) in symbols {
            if kind != SymbolKind::Tls {
                continue;
            }
            match name.as_str() {
                CONTEXT_SYMBOL => context = Some(value),
                CANARY_SYMBOL => canary = Some(value),
                _ => continue,
            }
            if let (Some(ctx), Some(can)) = (context, canary) {
                return Some(TlsOffsets {
                    context: ctx as i64 - block as i64,
                    canary: can as i64 - block as i64,
                    probes: false,
                });
            }
        }
        None
    };
    let named =
        |s: object::read::elf::ElfSymbol<'_, '_, elf::FileHeader64<object::Endianness>, _>| {
            Some((s.name().ok()?.to_string(), s.kind(), s.address()))
        };
    let found = lookup(&mut elf.dynamic_symbols().filter_map(named))
        .or_else(|| lookup(&mut elf.symbols().filter_map(named)));
    Ok(found.map(|o| TlsOffsets {
        probes: has_span_probes(&elf),
        ..o
    }))
}

/// Whether the SystemTap notes of `elf` (`.note.stapsdt`) name tracing-stacks' provider.
fn has_span_probes<'d, R: object::ReadRef<'d>>(elf: &ElfFile64<'d, object::Endianness, R>) -> bool {
    use object::read::elf::SectionHeader;
    let Some(notes) = elf.section_by_name(".note.stapsdt") else {
        return false;
    };
    let Ok(Some(mut it)) = notes.elf_section_header().notes(elf.endian(), elf.data()) else {
        return false;
    };
    // Each note's descriptor: three addresses, then "provider\0name\0args\0".
    while let Ok(Some(note)) = it.next() {
        let desc = note.desc();
        if desc.len() > 24 && desc[24..].starts_with(PROVIDER.as_bytes()) {
            return true;
        }
    }
    false
}

/// The span labels of a recording: which processes have their spans read, and what was found.
pub(crate) struct Spans {
    enabled: bool,
    /// `-e span`: attach the enter and exit probes of each executable with them.
    timeline: bool,
    /// The probes attached, by executable.
    links: Vec<libbpf_rs::Link>,
    /// Executables whose probes were attached.
    attached: usize,
    /// Executables whose probes could not be attached (reported at the end).
    pub unattached: Vec<String>,
    /// Offsets by executable (device, inode).
    by_file: HashMap<(u64, u64), Option<TlsOffsets>>,
    /// Processes handed to the kernel side whose canary has not been reported on.
    pending: HashSet<u32>,
    /// Added to the canary's offset (`STACKS_TEST_SPAN_SKEW`: tests make the check fail).
    skew: i64,
    /// Processes whose spans are read.
    pub labelled: HashSet<u32>,
    /// Processes whose canary was not where expected (their spans are not read).
    pub failed: Vec<(u32, String)>,
}

impl Spans {
    pub(crate) fn new(enabled: bool, timeline: bool) -> Spans {
        Spans {
            enabled,
            timeline: enabled && timeline,
            links: Vec::new(),
            attached: 0,
            unattached: Vec::new(),
            by_file: HashMap::new(),
            pending: HashSet::new(),
            skew: std::env::var("STACKS_TEST_SPAN_SKEW")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            labelled: HashSet::new(),
            failed: Vec::new(),
        }
    }

    /// Look for the thread context in process `pid`'s executable and hand it to the kernel
    /// side. A process without one (or gone) is left alone, silently.
    pub(crate) fn register(&mut self, skel: &StacksSkel<'_>, pid: u32) {
        if !self.enabled {
            return;
        }
        let exe = format!("/proc/{pid}/exe");
        let Ok(meta) = std::fs::metadata(&exe) else {
            return;
        };
        let key = (meta.dev(), meta.ino());
        let new = !self.by_file.contains_key(&key);
        let offsets = *self
            .by_file
            .entry(key)
            .or_insert_with(|| find(Path::new(&exe)).ok().flatten());
        let Some(o) = offsets else { return };
        if new && self.timeline && o.probes {
            self.attach(skel, &exe);
        }
        let value = stacks_span_proc {
            ctx_off: o.context,
            canary_off: o.canary + self.skew,
            checked: 0,
            failed: 0,
        };
        // SAFETY: a plain #[repr(C)] struct of integers, viewed as its bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&raw const value).cast::<u8>(),
                size_of::<stacks_span_proc>(),
            )
        };
        if skel
            .maps
            .span_procs
            .update(&pid.to_ne_bytes(), bytes, MapFlags::ANY)
            .is_ok()
        {
            self.pending.insert(pid);
            self.labelled.insert(pid);
        }
    }

    /// Attach the span enter and exit programs to the executable at `exe` (for every process
    /// running it: the programs keep to the targets).
    fn attach(&mut self, skel: &StacksSkel<'_>, exe: &str) {
        // libbpf's own messages about a failure are replaced by ours.
        let previous = libbpf_rs::set_print(None);
        let mut links = Vec::new();
        for (prog, name) in [
            (&skel.progs.on_span_enter, "enter"),
            (&skel.progs.on_span_exit, "exit"),
        ] {
            match prog.attach_usdt(-1, exe, PROVIDER, name) {
                Ok(l) => links.push(l),
                Err(e) => {
                    let file =
                        std::fs::read_link(exe).map_or(exe.into(), |p| p.display().to_string());
                    self.unattached.push(format!("{file}: {e}"));
                    links.clear();
                    break;
                }
            }
        }
        libbpf_rs::set_print(previous);
        self.attached += usize::from(!links.is_empty());
        self.links.extend(links);
    }

    /// Warnings for the summary: `-e span` with no executable to attach to, or that failed.
    pub(crate) fn report(&self) {
        for u in &self.unattached {
            eprintln!("stacks-record: warning: span probes not attached: {u}");
        }
        if self.timeline && self.attached == 0 && self.unattached.is_empty() {
            eprintln!(
                "stacks-record: warning: -e span: no traced executable has tracing-stacks' USDT probes (stacks_tracing:enter/exit), so there are no span rows"
            );
        }
    }

    /// Detach the span probes (the end of the recording).
    pub(crate) fn detach(&mut self) {
        self.links.clear();
    }

    /// Report processes whose canary check failed since the last call (once each), and stop
    /// asking about those whose check passed or that are gone.
    pub(crate) fn check(&mut self, skel: &StacksSkel<'_>) {
        let mut done = Vec::new();
        for &pid in &self.pending {
            let Ok(Some(v)) = skel
                .maps
                .span_procs
                .lookup(&pid.to_ne_bytes(), MapFlags::ANY)
            else {
                done.push(pid);
                continue;
            };
            if v.len() < size_of::<stacks_span_proc>() {
                continue;
            }
            // SAFETY: the map's value is a stacks_span_proc (length checked), all integers.
            let p: stacks_span_proc = unsafe { std::ptr::read_unaligned(v.as_ptr().cast()) };
            if p.failed != 0 {
                let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                eprintln!(
                    "stacks-record: span labels off for pid {pid} ({exe}): its thread context's TLS offset did not check out"
                );
                self.labelled.remove(&pid);
                self.failed.push((pid, exe));
                done.push(pid);
            } else if p.checked != 0 {
                done.push(pid);
            }
        }
        for pid in done {
            self.pending.remove(&pid);
        }
    }
}

/// A row's span, as its columns show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SpanLabel {
    pub id: u64,
    pub parent: Option<u64>,
    pub name: Option<Rc<str>>,
    /// 32 lowercase hex digits.
    pub trace_id: Rc<str>,
}

/// Decoded span labels by span id (a span's record does not change while it lives).
#[derive(Default)]
pub(crate) struct SpanLabels {
    seen: HashMap<u64, SpanLabel, ahash::RandomState>,
}

impl SpanLabels {
    /// The label of a record's span part, `None` when it names no span.
    pub(crate) fn label(&mut self, s: &stacks_span) -> Option<SpanLabel> {
        let id = u64::from_be_bytes(s.span_id.to_ne_bytes());
        if id == 0 {
            return None;
        }
        if let Some(l) = self.seen.get(&id) {
            return Some(l.clone());
        }
        let label = decode(id, s);
        if self.seen.len() >= 1 << 16 {
            self.seen.clear();
        }
        self.seen.insert(id, label.clone());
        Some(label)
    }
}

fn decode(id: u64, s: &stacks_span) -> SpanLabel {
    let n = usize::from(s.attrs_len).min(s.attrs.len());
    let (mut name, mut parent) = (None, None);
    let mut rest = &s.attrs[..n];
    while let [key, len, tail @ ..] = rest {
        let len = usize::from(*len);
        // An attribute past the bytes read is cut short: a name keeps its valid prefix.
        let value = &tail[..len.min(tail.len())];
        match *key {
            ATTR_NAME => {
                let valid = match std::str::from_utf8(value) {
                    Ok(v) => v,
                    Err(e) => std::str::from_utf8(&value[..e.valid_up_to()]).unwrap_or(""),
                };
                name = Some(Rc::from(valid));
            }
            ATTR_PARENT if value.len() == 8 => {
                parent = Some(u64::from_be_bytes(value.try_into().expect("8 bytes")));
            }
            _ => {}
        }
        rest = tail.get(len..).unwrap_or(&[]);
    }
    let trace_id: String = s.trace_id.iter().map(|b| format!("{b:02x}")).collect();
    SpanLabel {
        id,
        parent,
        name,
        trace_id: Rc::from(trace_id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" {
        fn arch_prctl(code: i32, addr: *mut u64) -> i32;
    }

    /// The offsets found in this test binary (which links tracing-stacks, its thread context
    /// in `.symtab` only) lead from this thread's FS base to its canary and context.
    #[test]
    fn offsets_found_in_symtab_reach_this_threads_variables() {
        let o = find(Path::new("/proc/self/exe"))
            .unwrap()
            .expect("thread context");
        let mut fs = 0u64;
        // SAFETY: ARCH_GET_FS writes the FS base into `fs`.
        assert_eq!(unsafe { arch_prctl(0x1003, &mut fs) }, 0);
        let (ctx, canary) = tracing_stacks::current();
        assert_eq!(canary, tracing_stacks::CANARY);
        let at = |off: i64| fs.wrapping_add(off as u64) as *const u64;
        // SAFETY: both are this thread's TLS variables, if the offsets are right.
        assert_eq!(unsafe { *at(o.canary) }, tracing_stacks::CANARY);
        assert_eq!(unsafe { *at(o.context) }, ctx as u64);
    }

    #[test]
    fn no_thread_context_in_a_c_program() {
        assert_eq!(find(Path::new("/bin/sh")).unwrap(), None);
    }

    #[test]
    fn attributes_decode_with_a_name_cut_short() {
        let r = tracing_stacks::Record::new(
            0xab,
            7,
            3,
            "a_rather_long_span_name_that_goes_past_the_bytes_read_xxxxxxxxxxxx",
        );
        let b = r.bytes();
        let mut s = stacks_span::default();
        s.trace_id.copy_from_slice(&b[..16]);
        s.span_id = u64::from_ne_bytes(b[16..24].try_into().unwrap());
        s.attrs_len = (b.len() - 28) as u16;
        let n = s.attrs.len().min(b.len() - 28);
        s.attrs[..n].copy_from_slice(&b[28..28 + n]);
        let l = SpanLabels::default().label(&s).unwrap();
        assert_eq!((l.id, l.parent), (7, Some(3)));
        assert_eq!(&*l.trace_id, "000000000000000000000000000000ab");
        let name = l.name.unwrap();
        assert!(
            name.starts_with("a_rather_long") && name.len() == 64 - 10 - 2,
            "{name}"
        );
    }
}
