//! The stack columns of a raw batch, typed, and what tells a row's raw stack apart: its
//! entries, or a 128-bit hash of its contents.

use std::hash::{BuildHasher, Hash, Hasher};

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt32Type, UInt64Type};
use arrow_array::{
    Array, ArrayRef, Int32Array, ListArray, RecordBatch, StringArray, StructArray, UInt32Array,
    UInt64Array,
};
use arrow_schema::ArrowError;
use stacks_stream::dict::Entries;
use stacks_stream::{ksym, uframe};

use super::{Layout, RawStack};

pub(super) fn list_range(list: &ListArray, row: usize) -> std::ops::Range<usize> {
    let o = list.value_offsets();
    o[row] as usize..o[row + 1] as usize
}

pub(super) fn opt_str(a: &StringArray, i: usize) -> Option<&str> {
    a.is_valid(i).then(|| a.value(i))
}

fn struct_field<'a>(s: &'a StructArray, name: &str) -> Result<&'a ArrayRef, ArrowError> {
    s.column_by_name(name)
        .ok_or_else(|| ArrowError::SchemaError(format!("stack element has no field `{name}`")))
}

/// The stack columns of a raw batch, typed: each column's entries (a dictionary's distinct
/// stacks, or the rows of a plain column) and each row's entry.
pub(super) struct StackColumns {
    pub(super) rows: usize,
    pub(super) kstack: ListArray,
    pub(super) kent: Entries,
    pub(super) ustack: ListArray,
    pub(super) uent: Entries,
    pub(super) kerr: Int32Array,
    pub(super) uerr: Int32Array,
    pub(super) kvalues: UInt64Array,
    pub(super) u_addr: UInt64Array,
    pub(super) u_module: StringArray,
    pub(super) u_build_id: StringArray,
    pub(super) u_offset: UInt64Array,
    pub(super) u_error: StringArray,
    /// Perf-map names (absent from streams recorded before they were).
    pub(super) u_symbol: Option<StringArray>,
    /// Interpreted frames' files and lines (absent from streams recorded before them).
    pub(super) u_file: Option<StringArray>,
    pub(super) u_line: Option<UInt32Array>,
    pub(super) ksyms: Option<KernelSymbols>,
    pub(super) sent: Option<Entries>,
}

/// The record-time kernel symbols of a batch's kernel frames.
pub(super) struct KernelSymbols {
    pub(super) list: ListArray,
    pub(super) entries: StructArray,
    pub(super) symbol: StringArray,
    pub(super) offset: UInt64Array,
    pub(super) module: StringArray,
}

/// The entries of stack column `i` of `batch` and their lists.
fn entries(batch: &RecordBatch, i: usize) -> Result<(Entries, ListArray), ArrowError> {
    let entries = Entries::new(batch.column(i))?;
    let list = entries
        .values()
        .as_list_opt::<i32>()
        .ok_or_else(|| {
            ArrowError::SchemaError(format!(
                "stack column `{}` is not a list",
                batch.schema().field(i).name()
            ))
        })?
        .clone();
    Ok((entries, list))
}

impl StackColumns {
    pub(super) fn new(batch: &RecordBatch, layout: &Layout) -> Result<Self, ArrowError> {
        let (uent, ustack) = entries(batch, layout.ustack)?;
        let u = ustack.values().as_struct();
        let (ksyms, sent) = match layout.kstack_symbols {
            Some(i) => {
                let (sent, list) = entries(batch, i)?;
                let s = list.values().as_struct().clone();
                let ksyms = KernelSymbols {
                    symbol: struct_field(&s, ksym::SYMBOL)?.as_string::<i32>().clone(),
                    offset: struct_field(&s, ksym::OFFSET)?
                        .as_primitive::<UInt64Type>()
                        .clone(),
                    module: struct_field(&s, ksym::MODULE)?.as_string::<i32>().clone(),
                    entries: s,
                    list,
                };
                (Some(ksyms), Some(sent))
            }
            None => (None, None),
        };
        let (kent, kstack) = entries(batch, layout.kstack)?;
        let ints = |i: usize| batch.column(i).as_primitive::<Int32Type>().clone();
        let strings = |name| -> Result<StringArray, ArrowError> {
            Ok(struct_field(u, name)?.as_string::<i32>().clone())
        };
        let uints = |name| -> Result<UInt64Array, ArrowError> {
            Ok(struct_field(u, name)?.as_primitive::<UInt64Type>().clone())
        };
        Ok(StackColumns {
            rows: batch.num_rows(),
            kvalues: kstack.values().as_primitive::<UInt64Type>().clone(),
            kstack,
            kent,
            kerr: ints(layout.kstack_error),
            uerr: ints(layout.ustack_error),
            u_addr: uints(uframe::ADDR)?,
            u_module: strings(uframe::MODULE)?,
            u_build_id: strings(uframe::BUILD_ID)?,
            u_offset: uints(uframe::OFFSET)?,
            u_error: strings(uframe::ERROR)?,
            u_symbol: u
                .column_by_name(uframe::SYMBOL)
                .map(|c| c.as_string::<i32>().clone()),
            u_file: u
                .column_by_name(uframe::FILE)
                .map(|c| c.as_string::<i32>().clone()),
            u_line: u
                .column_by_name(uframe::LINE)
                .map(|c| c.as_primitive::<UInt32Type>().clone()),
            ustack,
            uent,
            ksyms,
            sent,
        })
    }

