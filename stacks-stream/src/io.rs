//! Arrow IPC stream input and output for stdin/stdout or paths, with the checks every tool
//! shares: refuse binary output to a terminal, detect non-Arrow and truncated input, flush
//! every batch so live pipelines see data.
//!
//! Input is checked message by message before Arrow decodes it (buffers inside their body,
//! body and uncompressed sizes that fit), because the Arrow reader trusts those numbers and
//! panics or tries a huge allocation on a corrupt stream; anything it still panics on is
//! caught and reported as an invalid stream, so no tool ever dies on its input.

mod checked;
mod input;
mod output;
mod stack_writer;

pub use input::{InputStream, open_input};
pub use output::{
    OutputStream, Sink, open_output, open_output_with, open_sink, open_text_sink, stdout_sink,
    writes_to_pipe,
};
pub use stack_writer::StackStreamWriter;

#[cfg(test)]
mod tests {
    use super::checked::{CONTINUATION, decoder_failed, guarded};
    use super::*;
    use std::io::{self, Write};
    use std::path::Path;
    use std::sync::Arc;

    use arrow_array::RecordBatch;
    use arrow_ipc::writer::StreamWriter;

    use crate::ContractError;
    use arrow_array::Int64Array;
    use arrow_schema::{DataType, Field, Schema};

