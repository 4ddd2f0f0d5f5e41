//! Each distinct captured stack once: the stacks a recording captures are looked up by what
//! was captured (the kernel's raw addresses and the ids of the normalized user frames), and a
//! stack seen for the first time gets the next stream-global key and its entries in the three
//! stack dictionaries (`kstack`, `ustack`, `kstack_symbols`), which grow together so one key
//! indexes the same captured stack in all three. Rows hold keys; the output stream sends each
//! new entry once (delta dictionaries, see `stacks_stream::dict`).
//!
//! What a key's entries hold depends only on what the key is made of: kernel symbols and the
//! dropped tracing frames follow from the raw kernel addresses (kallsyms does not change
//! during a recording), and user frame ids stand for whole normalized frames (address, module,
//! build id, offset, error), so two processes whose frames normalize differently never share
//! an entry.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{
    ListBuilder, StringBuilder, StructBuilder, UInt32Builder, UInt64Builder,
};
use arrow_array::{ArrayRef, Int32Array};
use arrow_schema::{ArrowError, DataType, Field, Fields, Schema};
use stacks_stream::dict::{self, StackDictionary};
use stacks_stream::schema::col;

use crate::process::kallsyms::KernelSymbol;
use crate::process::normalize::UserFrame;

/// A row's keys into the stack dictionaries; `None` where the row's column is null (the stack
/// was not requested, or for `kstack_symbols`, not resolved).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StackRef {
    pub kstack: Option<i32>,
    pub ustack: Option<i32>,
    pub kstack_symbols: Option<i32>,
}

/// The entries of a newly seen captured stack, as the columns show them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct NewStack {
    /// Kernel addresses, leaf first, tracing frames dropped; empty when capture failed; `None`
    /// when not requested.
    pub kstack: Option<Vec<u64>>,
    /// Normalized user frames, leaf first; empty when capture failed; `None` when not
    /// requested.
    pub ustack: Option<Vec<UserFrame>>,
    /// The symbol of each `kstack` address; `None` when not resolved.
    pub kstack_symbols: Option<Vec<Option<KernelSymbol>>>,
}

/// A stack as captured: `None` when not requested, `Err(errno)` when capture failed.
pub(crate) type Captured<'a, T> = Option<Result<&'a [T], i32>>;

/// Entries added since the last batch, built column by column.
struct Pending {
    kstack: ListBuilder<UInt64Builder>,
    ustack: ListBuilder<StructBuilder>,
    kstack_symbols: ListBuilder<StructBuilder>,
    len: usize,
}

/// The captured stacks of a recording, each with its key, and the stack dictionaries.
pub(crate) struct StackTable {
    keys: HashMap<Box<[u64]>, StackRef, ahash::RandomState>,
    /// Stacks given a key so far (one seen again after a restart counts again).
    keyed: usize,
    /// The lookup key of the stack being looked up (reused: a repeat allocates nothing).
    probe: Vec<u64>,
    pending: Pending,
    kstack: StackDictionary,
    ustack: StackDictionary,
    kstack_symbols: StackDictionary,
    /// When the dictionaries (re)started.
    since: std::time::Instant,
}

/// Age past which the dictionaries start over once they hold [`GENERATION_MIN_BYTES`]: what
/// they (and every cache of frame ids restarted with them) hold is then what the last minute
/// saw, not everything since the recording began.
const GENERATION: std::time::Duration = std::time::Duration::from_secs(60);

/// Bytes of entries below which an old dictionary is kept (a steady program's few stacks are
/// not sent again every minute).
const GENERATION_MIN_BYTES: usize = 1 << 20;

/// A restart of the stack dictionaries: each kept entry's new key by its old one (rows keyed
/// before it by other keys mean nothing any more).
pub(crate) type Renumbered = HashMap<i32, i32, ahash::RandomState>;

