//! A batch's table of distinct frames, and the `stack` column copied from it group by group.

use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, StringBuilder, UInt32Builder, UInt64Builder};
use arrow_array::{ArrayRef, StructArray, UInt64Array, make_array};
use arrow_data::transform::MutableArrayData;
use arrow_schema::ArrowError;

use crate::resolve::SymFrame;

/// Where a frame is, as the output shows it.
#[derive(Clone, Copy)]
pub struct Place<'a> {
    pub kernel: bool,
    pub module: Option<&'a str>,
    pub build_id: Option<&'a str>,
    pub offset: Option<u64>,
}

/// Name of the optional last stack field holding the raw (mangled) symbol.
pub const SYMBOL_FIELD: &str = "symbol";

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
        let symbol = fields.len() > 11 && fields[11].name() == SYMBOL_FIELD;
        sources.push(Arc::new(self.error.finish()));
        if symbol {
            sources.push(Arc::new(self.symbol.finish()));
        }
        let total = addrs.len();
        let copy = |src: &ArrayRef| -> Result<ArrayRef, ArrowError> {
            let data = src.to_data();
            let mut m = MutableArrayData::new(vec![&data], false, total);
            for &g in elem_group {
                let g = g as usize;
                m.try_extend(0, gstart[g] as usize, gstart[g + 1] as usize)?;
            }
            Ok(make_array(m.freeze()))
        };
        let mut copied: Vec<ArrayRef> = if threads > 1 {
            // Strings dominate: function, file and symbol on a second thread.
            type Part<'a> = Vec<(usize, &'a ArrayRef)>;
            let (mut a, mut b): (Part<'_>, Part<'_>) = sources
                .iter()
                .enumerate()
                .partition(|(i, _)| matches!(i, 0 | 1 | 11));
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
