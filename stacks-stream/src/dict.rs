//! Stacks carried once per stream: the stack columns (`kstack`, `ustack`, `kstack_symbols`,
//! `stack`) may be Arrow dictionary-encoded, each distinct stack sent once in the IPC stream
//! (a delta dictionary message when it first appears) and every row holding a key. This module
//! is both sides of that: [`StackDictionary`] builds the columns a producer writes, [`Entries`]
//! maps a consumer's rows to dictionary entries (or, for a plain list column, to themselves),
//! and [`EntryCache`] keeps per-entry results across the batches of a stream, so work done per
//! distinct stack is done once.
//!
//! The rule that makes caching by key sound, which every stacks producer follows: **a stack
//! dictionary grows, or starts over shorter** — each batch's dictionary starts with the
//! previous batch's entries (a delta), except when the producer starts over: then the new
//! dictionary is shorter than the one it replaces. A consumer keeps per-entry results while
//! the dictionary grows and drops them when it shrinks. Producers start over once a dictionary
//! holds [`MAX_ENTRIES`] or [`MAX_BYTES`] (see [`StackDictionary::is_full`], [`restart_plan`]),
//! which bounds their memory, every consumer's (the IPC reader holds the whole dictionary) and
//! the per-batch cost of delta dictionaries (the reader concatenates them) on recordings with
//! ever new stacks: a system-wide recording with process churn brings new stacks for as long
//! as it runs.

use std::cell::OnceCell;
use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;
use arrow_array::{Array, ArrayRef, DictionaryArray, Int32Array, UInt32Array};
use arrow_schema::{ArrowError, DataType, Field, Schema};

use crate::schema::col;
pub use crate::schema::value_type;

/// Entries past which a producer starts a stack dictionary over (at the next batch that uses
/// fewer entries than the dictionary holds).
pub const MAX_ENTRIES: usize = 1 << 16;

/// Bytes of entries past which a producer starts a stack dictionary over (as for
/// [`MAX_ENTRIES`]). Symbolized stacks take 2-10 KiB each, so this is a few thousand of them:
/// what a consumer holds of the dictionary stays a few tens of MiB, while a stack that recurs is
/// sent again only once per restart.
pub const MAX_BYTES: usize = 8 << 20;

/// The columns that hold stacks (one list per row), dictionary-encoded by stacks producers.
pub const STACK_COLUMNS: [&str; 4] = [col::KSTACK, col::USTACK, col::KSTACK_SYMBOLS, col::STACK];

/// Whether `name` is one of [`STACK_COLUMNS`].
pub fn is_stack_column(name: &str) -> bool {
    STACK_COLUMNS.contains(&name)
}

/// The key type of dictionary-encoded stack columns.
pub fn key_type() -> DataType {
    DataType::Int32
}

/// `values` dictionary-encoded with [`key_type`] keys.
pub fn dictionary_type(values: DataType) -> DataType {
    DataType::Dictionary(Box::new(key_type()), Box::new(values))
}

/// `schema` with every stack column of list type dictionary-encoded (what stacks producers
/// write); other columns and the metadata as they are.
pub fn encoded_schema(schema: &Schema) -> Schema {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let list = matches!(f.data_type(), DataType::List(_) | DataType::LargeList(_));
            if is_stack_column(f.name()) && list {
                Field::new(f.name(), dictionary_type(f.data_type().clone()), true)
                    .with_metadata(f.metadata().clone())
            } else {
                f.as_ref().clone()
            }
        })
        .collect();
    Schema::new_with_metadata(fields, schema.metadata().clone())
}

/// `schema` with every dictionary-encoded column replaced by its value type (what a Parquet
/// store or a SQL engine holds).
pub fn decoded_schema(schema: &Schema) -> Schema {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Dictionary(_, v) => {
                Field::new(f.name(), v.as_ref().clone(), true).with_metadata(f.metadata().clone())
            }
            _ => f.as_ref().clone(),
        })
        .collect();
    Schema::new_with_metadata(fields, schema.metadata().clone())
}

/// A column as rows of entries: the values of a dictionary column (each distinct stack once)
/// and each row's key, or a plain column whose rows are their own entries.
#[derive(Clone, Debug)]
pub struct Entries {
    values: ArrayRef,
    keys: Option<Int32Array>,
}

impl Entries {
    /// View `array`: a dictionary (any integer keys; they are read as Int32) or any other
    /// array (each row its own entry).
    pub fn new(array: &ArrayRef) -> Result<Self, ArrowError> {
        match array.data_type() {
            DataType::Dictionary(k, v) => {
                let array = if **k == DataType::Int32 {
                    Arc::clone(array)
                } else {
                    arrow_cast::cast(array, &dictionary_type(v.as_ref().clone()))?
                };
                let dict = array.as_dictionary::<Int32Type>();
                Ok(Entries {
                    values: Arc::clone(dict.values()),
                    keys: Some(dict.keys().clone()),
                })
            }
            _ => Ok(Entries {
                values: Arc::clone(array),
                keys: None,
            }),
        }
    }

