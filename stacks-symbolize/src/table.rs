//! A batch's table of distinct frames, and the `stack` column copied from it group by group.

use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, StringBuilder, UInt32Builder, UInt64Builder};
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, StringArray, StructArray, UInt32Array, UInt64Array};
use arrow_buffer::{BooleanBufferBuilder, NullBuffer, OffsetBuffer};
use arrow_schema::ArrowError;
use arrow_select::take::take;

use stacks_stream::Unresolved;

use crate::resolve::SymFrame;

/// Where a frame is, as the output shows it.
#[derive(Clone, Copy)]
pub struct Place<'a> {
    pub kernel: bool,
    pub module: Option<&'a str>,
    pub build_id: Option<&'a str>,
    pub offset: Option<u64>,
}

/// The frames of a batch's groups, column by column (all stack fields but `addr`).
#[derive(Default)]
pub struct Table {
    pub len: u32,
    function: StringBuilder,
    file: StringBuilder,
    line: UInt32Builder,
    column: UInt32Builder,
    inlined: BooleanBuilder,
    kernel: BooleanBuilder,
    module: StringBuilder,
    build_id: StringBuilder,
    offset: UInt64Builder,
    error: StringBuilder,
    symbol: StringBuilder,
    reason: StringBuilder,
}

impl Table {
    pub fn push(&mut self, f: &SymFrame, p: &Place<'_>) {
        self.len += 1;
        self.function.append_option(f.function.as_deref());
        self.file.append_option(f.file.as_deref());
        self.line.append_option(f.line);
        self.column.append_option(f.column);
        self.inlined.append_value(f.inlined);
        self.kernel.append_value(p.kernel);
        self.module.append_option(p.module);
        self.build_id.append_option(p.build_id);
        self.offset.append_option(p.offset);
        self.error.append_option(f.error.as_deref());
        self.symbol.append_option(f.symbol.as_deref());
        self.reason.append_option(f.reason.map(Unresolved::as_str));
    }

    /// The stack elements: for each element, its group's rows of the table (`gstart[g]` to
    /// `gstart[g + 1]`), with `addrs`, column by column on up to `threads` threads. Column order
    /// follows `stacks_stream::frame_fields()`.
    pub fn finish(
        mut self,
        elem_group: &[u32],
        gstart: &[u32],
        addrs: UInt64Array,
        threads: usize,
    ) -> Result<StructArray, ArrowError> {
        let mut sources: Vec<ArrayRef> = vec![
            Arc::new(self.function.finish()),
            Arc::new(self.file.finish()),
            Arc::new(self.line.finish()),
            Arc::new(self.column.finish()),
            Arc::new(self.inlined.finish()),
            Arc::new(self.kernel.finish()),
            Arc::new(self.module.finish()),
            Arc::new(self.build_id.finish()),
            Arc::new(self.offset.finish()),
        ];
        let fields = stacks_stream::frame_fields();
        sources.push(Arc::new(self.error.finish()));
        sources.push(Arc::new(self.symbol.finish()));
        sources.push(Arc::new(self.reason.finish()));
        let total = addrs.len();
        // Row indices into the table, one per output frame (for the fixed-width columns).
        let mut indices: Vec<u32> = Vec::with_capacity(total);
        for &g in elem_group {
            indices.extend(gstart[g as usize]..gstart[g as usize + 1]);
        }
        let indices = UInt32Array::from(indices);
        let copy = |src: &ArrayRef| -> Result<ArrayRef, ArrowError> {
            match src.as_string_opt::<i32>() {
                Some(strings) => copy_strings(strings, elem_group, gstart, total),
                None => take(src.as_ref(), &indices, None),
            }
        };
        let mut copied: Vec<ArrayRef> = if threads > 1 {
            // Strings dominate: function, file and symbol (source 10: `addrs` is not a source)
            // on a second thread.
            type Part<'a> = Vec<(usize, &'a ArrayRef)>;
            let (mut a, mut b): (Part<'_>, Part<'_>) = sources
                .iter()
                .enumerate()
                .partition(|(i, _)| matches!(i, 0 | 1 | 10));
            let mut out: Vec<Option<Result<ArrayRef, ArrowError>>> =
                (0..sources.len()).map(|_| None).collect();
            std::thread::scope(|s| {
                let h = s.spawn(|| a.drain(..).map(|(i, c)| (i, copy(c))).collect::<Vec<_>>());
                for (i, c) in b.drain(..) {
                    out[i] = Some(copy(c));
                }
                for (i, c) in h.join().expect("column copy thread") {
                    out[i] = Some(c);
                }
            });
            out.into_iter()
                .map(|c| c.expect("every column copied"))
                .collect::<Result<_, _>>()?
        } else {
            sources.iter().map(copy).collect::<Result<_, _>>()?
        };
        copied.insert(9, Arc::new(addrs));
        StructArray::try_new(fields, copied, None)
    }
}

/// A string column of the output: for each element, its group's rows of `src` (adjacent,
/// so one copy of their bytes), offsets rebased, validity copied as a bit range.
fn copy_strings(
    src: &StringArray,
    elem_group: &[u32],
    gstart: &[u32],
    total: usize,
) -> Result<ArrayRef, ArrowError> {
    let offs = src.value_offsets();
    let data = src.value_data();
    let range = |g: u32| (gstart[g as usize] as usize, gstart[g as usize + 1] as usize);
    let bytes: usize = elem_group
        .iter()
        .map(|&g| {
            let (s, e) = range(g);
            (offs[e] - offs[s]) as usize
        })
        .sum();
    if bytes > i32::MAX as usize {
        return Err(ArrowError::ComputeError(format!(
            "a batch's stack strings would take {bytes} bytes, more than a string column holds"
        )));
    }
    let mut values: Vec<u8> = Vec::with_capacity(bytes);
    let mut offsets: Vec<i32> = Vec::with_capacity(total + 1);
    offsets.push(0);
    let nulls = src.nulls();
    let mut valid = nulls.map(|_| BooleanBufferBuilder::new(total));
    for &g in elem_group {
        let (s, e) = range(g);
        let base = values.len() as i32 - offs[s];
        values.extend_from_slice(&data[offs[s] as usize..offs[e] as usize]);
        offsets.extend(offs[s + 1..=e].iter().map(|o| o + base));
        if let (Some(v), Some(n)) = (valid.as_mut(), nulls) {
            v.append_packed_range(n.offset() + s..n.offset() + e, n.validity());
        }
    }
    let nulls = valid.map(|mut v| NullBuffer::new(v.finish()));
    Ok(Arc::new(StringArray::try_new(
        OffsetBuffer::new(offsets.into()),
        values.into(),
        nulls,
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_copied_by_group_with_nulls() {
        let src = StringArray::from(vec![Some("a"), None, Some("ccc"), Some(""), Some("ee")]);
        // groups: 0 = rows 0..2, 1 = rows 2..3, 2 = rows 3..5
        let gstart = [0u32, 2, 3, 5];
        let out = copy_strings(&src, &[2, 0, 1, 0], &gstart, 7).unwrap();
        let out = out.as_string::<i32>();
        let got: Vec<Option<&str>> = out.iter().collect();
        assert_eq!(
            got,
            [
                Some(""),
                Some("ee"),
                Some("a"),
                None,
                Some("ccc"),
                Some("a"),
                None
            ]
        );
        let none = StringArray::from(vec!["x", "yy"]);
        let out = copy_strings(&none, &[0, 0], &[0, 2], 4).unwrap();
        assert_eq!(out.null_count(), 0);
        assert_eq!(out.as_string::<i32>().value(3), "yy");
    }
}
