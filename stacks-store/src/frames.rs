//! The frames level of a file set: each distinct frame of its stacks stored once in the frames
//! file (`frame_id` → the frame's fields), each stack in the stacks file as the ids of its
//! frames (`frame_ids`, leaf first, as `stack` holds them). [`Framer`] holds stacks that way
//! and builds both for a file set of them (`framer.rs`); [`FrameLookup`] turns them back into
//! `stack` lists (`lookup.rs`). This module has the files' columns and schemas.
//!
//! Frames are sorted by (kernel, module, build id, offset, address, …) before they get their
//! ids, so neighbouring rows differ little and the integer columns delta-encode well; stacks
//! are sorted by their frames root first, so neighbouring lists share their long common root
//! paths, which zstd then stores once.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};
use stacks_stream::schema::frame::NAME;
use stacks_stream::schema::{col, stack_id_type};

mod framer;
mod lookup;

pub use framer::{Framer, SetParts};
pub use lookup::FrameLookup;

/// Column of the frames file: the frame's number in its file set.
pub const FRAME_ID: &str = "frame_id";
/// Column of the stacks and frames files: the file set's number, the same in both (joins of
/// several file sets' rows go by (`set_id`, `frame_id`)).
pub const SET_ID: &str = "set_id";
/// Column of the stacks file: the ids of the stack's frames, leaf first.
pub const FRAME_IDS: &str = "frame_ids";

/// The frame struct fields of stack type `stack` (a list of structs).
pub fn frame_struct(stack: &DataType) -> Option<&Fields> {
    match stack {
        DataType::List(f) | DataType::LargeList(f) => match f.data_type() {
            DataType::Struct(fields) => Some(fields),
            _ => None,
        },
        _ => None,
    }
}

/// The element field of `frame_ids`.
fn frame_ids_item() -> Arc<Field> {
    Arc::new(Field::new(FRAME_ID, DataType::UInt32, false))
}

/// Schema of a frames file for stacks of type `stack`: `frame_id`, the frame's fields,
/// `name`, then `set_id`; `metadata` kept.
pub fn frames_schema(stack: &DataType, metadata: HashMap<String, String>) -> Option<SchemaRef> {
    let fields = frame_struct(stack)?;
    let mut out = vec![Field::new(FRAME_ID, DataType::UInt32, false)];
    out.extend(fields.iter().map(|f| f.as_ref().clone()));
    out.push(Field::new(NAME, DataType::Utf8, false));
    out.push(Field::new(SET_ID, DataType::UInt64, false));
    Some(Arc::new(Schema::new_with_metadata(out, metadata)))
}

/// Schema of a stacks file whose frames are in a frames file: `stack_id`, `frame_ids`,
/// `set_id`; `metadata` kept.
pub fn framed_stacks_schema(metadata: HashMap<String, String>) -> SchemaRef {
    Arc::new(Schema::new_with_metadata(
        vec![
            Field::new(col::STACK_ID, stack_id_type(), false),
            Field::new(FRAME_IDS, DataType::List(frame_ids_item()), true),
            Field::new(SET_ID, DataType::UInt64, false),
        ],
        metadata,
    ))
}

/// The stack type a frames file of `schema` rebuilds: a list of structs of its columns but
/// `frame_id`, `name` and `set_id`, with the element field of the contract's `stack`.
pub fn stack_type_of(frames: &Schema) -> DataType {
    let fields: Vec<Field> = frames
        .fields()
        .iter()
        .filter(|f| ![FRAME_ID, NAME, SET_ID].contains(&f.name().as_str()))
        .map(|f| f.as_ref().clone())
        .collect();
    DataType::List(Arc::new(Field::new(
        "frame",
        DataType::Struct(Fields::from(fields)),
        false,
    )))
}

