//! Stack keys: a 128-bit fingerprint of each stack, computed column by column (each frame
//! field is hashed in one typed pass over the batch's frames, then each row's frame hashes are
//! hashed in order), so grouping by stack costs a few nanoseconds per frame field. stacks-pack
//! stores it as `stack_id`; stacks-query's `stack_key(stack)` computes the same value.

use std::sync::Arc;

use ahash::RandomState;
use arrow_array::builder::FixedSizeBinaryBuilder;
use arrow_array::cast::AsArray;
use arrow_array::types::{UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, FixedSizeBinaryArray, ListArray};
use arrow_schema::{ArrowError, DataType};

/// The two independently seeded hash lanes (fixed seeds: keys are stable across runs).
fn lanes() -> [RandomState; 2] {
    [
        RandomState::with_seeds(
            0x243f_6a88_85a3_08d3,
            0x1319_8a2e_0370_7344,
            0xa409_3822_299f_31d0,
            0x082e_fa98_ec4e_6c89,
        ),
        RandomState::with_seeds(
            0x4528_21e6_38d0_1377,
            0xbe54_66cf_34e9_0c6c,
            0xc0ac_29b7_c97c_50dd,
            0x3f84_d5b5_b547_0917,
        ),
    ]
}

/// Fold a field's value hash `v` into a frame's running hash. For a fixed `acc` this is a
/// bijection of `v` and the other way round, and field order matters (the rotation).
#[inline]
fn fold(acc: &mut u64, v: u64) {
    *acc = (acc.rotate_left(23) ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
}

/// One key per row of `list` (null for a null stack): every field of every frame (or every
/// value, for a list of scalars such as `kstack`), in order,
/// goes into two 64-bit lanes with different seeds, so two different stacks share a key with a
/// probability around 2^-128.
pub fn stack_keys(list: &ListArray, rows: usize) -> Result<FixedSizeBinaryArray, ArrowError> {
    let offsets = list.value_offsets();
    let (lo, hi) = (offsets[0] as usize, offsets[rows] as usize);
    // A list of structs (frames) hashes every field; a list of scalars (`kstack`) its values.
    let values = list.values().slice(lo, hi - lo);
    let columns: Vec<ArrayRef> = match values.as_struct_opt() {
        Some(frames) => frames.columns().to_vec(),
        None => vec![values],
    };
    let states = lanes();
    let mut frame_hashes = [vec![0u64; hi - lo], vec![0u64; hi - lo]];
    for column in &columns {
        let column = comparable(column)?;
        for (state, hashes) in states.iter().zip(frame_hashes.iter_mut()) {
            fold_column(column.as_ref(), state, hashes);
        }
    }
    let mut b = FixedSizeBinaryBuilder::with_capacity(rows, 16);
    for row in 0..rows {
        if list.is_null(row) {
            b.append_null();
            continue;
        }
        let range = offsets[row] as usize - lo..offsets[row + 1] as usize - lo;
        let mut key = [0u8; 16];
        for (k, (state, hashes)) in states.iter().zip(&frame_hashes).enumerate() {
            // The slice's hash includes its length.
            let h = state.hash_one(&hashes[range.clone()]);
            key[k * 8..k * 8 + 8].copy_from_slice(&h.to_le_bytes());
        }
        b.append_value(key)?;
    }
    Ok(b.finish())
}

/// The column as one of the types [`fold_column`] reads: text, u64, u32 and booleans as they
/// are; any other type (not in the stacks schema, e.g. after a cast in SQL) as its text.
fn comparable(column: &ArrayRef) -> Result<ArrayRef, ArrowError> {
    Ok(match column.data_type() {
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::UInt64
        | DataType::UInt32
        | DataType::Boolean => Arc::clone(column),
        _ => arrow_cast::cast(column, &DataType::Utf8)?,
    })
}

/// Fold each value of `column` (one per frame) into `hashes`; a null folds a value no
/// non-null hashes to except by a 2^-64 chance, and each type hashes with its own tag.
fn fold_column(column: &dyn Array, state: &RandomState, hashes: &mut [u64]) {
    let null = state.hash_one(u64::MAX);
    macro_rules! each {
        ($values:expr, $tag:expr) => {{
            let values = $values;
            for (i, acc) in hashes.iter_mut().enumerate() {
                let v = if values.is_null(i) {
                    null
                } else {
                    state.hash_one(($tag, values.value(i)))
                };
                fold(acc, v);
            }
        }};
    }
    match column.data_type() {
        DataType::Utf8 => each!(column.as_string::<i32>(), 1u8),
        DataType::LargeUtf8 => each!(column.as_string::<i64>(), 1u8),
        DataType::Utf8View => each!(column.as_string_view(), 1u8),
        DataType::UInt64 => each!(column.as_primitive::<UInt64Type>(), 2u8),
        DataType::UInt32 => each!(column.as_primitive::<UInt32Type>(), 3u8),
        DataType::Boolean => each!(column.as_boolean(), 4u8),
        other => unreachable!("comparable() gives no {other}"),
    }
}

/// The key of a pair of keys (a raw stack's kernel and user halves): null only when both are.
pub fn combine(a: Option<&[u8]>, b: Option<&[u8]>) -> Option<[u8; 16]> {
    if a.is_none() && b.is_none() {
        return None;
    }
    let mut key = [0u8; 16];
    for (k, state) in lanes().iter().enumerate() {
        let h = state.hash_one((5u8, a, b));
        key[k * 8..k * 8 + 8].copy_from_slice(&h.to_le_bytes());
    }
    Some(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::builder::{ListBuilder, StringBuilder, StructBuilder, UInt64Builder};
    use arrow_schema::{Field, Fields};

    /// One frame: function name and address.
    type Frame<'a> = (Option<&'a str>, u64);

    /// Stacks of frames; `None` is a null stack.
    fn stacks(rows: &[Option<&[Frame<'_>]>]) -> ListArray {
        let fields = Fields::from(vec![
            Field::new("function", DataType::Utf8, true),
            Field::new("addr", DataType::UInt64, false),
        ]);
        let mut b = ListBuilder::new(StructBuilder::from_fields(fields, 0));
        for row in rows {
            match row {
                None => b.append(false),
                Some(frames) => {
                    let s = b.values();
                    for (f, a) in *frames {
                        s.field_builder::<StringBuilder>(0)
                            .unwrap()
                            .append_option(*f);
                        s.field_builder::<UInt64Builder>(1)
                            .unwrap()
                            .append_value(*a);
                        s.append(true);
                    }
                    b.append(true);
                }
            }
        }
        b.finish()
    }

    fn keys(list: &ListArray) -> Vec<Option<Vec<u8>>> {
        let out = stack_keys(list, list.len()).unwrap();
        (0..out.len())
            .map(|i| out.is_valid(i).then(|| out.value(i).to_vec()))
            .collect()
    }

    #[test]
    fn equal_stacks_share_a_key_and_every_difference_shows() {
        let a: &[(Option<&str>, u64)] = &[(Some("leaf"), 1), (Some("main"), 2)];
        let rows = [
            Some(a),
            None,
            Some(&[(Some("leaf"), 1), (Some("main"), 2)][..]),
            Some(&[(Some("main"), 2), (Some("leaf"), 1)][..]), // order
            Some(&[(Some("leaf"), 1)][..]),                    // prefix
            Some(&[(None, 1), (Some("main"), 2)][..]),         // null name
            Some(&[(Some(""), 1), (Some("main"), 2)][..]),     // empty name
            Some(&[(Some("leaf"), 3), (Some("main"), 2)][..]), // address
            Some(&[][..]),                                     // empty stack
        ];
        let k = keys(&stacks(&rows));
        assert_eq!(k[0], k[2], "the same stack, the same key");
        assert!(k[1].is_none(), "a null stack has no key");
        let mut distinct: Vec<&Vec<u8>> = [0, 3, 4, 5, 6, 7, 8]
            .iter()
            .map(|&i| k[i].as_ref().unwrap())
            .collect();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 7, "{k:?}");
    }

    #[test]
    fn keys_do_not_depend_on_the_batch_or_the_slice() {
        let a: &[(Option<&str>, u64)] = &[(Some("f"), 10), (Some("g"), 20)];
        let b: &[(Option<&str>, u64)] = &[(Some("h"), 30)];
        let whole = stacks(&[Some(b), Some(a), None, Some(a)]);
        let k = keys(&whole);
        let alone = keys(&stacks(&[Some(a)]));
        assert_eq!(k[1], alone[0]);
        assert_eq!(k[3], alone[0]);
        // A sliced list (offsets not starting at 0) gives the same keys.
        let sliced = whole.slice(1, 3);
        assert_eq!(keys(&sliced), k[1..].to_vec());
    }
}