    fn stream_bytes(finish: bool) -> Vec<u8> {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![1, 2]))])
                .unwrap();
        let mut buf = Vec::new();
        {
            let mut w = StreamWriter::try_new(&mut buf, &schema).unwrap();
            w.write(&batch).unwrap();
            w.write(&batch).unwrap();
            if finish {
                w.finish().unwrap();
            }
        }
        buf
    }

    fn read_all(bytes: Vec<u8>) -> Result<usize, ContractError> {
        let mut s = InputStream::new("test", Box::new(io::Cursor::new(bytes)))?;
        let mut rows = 0;
        while let Some(b) = s.next_batch()? {
            rows += b.num_rows();
        }
        Ok(rows)
    }

    #[test]
    fn complete_stream_reads() {
        assert_eq!(read_all(stream_bytes(true)).unwrap(), 4);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let full = stream_bytes(true);
        for cut in 0..full.len() {
            let err = read_all(full[..cut].to_vec()).unwrap_err();
            let msg = err.to_string();
            let expected = if cut == 0 { "empty" } else { "truncated" };
            assert!(msg.contains(expected), "cut at {cut}: {msg}");
        }
    }

    #[test]
    fn raw_and_symbolized_schemas_round_trip_with_metadata() {
        use crate::schema::{meta, raw_schema, stage, stamp, symbolized_schema};
        use arrow_array::new_empty_array;
        let dir = std::env::temp_dir().join(format!("stacks-stream-rt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (i, make) in [raw_schema, symbolized_schema].into_iter().enumerate() {
            let mut md = std::collections::HashMap::new();
            stamp(&mut md, "t", "1", stage::RAW);
            md.insert(meta::HOST.into(), "h".into());
            let schema = Arc::new(make(md));
            let columns = schema
                .fields()
                .iter()
                .map(|f| new_empty_array(f.data_type()))
                .collect();
            let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
            let path = dir.join(format!("{i}.arrow"));
            let mut out = open_output_with(Some(&path), &schema, i == 1).unwrap();
            out.write(&batch).unwrap();
            out.finish().unwrap();
            let mut input = open_input(Some(&path)).unwrap();
            assert_eq!(input.schema(), schema);
            assert_eq!(input.schema().metadata()[meta::HOST], "h");
            assert_eq!(input.next_batch().unwrap().unwrap().num_rows(), 0);
            assert!(input.next_batch().unwrap().is_none());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn write_errors_name_the_file() {
        let full = Path::new("/dev/full");
        if !full.exists() {
            return;
        }
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![1, 2]))])
                .unwrap();
        let mut text = open_text_sink(Some(full)).unwrap();
        assert_eq!(text.name, "/dev/full");
        assert!(text.writer.write_all(b"x").is_err());
        assert_eq!(open_text_sink(Some(Path::new("-"))).unwrap().name, "stdout");
        let mut out = open_output(Some(full), &schema).unwrap();
        assert_eq!(out.name(), "/dev/full");
        let err = out.write(&batch).unwrap_err();
        assert!(
            matches!(&err, ContractError::Io { path, source }
                if path == "/dev/full" && source.raw_os_error() == Some(libc::ENOSPC)),
            "{err:?}"
        );
    }

    #[test]
    fn buffer_outside_its_body_is_refused_by_name() {
        // Found by the stream_pprof fuzzer: the Arrow reader panicked slicing this buffer.
        let bytes = stacks_testkit::fuzz_case("stream_pprof-buffer-outside-body.arrow");
        let err = read_all(bytes).unwrap_err().to_string();
        assert!(
            err.contains("invalid Arrow stream") && err.contains("outside"),
            "{err}"
        );
    }

    /// `bytes` with the body length of its first record batch message replaced by `len`.
    fn with_body_length(bytes: &[u8], len: i64) -> Vec<u8> {
        let mut out = bytes.to_vec();
        let mut pos = 0;
        loop {
            let meta_len = i32::from_le_bytes(out[pos + 4..pos + 8].try_into().unwrap()) as usize;
            let meta = &out[pos + 8..pos + 8 + meta_len];
            let message = arrow_ipc::root_as_message(meta).unwrap();
            let body = message.bodyLength();
            if message.header_as_record_batch().is_some() {
                let needle = body.to_le_bytes();
                let at = meta.windows(8).position(|w| w == needle).unwrap();
                let at = pos + 8 + at;
                out[at..at + 8].copy_from_slice(&len.to_le_bytes());
                return out;
            }
            pos += 8 + meta_len + body as usize;
        }
    }

    #[test]
    fn absurd_lengths_are_refused_before_allocating() {
        // Found by the stream_trace fuzzer: 1.1 GB and 11 s to say "truncated" about 777 bytes.
        let mut huge_meta = CONTINUATION.to_vec();
        huge_meta.extend((1_191_185_208i32).to_le_bytes());
        huge_meta.extend([0u8; 64]);
        let start = std::time::Instant::now();
        let err = read_all(huge_meta).unwrap_err().to_string();
        assert!(err.contains("truncated"), "{err}");
        assert!(start.elapsed() < std::time::Duration::from_secs(2));
        let full = stream_bytes(true);
        let err = read_all(with_body_length(&full, 1 << 50))
            .unwrap_err()
            .to_string();
        assert!(err.contains("truncated"), "{err}");
        let err = read_all(with_body_length(&full, -8))
            .unwrap_err()
            .to_string();
        assert!(err.contains("negative body length"), "{err}");
        let mut negative_meta = CONTINUATION.to_vec();
        negative_meta.extend((-5i32).to_le_bytes());
        let err = read_all(negative_meta).unwrap_err().to_string();
        assert!(err.contains("negative metadata length"), "{err}");
    }

    #[test]
    fn decoder_panics_become_errors() {
        assert_eq!(guarded(|| 5), Ok(5));
        let caught: Result<(), String> = guarded(|| panic!("slice out of\nrange"));
        assert_eq!(caught, Err("slice out of range".to_string()));
        let err = decoder_failed("stdin", "boom".into()).to_string();
        assert!(err.starts_with("stdin: invalid Arrow stream: "), "{err}");
    }

    #[test]
    fn garbage_is_named() {
        let err = read_all(b"hello world\n".to_vec()).unwrap_err();
        assert!(err.to_string().contains("not an Arrow IPC stream"), "{err}");
        let err = read_all(b"PAR1xxxxxxxx".to_vec()).unwrap_err();
        assert!(err.to_string().contains("Parquet"), "{err}");
        let err = read_all(Vec::new()).unwrap_err();
        assert!(err.to_string().contains("empty"), "{err}");
    }
}