    /// The entries: a dictionary's values, or the plain column itself.
    pub fn values(&self) -> &ArrayRef {
        &self.values
    }

    /// Whether entries are dictionary values, whose keys hold for the whole stream.
    pub fn is_dictionary(&self) -> bool {
        self.keys.is_some()
    }

    /// Each row's key (Int32); for a plain column, the row numbers (nulls where rows are).
    pub fn keys(&self) -> Int32Array {
        match &self.keys {
            Some(k) => k.clone(),
            None => (0..self.values.len())
                .map(|i| self.values.is_valid(i).then_some(i as i32))
                .collect(),
        }
    }

    /// Rows in the batch.
    pub fn rows(&self) -> usize {
        self.keys.as_ref().map_or(self.values.len(), |k| k.len())
    }

    /// The entry of `row`; `None` when the row's value is null (a null key or a null entry).
    #[inline]
    pub fn entry(&self, row: usize) -> Option<usize> {
        let i = match &self.keys {
            Some(keys) => {
                if keys.is_null(row) {
                    return None;
                }
                usize::try_from(keys.value(row)).ok()?
            }
            None => row,
        };
        (i < self.values.len() && self.values.is_valid(i)).then_some(i)
    }
}

/// Per-entry results kept across the batches of one stream: for dictionary columns an entry's
/// result is computed once for the stream; for plain columns, once per batch.
#[derive(Debug)]
pub struct EntryCache<T> {
    slots: Vec<Option<T>>,
}

impl<T> Default for EntryCache<T> {
    fn default() -> Self {
        EntryCache { slots: Vec::new() }
    }
}

impl<T> EntryCache<T> {
    /// Make room for the entries of a new batch: plain columns and shrunk (replaced)
    /// dictionaries drop what was cached; grown dictionaries keep it.
    pub fn prepare(&mut self, entries: &Entries) {
        let n = entries.values().len();
        if !entries.is_dictionary() || n < self.slots.len() {
            self.slots.clear();
        }
        self.slots.resize_with(n, || None);
    }

    /// The result for entry `i`, if computed.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&T> {
        self.slots.get(i).and_then(Option::as_ref)
    }

    /// The result for entry `i`, computed by `f` the first time.
    #[inline]
    pub fn get_or_insert_with(&mut self, i: usize, f: impl FnOnce() -> T) -> &T {
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        self.slots[i].get_or_insert_with(f)
    }

    /// Entries with a result.
    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A stack dictionary being written: every entry added so far, in key order. Each batch's
/// column is made with [`Self::column`] from the batch's keys; the IPC writer (with delta
/// dictionaries, see [`crate::io::OutputStream`]) sends only the entries added since the last
/// batch.
#[derive(Debug)]
pub struct StackDictionary {
    value_type: DataType,
    /// Every entry since the dictionary (re)started, as appended.
    chunks: Vec<ArrayRef>,
    len: usize,
    /// Bytes of the entries' buffers (their part of shared buffers).
    bytes: usize,
    /// Chunks and entries already handed out by [`Self::stream_column`].
    handed_chunks: usize,
    handed: usize,
    /// The entries as one array, made when asked for.
    full: OnceCell<ArrayRef>,
}

impl StackDictionary {
    /// An empty dictionary of `value_type` entries.
    pub fn new(value_type: &DataType) -> Self {
        StackDictionary {
            value_type: value_type.clone(),
            chunks: Vec::new(),
            len: 0,
            bytes: 0,
            handed_chunks: 0,
            handed: 0,
            full: OnceCell::new(),
        }
    }

    /// Entries so far (the next entry's key).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the entries take.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether the dictionary holds [`MAX_ENTRIES`] or [`MAX_BYTES`]: its producer starts it
    /// over, empty, at the next batch that uses fewer entries ([`restart_plan`], or counted
    /// before keying it, as stacks-symbolize does).
    pub fn is_full(&self) -> bool {
        self.len >= MAX_ENTRIES || self.bytes >= MAX_BYTES
    }

    /// Append `entries` (of the value type), returning the key of the first.
    pub fn extend(&mut self, entries: &dyn Array) -> Result<i32, ArrowError> {
        let first = i32::try_from(self.len)
            .map_err(|_| ArrowError::ComputeError("stack dictionary past 2^31 entries".into()))?;
        if entries.data_type() != &self.value_type {
            return Err(ArrowError::InvalidArgumentError(format!(
                "stack dictionary entries of type {}, expected {}",
                entries.data_type(),
                self.value_type
            )));
        }
        if !entries.is_empty() {
            self.bytes += array_bytes(entries);
            self.chunks.push(arrow_array::make_array(entries.to_data()));
            self.len += entries.len();
            self.full = OnceCell::new();
        }
        Ok(first)
    }

