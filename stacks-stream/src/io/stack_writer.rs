//! An Arrow IPC stream writer for streams whose only dictionary columns are stack columns (what
//! stacks-record and stacks-symbolize write). It sends each stack dictionary's new entries as a
//! delta dictionary message by their count alone: the contract's rule (a stack dictionary
//! grows, or starts over shorter; see [`crate::dict`]) says the entries already sent are the
//! new dictionary's prefix, so nothing is compared. Arrow's own writer compares the whole
//! previous dictionary with the new one's prefix on every batch that adds entries, which on
//! recordings with ever new stacks cost more than everything else the producer did. Messages
//! are Arrow's own: the schema, dictionary bodies and record batches are encoded by arrow-ipc;
//! only the dictionary batch header is assembled here.

use std::io::Write;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_ipc::writer::{
    DictionaryTracker, EncodedData, IpcDataGenerator, IpcWriteContext, IpcWriteOptions,
    write_message,
};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};

use crate::dict::{Entries, is_stack_column, key_type};

/// What was sent of one stack column's dictionary.
struct Sent {
    column: usize,
    dict_id: i64,
    /// Entries sent so far; `None` before the first batch.
    len: Option<usize>,
}

/// The writer; see the module documentation.
pub struct StackStreamWriter<W: Write> {
    out: W,
    options: IpcWriteOptions,
    generator: IpcDataGenerator,
    tracker: DictionaryTracker,
    context: IpcWriteContext,
    /// The schema record batches are encoded under: stack columns as their keys.
    keys_schema: SchemaRef,
    sent: Vec<Sent>,
}

impl<W: Write> StackStreamWriter<W> {
    /// Whether `schema` suits this writer: it has dictionary columns, and every one is a
    /// top-level stack column whose values hold no dictionary.
    pub(crate) fn suits(schema: &Schema) -> bool {
        let mut any = false;
        for f in schema.fields() {
            match f.data_type() {
                DataType::Dictionary(k, v)
                    if is_stack_column(f.name()) && **k == key_type() && !has_dictionary(v) =>
                {
                    any = true
                }
                dt if has_dictionary(dt) => return false,
                _ => {}
            }
        }
        any
    }

    /// Write the schema message of `schema` (which must [`suit`](Self::suits)) to `out`.
    pub fn try_new(
        mut out: W,
        schema: &Schema,
        options: IpcWriteOptions,
    ) -> Result<Self, ArrowError> {
        let generator = IpcDataGenerator::default();
        let mut tracker = DictionaryTracker::new(false);
        let encoded =
            generator.schema_to_bytes_with_dictionary_tracker(schema, &mut tracker, &options);
        write_message(&mut out, encoded, &options)?;
        // Top-level dictionary columns without nested ones get their ids in column order.
        let ids = tracker.dict_id().to_vec();
        let columns: Vec<usize> = (0..schema.fields().len())
            .filter(|&i| matches!(schema.field(i).data_type(), DataType::Dictionary(..)))
            .collect();
        if ids.len() != columns.len() {
            return Err(ArrowError::InvalidArgumentError(
                "a stack stream's only dictionaries are its top-level stack columns".into(),
            ));
        }
        let sent = columns
            .into_iter()
            .zip(ids)
            .map(|(column, dict_id)| Sent {
                column,
                dict_id,
                len: None,
            })
            .collect();
        let fields: Vec<Field> = schema
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                DataType::Dictionary(..) => Field::new(f.name(), key_type(), true),
                _ => f.as_ref().clone(),
            })
            .collect();
        Ok(StackStreamWriter {
            out,
            options,
            generator,
            tracker: DictionaryTracker::new(false),
            context: IpcWriteContext::default(),
            keys_schema: Arc::new(Schema::new(fields)),
            sent,
        })
    }

    /// Write `batch`: for each stack column, the entries its dictionary gained (a delta), or
    /// the whole dictionary when it is the first or started over (shorter); then the rows,
    /// the stack columns as their keys.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), ArrowError> {
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        for s in &mut self.sent {
            let entries = Entries::new(batch.column(s.column))?;
            let values = entries.values();
            let n = values.len();
            let (from, delta) = match s.len {
                Some(sent) if n >= sent => (sent, true),
                _ => (0, false),
            };
            if n > from || !delta {
                let part = values.slice(from, n - from);
                let message = dictionary_message(
                    &self.generator,
                    s.dict_id,
                    part,
                    delta,
                    &self.options,
                    &mut self.context,
                )?;
                write_message(&mut self.out, message, &self.options)?;
            }
            s.len = Some(n);
            columns[s.column] = Arc::new(entries.keys());
        }
        let keys = RecordBatch::try_new(Arc::clone(&self.keys_schema), columns)?;
        let (dictionaries, message) =
            self.generator
                .encode(&keys, &mut self.tracker, &self.options, &mut self.context)?;
        debug_assert!(dictionaries.is_empty());
        write_message(&mut self.out, message, &self.options)?;
        Ok(())
    }

    /// The destination.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// Write the end-of-stream marker.
    pub fn finish(&mut self) -> Result<(), ArrowError> {
        self.out.write_all(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0])?;
        Ok(())
    }
}