/// The three stack columns of a batch, by name.
pub(crate) type StackColumns = [(&'static str, ArrayRef); 3];

/// The list element field of a stack column of `schema` (plain or dictionary-encoded).
fn element(schema: &Schema, name: &str) -> Result<Arc<Field>, ArrowError> {
    let f = schema.field_with_name(name)?;
    match dict::value_type(f.data_type()) {
        DataType::List(e) => Ok(Arc::clone(e)),
        other => Err(ArrowError::SchemaError(format!(
            "column `{name}` is {other}, not a list"
        ))),
    }
}

fn struct_fields(e: &Field) -> Result<Fields, ArrowError> {
    match e.data_type() {
        DataType::Struct(f) => Ok(f.clone()),
        other => Err(ArrowError::SchemaError(format!(
            "list elements `{}` are {other}, not structs",
            e.name()
        ))),
    }
}

impl StackTable {
    /// An empty table for the stack columns of `schema` (the raw schema, plain or encoded).
    pub(crate) fn new(schema: &Schema) -> Result<Self, ArrowError> {
        let k = element(schema, col::KSTACK)?;
        let u = element(schema, col::USTACK)?;
        let s = element(schema, col::KSTACK_SYMBOLS)?;
        let (ufields, sfields) = (struct_fields(&u)?, struct_fields(&s)?);
        let pending = Pending {
            kstack: ListBuilder::new(UInt64Builder::new()).with_field(Arc::clone(&k)),
            ustack: ListBuilder::new(StructBuilder::from_fields(ufields, 0))
                .with_field(Arc::clone(&u)),
            kstack_symbols: ListBuilder::new(StructBuilder::from_fields(sfields, 0))
                .with_field(Arc::clone(&s)),
            len: 0,
        };
        Ok(StackTable {
            keys: HashMap::with_hasher(ahash::RandomState::with_seeds(
                0x5eed_0001,
                0x5eed_0002,
                0x5eed_0003,
                0x5eed_0004,
            )),
            keyed: 0,
            probe: Vec::new(),
            pending,
            kstack: StackDictionary::new(&DataType::List(k)),
            ustack: StackDictionary::new(&DataType::List(u)),
            kstack_symbols: StackDictionary::new(&DataType::List(s)),
            since: std::time::Instant::now(),
        })
    }

    /// Distinct captured stacks so far (dictionary entries sent; after a restart a stack seen
    /// again is sent, and counted, again).
    pub(crate) fn len(&self) -> usize {
        self.keyed
    }

    /// The keys of the captured stack (`kstack`: raw kernel addresses, `ustack`: user frame
    /// ids); `entries` gives its entries the first time it is seen. A row with neither stack
    /// has no keys.
    pub(crate) fn key(
        &mut self,
        kstack: Captured<'_, u64>,
        ustack: Captured<'_, u32>,
        entries: impl FnOnce() -> NewStack,
    ) -> StackRef {
        if kstack.is_none() && ustack.is_none() {
            return StackRef::default();
        }
        encode(&mut self.probe, kstack, ustack);
        if let Some(r) = self.keys.get(self.probe.as_slice()) {
            return *r;
        }
        let next = self.kstack.len() + self.pending.len;
        // Memory runs out long before 2^31 distinct stacks; past that, rows lose their stacks.
        let Ok(key) = i32::try_from(next) else {
            return StackRef::default();
        };
        let new = entries();
        let r = StackRef {
            kstack: new.kstack.is_some().then_some(key),
            ustack: new.ustack.is_some().then_some(key),
            kstack_symbols: new.kstack_symbols.is_some().then_some(key),
        };
        self.pending.push(&new);
        self.keys.insert(self.probe.as_slice().into(), r);
        self.keyed += 1;
        r
    }

    /// The three stack columns of a batch whose rows hold `refs`: the dictionaries with this
    /// batch's new entries appended, and each row's keys.
    #[cfg(test)]
    pub(crate) fn columns(&mut self, refs: &[StackRef]) -> Result<StackColumns, ArrowError> {
        Ok(self.columns_pinned(refs, &[])?.0)
    }

    /// As [`Self::columns`]; when the dictionaries start over, the entries of `pinned` (keys
    /// held for later rows, such as the stacks `state` rows repeat) are kept too, and the new
    /// key of each kept entry is returned.
    pub(crate) fn columns_pinned(
        &mut self,
        refs: &[StackRef],
        pinned: &[i32],
    ) -> Result<(StackColumns, Option<Renumbered>), ArrowError> {
        // What consumers hold: the dictionary as the last batch sent it. A restart must be
        // shorter than that (not only than the dictionary with this batch's new entries), or
        // a consumer would take the new dictionary for a delta of the old one.
        let sent = self.kstack.len();
        let p = &mut self.pending;
        if p.len > 0 {
            self.kstack.extend(&p.kstack.finish())?;
            self.ustack.extend(&p.ustack.finish())?;
            self.kstack_symbols.extend(&p.kstack_symbols.finish())?;
            p.len = 0;
        }
        // Past dict::MAX_ENTRIES or dict::MAX_BYTES, or a minute old, start over with the
        // entries this batch uses (a shorter dictionary, which consumers take as a new one); later stacks are
        // keyed afresh.
        let row_keys: Vec<Option<i32>> = refs
            .iter()
            .map(|r| r.kstack.or(r.ustack).or(r.kstack_symbols))
            .chain(pinned.iter().map(|&k| Some(k)))
            .collect();
        let bytes = self.kstack.bytes() + self.ustack.bytes() + self.kstack_symbols.bytes();
        let full = self.kstack.is_full()
            || self.ustack.is_full()
            || self.kstack_symbols.is_full()
            || (self.since.elapsed() >= GENERATION && bytes >= GENERATION_MIN_BYTES);
        let mut map = None;
        let renumbered = match dict::restart_plan(full, sent, &row_keys) {
            Some((keep, mut rows)) => {
                self.kstack.restart(&keep)?;
                self.ustack.restart(&keep)?;
                self.kstack_symbols.restart(&keep)?;
                self.keys.clear();
                self.since = std::time::Instant::now();
                rows.truncate(refs.len());
                map = Some(
                    keep.iter()
                        .enumerate()
                        .map(|(new, &old)| (old as i32, new as i32))
                        .collect(),
                );
                Some(rows)
            }
            None => None,
        };
        let keys = |f: fn(&StackRef) -> Option<i32>| -> Int32Array {
            match &renumbered {
                None => refs.iter().map(f).collect(),
                Some(rows) => refs.iter().zip(rows).map(|(r, k)| f(r).and(*k)).collect(),
            }
        };
        let columns = [
            (col::KSTACK, self.kstack.stream_column(keys(|r| r.kstack))?),
            (col::USTACK, self.ustack.stream_column(keys(|r| r.ustack))?),
            (
                col::KSTACK_SYMBOLS,
                self.kstack_symbols
                    .stream_column(keys(|r| r.kstack_symbols))?,
            ),
        ];
        Ok((columns, map))
    }
}

/// The lookup key of a captured stack: a word with both stacks' states and the kernel
/// stack's length, the kernel addresses, then the user frame ids.
fn encode(probe: &mut Vec<u64>, kstack: Captured<'_, u64>, ustack: Captured<'_, u32>) {
    fn split<'a, T>(c: Captured<'a, T>) -> (u64, &'a [T]) {
        match c {
            None => (0, &[]),
            Some(Err(_)) => (1, &[]),
            Some(Ok(frames)) => (2, frames),
        }
    }
    let ((ks, k), (us, u)) = (split(kstack), split(ustack));
    probe.clear();
    probe.push(ks | (us << 2) | ((k.len() as u64) << 8));
    probe.extend_from_slice(k);
    probe.extend(u.iter().map(|&id| u64::from(id)));
}

impl Pending {
    /// Append a new captured stack's entries (a null entry for a stack not requested).
    fn push(&mut self, n: &NewStack) {
        match &n.kstack {
            None => self.kstack.append_null(),
            Some(addrs) => {
                self.kstack.values().append_slice(addrs);
                self.kstack.append(true);
            }
        }
        match &n.ustack {
            None => self.ustack.append_null(),
            Some(frames) => {
                let s = self.ustack.values();
                for f in frames {
                    s.field_builder::<UInt64Builder>(0)
                        .expect("addr")
                        .append_value(f.addr);
                    s.field_builder::<StringBuilder>(1)
                        .expect("module")
                        .append_option(f.module.as_deref());
                    s.field_builder::<StringBuilder>(2)
                        .expect("build_id")
                        .append_option(f.build_id.as_deref());
                    s.field_builder::<UInt64Builder>(3)
                        .expect("offset")
                        .append_option(f.offset);
                    s.field_builder::<StringBuilder>(4)
                        .expect("error")
                        .append_option(f.error.as_deref());
                    s.field_builder::<StringBuilder>(5)
                        .expect("symbol")
                        .append_option(f.symbol.as_deref());
                    s.field_builder::<StringBuilder>(6)
                        .expect("file")
                        .append_option(f.file.as_deref());
                    s.field_builder::<UInt32Builder>(7)
                        .expect("line")
                        .append_option(f.line);
                    s.append(true);
                }
                self.ustack.append(true);
            }
        }
        match &n.kstack_symbols {
            None => self.kstack_symbols.append_null(),
            Some(syms) => {
                let s = self.kstack_symbols.values();
                for sym in syms {
                    match sym {
                        Some(k) => {
                            s.field_builder::<StringBuilder>(0)
                                .expect("symbol")
                                .append_value(&k.symbol);
                            s.field_builder::<UInt64Builder>(1)
                                .expect("offset")
                                .append_value(k.offset);
                            s.field_builder::<StringBuilder>(2)
                                .expect("module")
                                .append_option(k.module.as_deref());
                            s.append(true);
                        }
                        None => {
                            s.field_builder::<StringBuilder>(0)
                                .expect("symbol")
                                .append_value("");
                            s.field_builder::<UInt64Builder>(1)
                                .expect("offset")
                                .append_value(0);
                            s.field_builder::<StringBuilder>(2)
                                .expect("module")
                                .append_null();
                            s.append(false);
                        }
                    }
                }
                self.kstack_symbols.append(true);
            }
        }
        self.len += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::rows::{Extra, Row, RowBuilder};
    use crate::process::normalize::FrameTable;
    use arrow_array::cast::AsArray;
    use arrow_array::types::UInt64Type;
    use arrow_array::{Array, RecordBatch};
    use std::collections::HashMap as Map;

    fn frame(addr: u64, module: &str, build_id: &str, offset: u64) -> UserFrame {
        UserFrame {
            addr,
            module: Some(module.into()),
            build_id: Some(build_id.into()),
            offset: Some(offset),
            error: None,
            symbol: None,
            file: None,
            line: None,
        }
    }

    fn sym(name: &str, offset: u64) -> Option<KernelSymbol> {
        Some(KernelSymbol {
            symbol: name.into(),
            offset,
            module: None,
        })
    }

    fn raw() -> Arc<Schema> {
        Arc::new(stacks_stream::raw_schema(Default::default()))
    }

    /// The entries a test stack gets: kernel frames as captured (no tracing frames), symbols
    /// named after the address, user frames from the table.
    fn entries(k: Captured<'_, u64>, u: Captured<'_, u32>, t: &FrameTable) -> NewStack {
        NewStack {
            kstack: k.map(|r| r.map(<[u64]>::to_vec).unwrap_or_default()),
            ustack: u.map(|r| {
                r.map(|ids| ids.iter().map(|&i| t.get(i).clone()).collect())
                    .unwrap_or_default()
            }),
            kstack_symbols: match k {
                Some(Ok(a)) => Some(
                    a.iter()
                        .map(|&x| (x != 0).then(|| sym(&format!("f{x:x}"), x)).flatten())
                        .collect(),
                ),
                _ => None,
            },
        }
    }

    #[test]
    fn same_stack_same_key_across_batches() {
        let mut t = FrameTable::default();
        let a = t.intern(frame(0x10, "/bin/a", "aa", 0x10));
        let mut s = StackTable::new(&raw()).unwrap();
        let (k, u) = ([1u64, 2, 3], [a]);
        let r1 = s.key(Some(Ok(&k)), Some(Ok(&u)), || {
            entries(Some(Ok(&k)), Some(Ok(&u)), &t)
        });
        let r2 = s.key(Some(Ok(&k)), Some(Ok(&u)), || {
            panic!("a repeat is not rebuilt")
        });
        assert_eq!(r1, r2);
        assert_eq!(
            r1,
            StackRef {
                kstack: Some(0),
                ustack: Some(0),
                kstack_symbols: Some(0)
            }
        );
        let [(_, kcol), _, _] = s.columns(&[r1, r2]).unwrap();
        let first = kcol
            .as_dictionary::<arrow_array::types::Int32Type>()
            .values()
            .len();
        // Next batch: the same stack again, and a new one.
        let k2 = [1u64, 2];
        let r3 = s.key(Some(Ok(&k)), Some(Ok(&u)), || {
            panic!("known across batches")
        });
        let r4 = s.key(Some(Ok(&k2)), Some(Ok(&u)), || {
            entries(Some(Ok(&k2)), Some(Ok(&u)), &t)
        });
        assert_eq!(r3, r1);
        assert_eq!(r4.kstack, Some(1));
        let [(_, kcol), (_, ucol), (_, scol)] = s.columns(&[r3, r4]).unwrap();
        for c in [&kcol, &ucol, &scol] {
            assert_eq!(
                c.as_dictionary::<arrow_array::types::Int32Type>()
                    .values()
                    .len(),
                2
            );
        }
        assert_eq!(first, 1, "the dictionary only grows");
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn dictionaries_start_over_shorter_past_the_limit() {
        let t = FrameTable::default();
        let mut s = StackTable::new(&raw()).unwrap();
        let key = |s: &mut StackTable, x: u64| {
            let k = [x, x + 1];
            s.key(Some(Ok(&k)), None, || entries(Some(Ok(&k)), None, &t))
        };
        let refs: Vec<StackRef> = (0..dict::MAX_ENTRIES as u64)
            .map(|x| key(&mut s, x))
            .collect();
        let [(_, kcol), _, _] = s.columns(&refs).unwrap();
        let len = |c: &ArrayRef| {
            c.as_dictionary::<arrow_array::types::Int32Type>()
                .values()
                .len()
        };
        assert_eq!(
            len(&kcol),
            dict::MAX_ENTRIES,
            "a batch using every entry keeps them"
        );
        // The next batch uses two stacks, one of them new: the dictionary starts over with them.
        let refs = [key(&mut s, 7), key(&mut s, 1 << 40), key(&mut s, 7)];
        let [(_, kcol), (_, ucol), _] = s.columns(&refs).unwrap();
        assert_eq!(len(&kcol), 2, "shorter: consumers see a new dictionary");
        let plain = arrow_cast::cast(
            &kcol,
            &stacks_stream::dict::value_type(kcol.data_type()).clone(),
        )
        .unwrap();
        let plain = plain.as_list::<i32>();
        assert_eq!(
            plain
                .value(0)
                .as_primitive::<arrow_array::types::UInt64Type>()
                .values()
                .as_ref(),
            &[7, 8]
        );
        assert_eq!(
            plain
                .value(2)
                .as_primitive::<arrow_array::types::UInt64Type>()
                .values()
                .as_ref(),
            &[7, 8]
        );
        assert_eq!(
            plain
                .value(1)
                .as_primitive::<arrow_array::types::UInt64Type>()
                .values()
                .as_ref(),
            &[1 << 40, (1 << 40) + 1]
        );
        assert_eq!(
            ucol.null_count() + ucol.logical_null_count(),
            6,
            "no user stacks asked"
        );
        // Keys continue from the new dictionary.
        let r = key(&mut s, 7);
        assert_eq!(r.kstack, Some(2), "forgotten at the restart: keyed again");
        assert_eq!(s.len(), dict::MAX_ENTRIES + 2);
    }

    #[test]
    fn a_restart_is_shorter_than_what_consumers_hold() {
        let t = FrameTable::default();
        let mut s = StackTable::new(&raw()).unwrap();
        let key = |s: &mut StackTable, x: u64| {
            let k = [x, x + 1];
            s.key(Some(Ok(&k)), None, || entries(Some(Ok(&k)), None, &t))
        };
        let held = dict::MAX_ENTRIES as u64 - 536;
        let refs: Vec<StackRef> = (0..held).map(|x| key(&mut s, x)).collect();
        s.columns(&refs).unwrap();
        // 1,000 new stacks fill the dictionary; the batch uses more entries than consumers
        // hold (but fewer than the dictionary now has): starting over would look like growth.
        let refs: Vec<StackRef> = (536..held + 1000).map(|x| key(&mut s, x)).collect();
        let [(_, kcol), _, _] = s.columns(&refs).unwrap();
        let len = kcol
            .as_dictionary::<arrow_array::types::Int32Type>()
            .values()
            .len();
        assert_eq!(len, held as usize + 1000, "grown, not started over");
    }

    #[test]
    fn pinned_entries_survive_a_restart_renumbered() {
        let t = FrameTable::default();
        let mut s = StackTable::new(&raw()).unwrap();
        let key = |s: &mut StackTable, x: u64| {
            let k = [x, x + 1];
            s.key(Some(Ok(&k)), None, || entries(Some(Ok(&k)), None, &t))
        };
        let refs: Vec<StackRef> = (0..dict::MAX_ENTRIES as u64)
            .map(|x| key(&mut s, x))
            .collect();
        let (_, map) = s.columns_pinned(&refs, &[]).unwrap();
        assert!(map.is_none(), "a batch using every entry keeps them");
        // Stack 5 is used by no row of the next batch, but held for later rows.
        let refs = [key(&mut s, 9)];
        let ([(_, kcol), _, _], map) = s.columns_pinned(&refs, &[5]).unwrap();
        let map = map.expect("restarted");
        assert_eq!(map.len(), 2);
        assert_eq!(map[&9], 0);
        let pinned = map[&5] as usize;
        let plain = arrow_cast::cast(
            &kcol,
            &stacks_stream::dict::value_type(kcol.data_type()).clone(),
        )
        .unwrap();
        let values = kcol
            .as_dictionary::<arrow_array::types::Int32Type>()
            .values()
            .as_list::<i32>()
            .value(pinned);
        assert_eq!(
            values.as_primitive::<UInt64Type>().values().as_ref(),
            &[5, 6],
            "the pinned entry under its new key"
        );
        assert_eq!(plain.len(), 1);
    }

    /// Below the size limits, dictionaries a minute old start over once they hold 1 MiB; a
    /// younger or smaller one keeps growing.
    #[test]
    fn dictionaries_a_minute_old_start_over() {
        let t = FrameTable::default();
        let mut s = StackTable::new(&raw()).unwrap();
        // 2,500 kernel stacks of 64 addresses: over 1 MiB of entries, under MAX_BYTES.
        let key = |s: &mut StackTable, x: u64| {
            let k: Vec<u64> = (x..x + 64).collect();
            s.key(Some(Ok(&k)), None, || entries(Some(Ok(&k)), None, &t))
        };
        let refs: Vec<StackRef> = (0..2500u64).map(|x| key(&mut s, x * 100)).collect();
        assert!(s.columns_pinned(&refs, &[]).unwrap().1.is_none());
        assert!(!s.kstack.is_full() && s.kstack.bytes() >= GENERATION_MIN_BYTES);
        let one = [key(&mut s, 7)];
        assert!(
            s.columns_pinned(&one, &[]).unwrap().1.is_none(),
            "young: kept"
        );
        s.since -= GENERATION;
        let one = [key(&mut s, 7)];
        let map = s.columns_pinned(&one, &[]).unwrap().1;
        assert_eq!(map.map(|m| m.len()), Some(1), "a minute old: started over");
        assert!(s.since.elapsed() < GENERATION);
        // Small and old: kept.
        s.since -= GENERATION;
        let one = [key(&mut s, 7)];
        assert!(s.columns_pinned(&one, &[]).unwrap().1.is_none());
    }

    #[test]
    fn user_frames_normalized_differently_get_their_own_keys() {
        // One address, two processes whose maps put different files there.
        let mut t = FrameTable::default();
        let a = t.intern(frame(0x1000, "/bin/a", "aa", 0x10));
        let b = t.intern(frame(0x1000, "/bin/b", "bb", 0x20));
        assert_ne!(a, b);
        assert_eq!(
            t.intern(frame(0x1000, "/bin/a", "aa", 0x10)),
            a,
            "interned once"
        );
        let mut s = StackTable::new(&raw()).unwrap();
        let k = [7u64];
        let ra = s.key(Some(Ok(&k)), Some(Ok(&[a])), || {
            entries(Some(Ok(&k)), Some(Ok(&[a])), &t)
        });
        let rb = s.key(Some(Ok(&k)), Some(Ok(&[b])), || {
            entries(Some(Ok(&k)), Some(Ok(&[b])), &t)
        });
        assert_ne!(ra.ustack, rb.ustack);
        let rows = decode(&batch_of(&mut s, &[ra, rb]));
        assert_eq!(
            rows[0].ustack.as_ref().unwrap()[0].module.as_deref(),
            Some("/bin/a")
        );
        assert_eq!(
            rows[1].ustack.as_ref().unwrap()[0].module.as_deref(),
            Some("/bin/b")
        );
        // A kernel-only stack and a kernel+user one with the same kernel frames differ too.
        let rk = s.key(Some(Ok(&k)), None, || entries(Some(Ok(&k)), None, &t));
        assert_ne!(rk.kstack, ra.kstack);
        assert_eq!(rk.ustack, None);
    }

    #[test]
    fn null_and_failed_stacks() {
        let t = FrameTable::default();
        let mut s = StackTable::new(&raw()).unwrap();
        let none = s.key(None, None, || panic!("no stack, no entry"));
        assert_eq!(none, StackRef::default());
        assert_eq!(s.len(), 0);
        let kfail = s.key(Some(Err(-14)), None, || entries(Some(Err(-14)), None, &t));
        assert_eq!(
            kfail,
            StackRef {
                kstack: Some(0),
                ustack: None,
                kstack_symbols: None
            }
        );
        // Another errno: the same (empty) stack, the errno is the row's.
        assert_eq!(s.key(Some(Err(-2)), None, || panic!("known")), kfail);
        let ufail = s.key(None, Some(Err(-14)), || entries(None, Some(Err(-14)), &t));
        assert_eq!(ufail.kstack, None);
        assert_eq!(ufail.ustack, Some(1));
        // An empty kernel stack that was captured is not a failed one (it has symbols).
        let empty = s.key(Some(Ok(&[])), None, || entries(Some(Ok(&[])), None, &t));
        assert_eq!(empty.kstack_symbols, Some(2));
        let rows = decode(&batch_of(&mut s, &[none, kfail, ufail, empty]));
        assert_eq!(rows[0], NewStack::default());
        assert_eq!(rows[1].kstack, Some(vec![]));
        assert_eq!(rows[1].ustack, None);
        assert_eq!(rows[2].ustack, Some(vec![]));
        assert_eq!(rows[3].kstack_symbols, Some(vec![]));
    }

    /// The stack columns of rows holding `refs`, as a batch.
    fn batch_of(s: &mut StackTable, refs: &[StackRef]) -> RecordBatch {
        let cols = s.columns(refs).unwrap();
        let enc = dict::encoded_schema(&raw());
        let fields: Vec<Field> = cols
            .iter()
            .map(|(n, _)| enc.field_with_name(n).unwrap().clone())
            .collect();
        let arrays = cols.iter().map(|(_, a)| Arc::clone(a)).collect();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap()
    }

    /// Every row's stacks as plain values, read through the plain (value) type of each column.
    fn decode(batch: &RecordBatch) -> Vec<NewStack> {
        let plain = |name: &str| {
            let c = batch.column_by_name(name).unwrap();
            let c = arrow_cast::cast(c, dict::value_type(c.data_type())).unwrap();
            c.as_list::<i32>().clone()
        };
        let (k, u, s) = (plain("kstack"), plain("ustack"), plain("kstack_symbols"));
        (0..batch.num_rows())
            .map(|row| NewStack {
                kstack: k
                    .is_valid(row)
                    .then(|| k.value(row).as_primitive::<UInt64Type>().values().to_vec()),
                ustack: u.is_valid(row).then(|| {
                    let v = u.value(row);
                    let f = v.as_struct();
                    let text = |n: &str, i: usize| {
                        let c = f.column_by_name(n).unwrap().as_string::<i32>();
                        c.is_valid(i).then(|| c.value(i).to_string())
                    };
                    let num = |n: &str, i: usize| {
                        let c = f.column_by_name(n).unwrap().as_primitive::<UInt64Type>();
                        c.is_valid(i).then(|| c.value(i))
                    };
                    (0..f.len())
                        .map(|i| UserFrame {
                            addr: num("addr", i).unwrap(),
                            module: text("module", i),
                            build_id: text("build_id", i),
                            offset: num("offset", i),
                            error: text("error", i),
                            symbol: text("symbol", i).map(Into::into),
                            file: None,
                            line: None,
                        })
                        .collect()
                }),
                kstack_symbols: s.is_valid(row).then(|| {
                    let v = s.value(row);
                    let f = v.as_struct();
                    let names = f.column_by_name("symbol").unwrap().as_string::<i32>();
                    let offs = f
                        .column_by_name("offset")
                        .unwrap()
                        .as_primitive::<UInt64Type>();
                    let mods = f.column_by_name("module").unwrap().as_string::<i32>();
                    (0..f.len())
                        .map(|i| {
                            f.is_valid(i).then(|| KernelSymbol {
                                symbol: names.value(i).to_string(),
                                offset: offs.value(i),
                                module: mods.is_valid(i).then(|| mods.value(i).to_string()),
                            })
                        })
                        .collect()
                }),
            })
            .collect()
    }

    /// A stream written through the recorder's row builder and the contract's output stream
    /// (delta dictionaries, compressed) reads back, row by row, as the stacks each row was
    /// given, in their plain form.
    #[test]
    fn written_stream_reads_back_as_the_plain_stacks() {
        let mut t = FrameTable::default();
        let f: Vec<u32> = (0..6u64)
            .map(|i| t.intern(frame(0x4000 + i, &format!("/lib/m{}", i % 2), "ab", i * 8)))
            .collect();
        let failed = t.intern(UserFrame {
            addr: 9,
            module: None,
            build_id: None,
            offset: None,
            error: Some("unmapped".into()),
            symbol: None,
            file: None,
            line: None,
        });
        let jit = t.intern(UserFrame {
            addr: 0x7f00_1000,
            module: Some("[jit]".into()),
            build_id: None,
            offset: None,
            error: None,
            symbol: Some("JS:*hot /app/x.js:3".into()),
            file: None,
            line: None,
        });
        let kstacks: [&[u64]; 4] = [&[0xfff1, 0xfff2], &[0xfff3], &[], &[0, 0xfff2]];
        let ustacks: [&[u32]; 4] = [&f[..3], &f[3..], &[failed, jit, f[0]], &[]];
        let mut rb = RowBuilder::new(raw()).unwrap();
        let dir = std::env::temp_dir().join(format!("stacks-record-dict-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("raw.arrow");
        let mut out = stacks_stream::open_output_with(Some(&path), rb.schema(), true).unwrap();
        let mut expected = Vec::new();
        let mut seen = Map::new();
        // Five batches of 40 rows cycling through every combination of stacks, states and
        // errors, so later batches repeat earlier stacks and add new ones.
        for batch in 0..5 {
            for i in 0..40usize {
                let n = batch * 40 + i;
                let k: Captured<'_, u64> = match n % 5 {
                    0 => None,
                    1 => Some(Err(-14)),
                    _ => Some(Ok(kstacks[(n / 5 + batch) % 4])),
                };
                let u: Captured<'_, u32> = match n % 7 {
                    0 => None,
                    1 => Some(Err(-22)),
                    _ => Some(Ok(ustacks[(n / 7) % 4])),
                };
                let new = entries(k, u, &t);
                let stacks = rb.stacks().key(k, u, || new.clone());
                // Same captured stack, same key, in every batch.
                let id = (format!("{k:?}"), format!("{u:?}"));
                assert_eq!(*seen.entry(id).or_insert(stacks), stacks);
                rb.push(&Row {
                    time_ns: n as i64,
                    kind: "profile",
                    pid: 1,
                    tid: 1,
                    comm: "c",
                    thread: "t",
                    cgroup: None,
                    cpu: 0,
                    value: 1,
                    stacks,
                    kstack_error: k.and_then(Result::err),
                    ustack_error: u.and_then(Result::err),
                    ustack_unwind: None,
                    ustack_truncated: None,
                    extra: Extra::default(),
                });
                expected.push(new);
            }
            out.write(&rb.finish().unwrap()).unwrap();
        }
        out.finish().unwrap();
        assert_eq!(
            rb.distinct_stacks(),
            seen.len() - 1,
            "the stackless rows have no entry"
        );

        let reader =
            arrow_ipc::reader::StreamReader::try_new(std::fs::File::open(&path).unwrap(), None)
                .unwrap();
        let mut got = Vec::new();
        let mut kerr = Vec::new();
        for b in reader {
            let b = b.unwrap();
            assert!(matches!(
                b.column_by_name("ustack").unwrap().data_type(),
                DataType::Dictionary(..)
            ));
            let e = b
                .column_by_name("kstack_error")
                .unwrap()
                .as_primitive::<arrow_array::types::Int32Type>();
            kerr.extend((0..b.num_rows()).map(|i| e.is_valid(i).then(|| e.value(i))));
            got.extend(decode(&b));
        }
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(got.len(), 200);
        for (row, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(g, e, "row {row}");
            assert_eq!(kerr[row], (row % 5 == 1).then_some(-14), "row {row}");
        }
    }
}