    /// Start over with only the entries `keep` (old keys; entry `i` of the new dictionary is
    /// old entry `keep[i]`). With [`restart_plan`]'s `keep` the new dictionary is shorter.
    pub fn restart(&mut self, keep: &[u32]) -> Result<(), ArrowError> {
        let keep = UInt32Array::from(keep.to_vec());
        let kept = arrow_select::take::take(self.values().as_ref(), &keep, None)?;
        self.len = kept.len();
        self.bytes = array_bytes(kept.as_ref());
        self.chunks = vec![kept];
        self.handed_chunks = 0;
        self.handed = 0;
        self.full = OnceCell::new();
        Ok(())
    }

    /// The column of a batch whose rows hold `keys` (null: no stack), with every entry.
    pub fn column(&self, keys: Int32Array) -> Result<ArrayRef, ArrowError> {
        Ok(Arc::new(DictionaryArray::<Int32Type>::try_new(
            keys,
            Arc::clone(self.values()),
        )?))
    }

    /// The column of a batch whose rows hold `keys`, **for writing to an
    /// [`crate::OutputStream`] only**: the entries already handed out by this function are
    /// nulls in it (their place kept, their content not copied again), the new ones are as
    /// they are. The stream writer sends only a dictionary's new entries, so the stream holds
    /// every entry; read in process, such a column misses the earlier ones. Copying the
    /// whole dictionary into every batch cost more than symbolizing on recordings with ever
    /// new stacks. Every column made here must be written, in order.
    pub fn stream_column(&mut self, keys: Int32Array) -> Result<ArrayRef, ArrowError> {
        let mut parts: Vec<ArrayRef> = Vec::new();
        if self.handed > 0 {
            parts.push(arrow_array::new_null_array(&self.value_type, self.handed));
        }
        parts.extend(self.chunks[self.handed_chunks..].iter().cloned());
        let values = match parts.as_slice() {
            [] => arrow_array::new_empty_array(&self.value_type),
            [one] => Arc::clone(one),
            many => {
                let refs: Vec<&dyn Array> = many.iter().map(|a| a.as_ref()).collect();
                arrow_select::concat::concat(&refs)?
            }
        };
        self.handed_chunks = self.chunks.len();
        self.handed = self.len;
        Ok(Arc::new(DictionaryArray::<Int32Type>::try_new(
            keys, values,
        )?))
    }

    /// Every entry so far.
    pub fn values(&self) -> &ArrayRef {
        self.full.get_or_init(|| {
            let refs: Vec<&dyn Array> = self.chunks.iter().map(|a| a.as_ref()).collect();
            match refs.as_slice() {
                [] => arrow_array::new_empty_array(&self.value_type),
                _ => arrow_select::concat::concat(&refs).expect("chunks of one type"),
            }
        })
    }
}

/// The bytes of `array`'s part of its buffers.
fn array_bytes(array: &dyn Array) -> usize {
    array
        .to_data()
        .get_slice_memory_size()
        .unwrap_or_else(|_| array.get_array_memory_size())
}