/// Whether `dt` holds a dictionary anywhere.
fn has_dictionary(dt: &DataType) -> bool {
    match dt {
        DataType::Dictionary(..) => true,
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::FixedSizeList(f, _)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::Map(f, _) => has_dictionary(f.data_type()),
        DataType::Struct(fields) => fields.iter().any(|f| has_dictionary(f.data_type())),
        DataType::Union(fields, _) => fields.iter().any(|(_, f)| has_dictionary(f.data_type())),
        DataType::RunEndEncoded(_, v) => has_dictionary(v.data_type()),
        _ => false,
    }
}

/// A dictionary batch message holding `values` for dictionary `dict_id`: the body is what
/// arrow-ipc encodes for a one-column record batch of `values`; its header is rewritten into a
/// DictionaryBatch around the same record batch header.
fn dictionary_message(
    generator: &IpcDataGenerator,
    dict_id: i64,
    values: ArrayRef,
    is_delta: bool,
    options: &IpcWriteOptions,
    context: &mut IpcWriteContext,
) -> Result<EncodedData, ArrowError> {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "values",
        values.data_type().clone(),
        true,
    )]));
    let batch = RecordBatch::try_new(schema, vec![values])?;
    let mut tracker = DictionaryTracker::new(false);
    let (_, encoded) = generator.encode(&batch, &mut tracker, options, context)?;
    let message = arrow_ipc::root_as_message(&encoded.ipc_message)
        .map_err(|e| ArrowError::IpcError(format!("re-reading an encoded batch: {e}")))?;
    let rb = message
        .header_as_record_batch()
        .ok_or_else(|| ArrowError::IpcError("an encoded batch without its header".into()))?;
    let mut fbb = flatbuffers::FlatBufferBuilder::new();
    let nodes: Vec<arrow_ipc::FieldNode> = rb
        .nodes()
        .map(|v| v.iter().copied().collect())
        .unwrap_or_default();
    let buffers: Vec<arrow_ipc::Buffer> = rb
        .buffers()
        .map(|v| v.iter().copied().collect())
        .unwrap_or_default();
    let nodes = fbb.create_vector(&nodes);
    let buffers = fbb.create_vector(&buffers);
    let compression = rb.compression().map(|c| {
        let mut b = arrow_ipc::BodyCompressionBuilder::new(&mut fbb);
        b.add_codec(c.codec());
        b.add_method(c.method());
        b.finish()
    });
    let mut rbb = arrow_ipc::RecordBatchBuilder::new(&mut fbb);
    rbb.add_length(rb.length());
    rbb.add_nodes(nodes);
    rbb.add_buffers(buffers);
    if let Some(c) = compression {
        rbb.add_compression(c);
    }
    let data = rbb.finish();
    let mut dbb = arrow_ipc::DictionaryBatchBuilder::new(&mut fbb);
    dbb.add_id(dict_id);
    dbb.add_data(data);
    dbb.add_isDelta(is_delta);
    let dictionary = dbb.finish().as_union_value();
    let mut mb = arrow_ipc::MessageBuilder::new(&mut fbb);
    mb.add_version(message.version());
    mb.add_header_type(arrow_ipc::MessageHeader::DictionaryBatch);
    mb.add_bodyLength(message.bodyLength());
    mb.add_header(dictionary);
    let root = mb.finish();
    fbb.finish(root, None);
    Ok(EncodedData {
        ipc_message: fbb.finished_data().to_vec(),
        arrow_data: encoded.arrow_data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dict::tests::lists;
    use crate::dict::{StackDictionary, dictionary_type, restart_plan};
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, UInt64Type};
    use arrow_array::{Int32Array, Int64Array};
    use arrow_ipc::reader::StreamReader;

    /// Batches over one growing (then restarted) dictionary, written by this writer with and
    /// without compression, read back by arrow-rs row for row.
    #[test]
    fn deltas_and_restarts_read_back_as_written() {
        let list_type = lists(&[]).data_type().clone();
        let schema = Arc::new(Schema::new(vec![
            Field::new("kstack", dictionary_type(list_type.clone()), true),
            Field::new("value", DataType::Int64, false),
        ]));
        assert!(StackStreamWriter::<Vec<u8>>::suits(&schema));
        let mut d = StackDictionary::new(&list_type);
        let mut batches = Vec::new();
        d.extend(lists(&[&[1, 2], &[3]]).as_ref()).unwrap();
        batches.push((
            vec![Some(0), None, Some(1)],
            d.column(Int32Array::from(vec![Some(0), None, Some(1)]))
                .unwrap(),
        ));
        batches.push((vec![Some(1)], d.column(Int32Array::from(vec![1])).unwrap()));
        d.extend(lists(&[&[4, 5, 6]]).as_ref()).unwrap();
        batches.push((
            vec![Some(2), Some(0)],
            d.column(Int32Array::from(vec![2, 0])).unwrap(),
        ));
        // Start over, shorter: only entry 2 kept, as key 0.
        let (keep, _) = restart_plan(true, 3, &[Some(2)]).unwrap();
        d.restart(&keep).unwrap();
        d.extend(lists(&[&[7]]).as_ref()).unwrap();
        batches.push((
            vec![Some(1), Some(0)],
            d.column(Int32Array::from(vec![1, 0])).unwrap(),
        ));
        let want: Vec<Vec<Option<Vec<u64>>>> = batches
            .iter()
            .map(|(_, c)| {
                let plain = arrow_cast::cast(c, &list_type).unwrap();
                let l = plain.as_list::<i32>();
                (0..l.len())
                    .map(|i| {
                        l.is_valid(i)
                            .then(|| l.value(i).as_primitive::<UInt64Type>().values().to_vec())
                    })
                    .collect()
            })
            .collect();
        for compress in [false, true] {
            let mut options = IpcWriteOptions::default();
            if compress {
                options = options
                    .try_with_compression(Some(arrow_ipc::CompressionType::ZSTD))
                    .unwrap();
            }
            let mut w = StackStreamWriter::try_new(Vec::new(), &schema, options).unwrap();
            for (i, (_, c)) in batches.iter().enumerate() {
                let v = Arc::new(Int64Array::from(vec![i as i64; c.len()]));
                w.write(&RecordBatch::try_new(schema.clone(), vec![c.clone(), v]).unwrap())
                    .unwrap();
            }
            w.finish().unwrap();
            let bytes = std::mem::take(w.get_mut());
            let r = StreamReader::try_new(std::io::Cursor::new(bytes), None).unwrap();
            let mut got = Vec::new();
            let mut lens = Vec::new();
            for b in r {
                let b = b.unwrap();
                let dict = b.column(0).as_dictionary::<Int32Type>();
                lens.push(dict.values().len());
                let plain = arrow_cast::cast(b.column(0), &list_type).unwrap();
                let l = plain.as_list::<i32>();
                got.push(
                    (0..l.len())
                        .map(|i| {
                            l.is_valid(i)
                                .then(|| l.value(i).as_primitive::<UInt64Type>().values().to_vec())
                        })
                        .collect::<Vec<_>>(),
                );
            }
            assert_eq!(got, want, "compress={compress}");
            assert_eq!(
                lens,
                [2, 2, 3, 2],
                "deltas grow the dictionary; a restart replaces it"
            );
        }
    }

    #[test]
    fn only_stack_dictionaries_suit() {
        let list = lists(&[]).data_type().clone();
        let plain = Schema::new(vec![Field::new("kstack", list.clone(), true)]);
        assert!(
            !StackStreamWriter::<Vec<u8>>::suits(&plain),
            "no dictionaries: arrow's writer"
        );
        let other = Schema::new(vec![
            Field::new("kstack", dictionary_type(list), true),
            Field::new("date", dictionary_type(DataType::Utf8), true),
        ]);
        assert!(!StackStreamWriter::<Vec<u8>>::suits(&other));
    }
}