/// A file set's number for the base name of its files (FNV-1a, 64 bits): stable, so a file
/// set written again from the same stream gets the same files.
pub fn set_id(base: &str) -> u64 {
    base.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StackId;
    use arrow_array::cast::AsArray;
    use arrow_array::{Array, FixedSizeBinaryArray, ListArray};
    use stacks_stream::schema::frame as field;
    use stacks_stream::stack_key::stack_keys;
    use stacks_testkit::rows::{Frame, Row, batch};

    fn frame(name: &str, addr: u64, kernel: bool) -> Frame {
        Frame {
            function: Some(name.into()),
            symbol: Some(name.into()),
            module: Some(if kernel { "[kernel]" } else { "/bin/app" }.into()),
            addr,
            offset: Some(addr - 0x1000),
            kernel,
            ..Default::default()
        }
    }

    /// The `stack` column of `rows` and each stack's id.
    fn stacks_of(rows: &[Row]) -> (ListArray, FixedSizeBinaryArray) {
        let schema = Arc::new(stacks_stream::symbolized_schema(Default::default()));
        let b = batch(&schema, rows);
        let stack = b
            .column_by_name(col::STACK)
            .unwrap()
            .as_list::<i32>()
            .clone();
        let ids = stack_keys(&stack, stack.len()).unwrap();
        (stack, ids)
    }

    fn stacks() -> Vec<Option<Vec<Frame>>> {
        let main = frame("main", 0x1100, false);
        let run = frame("run", 0x1200, false);
        let read = frame("vfs_read", 0xffff_1000, true);
        vec![
            Some(vec![
                frame("leaf", 0x1300, false),
                run.clone(),
                main.clone(),
            ]),
            None,
            Some(vec![read.clone(), run.clone(), main.clone()]),
            Some(vec![main.clone()]),
            Some(vec![]),
            Some(vec![read, frame("other", 0x1400, false), main]),
        ]
    }

    /// More distinct frames than a batch holds: the frames file's rows come in several
    /// batches whose ids go on from one to the next, and every stack still comes back.
    #[test]
    fn frames_of_many_batches_keep_their_ids_in_row_order() {
        let n = crate::frames::framer::FRAMES_CHUNK + 10;
        let rows: Vec<Row> = (0..n)
            .map(|i| Row {
                kind: "profile".into(),
                stack: Some(vec![
                    frame(&format!("f{i}"), 0x10_0000 + 16 * i as u64, false),
                    frame("main", 0x1100, false),
                ]),
                ..Default::default()
            })
            .collect();
        let (stack, ids) = stacks_of(&rows);
        let mut framer = Framer::new(stack.data_type()).unwrap().unwrap();
        framer.add(&ids, &stack).unwrap();
        let fs = frames_schema(stack.data_type(), Default::default()).unwrap();
        let ss = framed_stacks_schema(Default::default());
        let kept: Vec<StackId> = (0..ids.len())
            .map(|i| ids.value(i).try_into().unwrap())
            .collect();
        let mut batches = Vec::new();
        let out = framer
            .parts(&kept)
            .unwrap()
            .finish(1, &fs, &ss, 4096, |b| {
                batches.push(b);
                Ok(())
            })
            .unwrap();
        assert_eq!(batches.len(), 2, "{} frames", n + 1);
        let all = arrow_select::concat::concat_batches(&fs, &batches).unwrap();
        let frame_ids = all
            .column(0)
            .as_primitive::<arrow_array::types::UInt32Type>();
        assert!(
            frame_ids
                .values()
                .iter()
                .enumerate()
                .all(|(i, &id)| id as usize == i),
            "ids in row order across batches"
        );
        let lookup = FrameLookup::new(&fs, &batches).unwrap();
        let mut back = 0;
        for part in &out {
            let got = lookup.assemble(part.column(1)).unwrap();
            let keys = stack_keys(&got, got.len()).unwrap();
            let pid = part.column(0).as_fixed_size_binary();
            for i in 0..got.len() {
                assert_eq!(keys.value(i), pid.value(i), "the same stack");
                back += 1;
            }
        }
        assert_eq!(back, n);
    }

    #[test]
    fn stacks_come_back_from_their_frames() {
        let rows: Vec<Row> = stacks()
            .into_iter()
            .map(|stack| Row {
                kind: "profile".into(),
                stack,
                ..Default::default()
            })
            .collect();
        let (stack, ids) = stacks_of(&rows);
        let mut framer = Framer::new(stack.data_type()).unwrap().unwrap();
        // Added in two parts, as stacks-pack adds the new stacks of each batch.
        framer.add(&ids.slice(0, 3), &stack.slice(0, 3)).unwrap();
        framer.add(&ids.slice(3, 3), &stack.slice(3, 3)).unwrap();
        assert_eq!(framer.frames(), 5, "leaf, run, main, vfs_read, other");
        let fs = frames_schema(stack.data_type(), Default::default()).unwrap();
        let ss = framed_stacks_schema(Default::default());
        let (frames, out) = framer.finish(7, &fs, &ss, 4).unwrap();
        assert_eq!(out.len(), 2, "chunks of 4");
        // Sorted: user frames (kernel = false) first, by offset.
        let function = frames
            .column_by_name(field::FUNCTION)
            .unwrap()
            .as_string::<i32>();
        let names: Vec<&str> = (0..frames.num_rows()).map(|i| function.value(i)).collect();
        assert_eq!(names, ["main", "run", "leaf", "other", "vfs_read"]);
        let folded = frames.column_by_name(NAME).unwrap().as_string::<i32>();
        let folded: Vec<&str> = (0..frames.num_rows()).map(|i| folded.value(i)).collect();
        assert_eq!(folded, names, "named functions are their names");

        let lookup = FrameLookup::new(&fs, std::slice::from_ref(&frames)).unwrap();
        let mut by_id: HashMap<Vec<u8>, Option<Vec<Option<String>>>> = HashMap::new();
        for part in &out {
            let got = lookup.assemble(part.column(1)).unwrap();
            assert_eq!(
                got.data_type(),
                stack.data_type(),
                "the contract's stack type"
            );
            let keys = stack_keys(&got, got.len()).unwrap();
            let pid = part.column(0).as_fixed_size_binary();
            for i in 0..got.len() {
                assert_eq!(keys.value(i), pid.value(i), "the same stack, every field");
                let names = (!got.is_null(i)).then(|| {
                    let v = got.value(i);
                    let s = v.as_struct();
                    let f = s
                        .column_by_name(field::FUNCTION)
                        .unwrap()
                        .as_string::<i32>();
                    (0..f.len())
                        .map(|j| f.is_valid(j).then(|| f.value(j).to_string()))
                        .collect()
                });
                by_id.insert(pid.value(i).to_vec(), names);
            }
        }
        assert_eq!(by_id.len(), 5, "every stack but the null one");
        assert_eq!(
            by_id
                .values()
                .filter(|v| v.as_ref().is_some_and(Vec::is_empty))
                .count(),
            1
        );
    }

    #[test]
    fn retained_stacks_keep_their_frames_and_the_rest_is_dropped() {
        let main = frame("main", 0x1100, false);
        let rows: Vec<Row> = (0..3000u64)
            .map(|i| Row {
                kind: "profile".into(),
                stack: Some(vec![
                    frame(&format!("f{i}"), 0x2000 + i, false),
                    main.clone(),
                ]),
                ..Default::default()
            })
            .collect();
        let (stack, keys) = stacks_of(&rows);
        let mut framer = Framer::new(stack.data_type()).unwrap().unwrap();
        framer.add(&keys, &stack).unwrap();
        // Adding a stack again changes nothing.
        framer.add(&keys.slice(0, 10), &stack.slice(0, 10)).unwrap();
        assert_eq!((framer.stacks(), framer.frames()), (3000, 3001));
        let kept: Vec<StackId> = (0..10)
            .map(|i| keys.value(i * 300).try_into().unwrap())
            .collect();
        let before = framer.bytes();
        framer.retain(|id| kept.contains(id));
        assert_eq!((framer.stacks(), framer.frames()), (10, 11));
        assert!(
            framer.bytes() < before / 10,
            "{} vs {before}",
            framer.bytes()
        );
        let fs = frames_schema(stack.data_type(), Default::default()).unwrap();
        let ss = framed_stacks_schema(Default::default());
        let (frames, out) = framer
            .parts(&kept)
            .unwrap()
            .finish_whole(3, &fs, &ss, 100)
            .unwrap();
        let lookup = FrameLookup::new(&fs, std::slice::from_ref(&frames)).unwrap();
        let got = lookup.assemble(out[0].column(1)).unwrap();
        let got_keys = stack_keys(&got, got.len()).unwrap();
        let pid = out[0].column(0).as_fixed_size_binary();
        for i in 0..got.len() {
            assert_eq!(
                got_keys.value(i),
                pid.value(i),
                "the same stack, every field"
            );
        }
        assert_eq!(got.len(), 10);
    }
}