/// A producer's decision for one batch over dictionaries whose consumers hold `len` entries
/// (the length the previous batch sent: a restart must be shorter than that, whatever the
/// batch added), given each row's key (`None`: no stack): `None` to keep growing; or, once a
/// dictionary is `full` ([`StackDictionary::is_full`]) and the batch uses fewer entries than
/// `len`, the entries
/// to keep (in first use) and each row's key renumbered into them — pass the first to
/// [`StackDictionary::restart`] on every dictionary the keys index, then forget what was
/// keyed before (later stacks get keys from the new length).
pub fn restart_plan(
    full: bool,
    len: usize,
    keys: &[Option<i32>],
) -> Option<(Vec<u32>, Vec<Option<i32>>)> {
    if !full {
        return None;
    }
    let mut renumbered: HashMap<i32, i32> = HashMap::new();
    let mut keep = Vec::new();
    let mut rows = Vec::with_capacity(keys.len());
    for k in keys {
        rows.push(k.map(|k| {
            *renumbered.entry(k).or_insert_with(|| {
                keep.push(k as u32);
                (keep.len() - 1) as i32
            })
        }));
        if keep.len() >= len {
            return None;
        }
    }
    Some((keep, rows))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use arrow_array::builder::{ListBuilder, UInt64Builder};
    use arrow_array::cast::AsArray;
    use arrow_array::types::UInt64Type;

    /// A list column of u64 values, one list per row (the shape of `kstack`).
    pub(crate) fn lists(rows: &[&[u64]]) -> ArrayRef {
        let mut b = ListBuilder::new(UInt64Builder::new());
        for r in rows {
            b.values().append_slice(r);
            b.append(true);
        }
        Arc::new(b.finish())
    }

    #[test]
    fn dictionary_grows_and_rows_map_to_entries() {
        let mut d = StackDictionary::new(lists(&[]).data_type());
        assert_eq!(d.extend(lists(&[&[1, 2], &[3]]).as_ref()).unwrap(), 0);
        let col = d
            .column(Int32Array::from(vec![Some(1), None, Some(0)]))
            .unwrap();
        let e = Entries::new(&col).unwrap();
        assert!(e.is_dictionary());
        assert_eq!(
            (0..3).map(|r| e.entry(r)).collect::<Vec<_>>(),
            [Some(1), None, Some(0)]
        );
        let mut cache = EntryCache::default();
        cache.prepare(&e);
        cache.get_or_insert_with(1, || "b");
        assert_eq!(d.extend(lists(&[&[4]]).as_ref()).unwrap(), 2);
        let e2 = Entries::new(&d.column(Int32Array::from(vec![2, 1])).unwrap()).unwrap();
        cache.prepare(&e2);
        assert_eq!(cache.get(1), Some(&"b"), "a grown dictionary keeps results");
        let v = e2.values().as_list::<i32>().value(2);
        assert_eq!(v.as_primitive::<UInt64Type>().values().as_ref(), &[4]);

        let plain = lists(&[&[9]]);
        let p = Entries::new(&plain).unwrap();
        assert!(!p.is_dictionary());
        assert_eq!(p.entry(0), Some(0));
        cache.prepare(&p);
        assert!(
            cache.get(1).is_none() && cache.is_empty(),
            "plain columns start afresh"
        );
    }

    #[test]
    fn stream_columns_carry_each_entry_once() {
        let mut d = StackDictionary::new(lists(&[]).data_type());
        d.extend(lists(&[&[1], &[2]]).as_ref()).unwrap();
        let first = d.stream_column(Int32Array::from(vec![1, 0])).unwrap();
        let e = Entries::new(&first).unwrap();
        assert_eq!(e.values().len(), 2);
        assert_eq!(
            e.values().null_count(),
            0,
            "the first column holds every entry"
        );
        d.extend(lists(&[&[3]]).as_ref()).unwrap();
        let second = d.stream_column(Int32Array::from(vec![2, 0])).unwrap();
        let e = Entries::new(&second).unwrap();
        assert_eq!(e.values().len(), 3);
        assert_eq!(
            e.values().null_count(),
            2,
            "entries handed out before are not copied"
        );
        assert_eq!(e.entry(0), Some(2));
        assert_eq!(d.values().len(), 3);
        assert_eq!(d.values().null_count(), 0);
        assert!(d.extend(&Int32Array::from(vec![1])).is_err(), "wrong type");
    }

    #[test]
    fn producers_start_over_shorter() {
        assert!(
            restart_plan(false, MAX_ENTRIES - 1, &[Some(0)]).is_none(),
            "below the limit"
        );
        let keys = [Some(7), None, Some(3), Some(7)];
        let (keep, rows) = restart_plan(true, MAX_ENTRIES, &keys).unwrap();
        assert_eq!(keep, [7, 3]);
        assert_eq!(rows, [Some(0), None, Some(1), Some(0)]);
        let many: Vec<Option<i32>> = (0..4).map(Some).collect();
        assert!(
            restart_plan(true, 4, &many).is_none(),
            "a batch using every entry cannot shrink it"
        );

        let mut d = StackDictionary::new(lists(&[]).data_type());
        d.extend(lists(&[&[1], &[2], &[3]]).as_ref()).unwrap();
        d.restart(&[2, 0]).unwrap();
        let v = d.values().as_list::<i32>();
        assert_eq!(v.len(), 2);
        assert_eq!(
            v.value(0).as_primitive::<UInt64Type>().values().as_ref(),
            &[3]
        );
        // A consumer that cached results for the longer dictionary drops them.
        let mut cache = EntryCache {
            slots: vec![Some(1), Some(2), Some(3)],
        };
        cache.prepare(&Entries::new(&d.column(Int32Array::from(vec![0])).unwrap()).unwrap());
        assert!(cache.is_empty());
    }

    #[test]
    fn schemas_encode_stack_columns_only() {
        let raw = crate::symbolized_schema(Default::default());
        let enc = encoded_schema(&raw);
        for f in enc.fields() {
            let dict = matches!(f.data_type(), DataType::Dictionary(..));
            assert_eq!(dict, is_stack_column(f.name()), "{}", f.name());
            assert_eq!(
                value_type(f.data_type()),
                raw.field_with_name(f.name()).unwrap().data_type()
            );
        }
        let dec = decoded_schema(&enc);
        for (a, b) in dec.fields().iter().zip(raw.fields()) {
            assert_eq!(a.data_type(), b.data_type());
        }
    }
}