    /// Row `row`'s raw stack.
    #[inline]
    pub(super) fn raw(&self, row: usize) -> RawStack {
        let int = |a: &Int32Array| a.is_valid(row).then(|| a.value(row));
        RawStack {
            k: self.kent.entry(row),
            u: self.uent.entry(row),
            s: self.sent.as_ref().and_then(|s| s.entry(row)),
            kerr: int(&self.kerr),
            uerr: int(&self.uerr),
        }
    }

    /// A 128-bit hash (two independently seeded lanes) of everything `r` holds: two
    /// different raw stacks share it with a probability around 2^-128.
    pub(super) fn hash(&self, lanes: &[ahash::RandomState; 2], r: &RawStack) -> (u64, u64) {
        let mut h = Lanes(lanes[0].build_hasher(), lanes[1].build_hasher());
        (r.kerr, r.uerr).hash(&mut h);
        match r.k {
            Some(e) => {
                let range = list_range(&self.kstack, e);
                h.write_u8(1);
                h.write_usize(range.len());
                for j in range {
                    h.write_u64(self.kvalues.value(j));
                }
            }
            None => h.write_u8(0),
        }
        match r.u {
            Some(e) => {
                let range = list_range(&self.ustack, e);
                h.write_u8(1);
                h.write_usize(range.len());
                for j in range {
                    h.write_u64(self.u_addr.value(j));
                    opt_str(&self.u_module, j).hash(&mut h);
                    opt_str(&self.u_build_id, j).hash(&mut h);
                    let offset = self.u_offset.is_valid(j).then(|| self.u_offset.value(j));
                    offset.hash(&mut h);
                    opt_str(&self.u_error, j).hash(&mut h);
                    if let Some(s) = &self.u_symbol {
                        opt_str(s, j).hash(&mut h);
                    }
                    if let Some(s) = &self.u_file {
                        opt_str(s, j).hash(&mut h);
                    }
                    if let Some(l) = &self.u_line {
                        l.is_valid(j).then(|| l.value(j)).hash(&mut h);
                    }
                }
            }
            None => h.write_u8(0),
        }
        match (r.s, &self.ksyms) {
            (Some(e), Some(k)) => {
                let range = list_range(&k.list, e);
                h.write_u8(1);
                h.write_usize(range.len());
                for j in range {
                    let valid = k.entries.is_valid(j);
                    valid.hash(&mut h);
                    if valid {
                        k.symbol.value(j).hash(&mut h);
                        k.offset.value(j).hash(&mut h);
                        opt_str(&k.module, j).hash(&mut h);
                    }
                }
            }
            _ => h.write_u8(0),
        }
        (h.0.finish(), h.1.finish())
    }
}

/// The two hash lanes of [`StackColumns::hash`].
pub(super) fn hash_lanes() -> [ahash::RandomState; 2] {
    [
        ahash::RandomState::with_seeds(1, 2, 3, 4),
        ahash::RandomState::with_seeds(5, 6, 7, 8),
    ]
}

/// Two hashers fed the same values (each value read once).
struct Lanes(ahash::AHasher, ahash::AHasher);

impl Hasher for Lanes {
    fn write(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
        self.1.write(bytes);
    }
    fn write_u8(&mut self, i: u8) {
        self.0.write_u8(i);
        self.1.write_u8(i);
    }
    fn write_u64(&mut self, i: u64) {
        self.0.write_u64(i);
        self.1.write_u64(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.0.write_usize(i);
        self.1.write_usize(i);
    }
    /// The first lane only: [`StackColumns::hash`] reads both.
    fn finish(&self) -> u64 {
        self.0.finish()
    }
}
