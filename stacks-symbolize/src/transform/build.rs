//! Building the new stacks of a batch: the resolved frames of their groups in one small
//! table, taken per stack element, with each frame's address and each stack's length set.

use std::sync::Arc;

use arrow_array::{ArrayRef, ListArray, UInt64Array};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{ArrowError, DataType};
use stacks_stream::Unresolved;

use super::Symbolize;
use super::group::{Grouping, Res};
use crate::resolve::{Frames, SymFrame};
use crate::table::Table;

impl Symbolize {
    /// The new stacks symbolized: the frame table of their groups (each group's frames, in
    /// group order), taken per element, with each frame's address and stack lengths set.
    pub(super) fn build(&mut self, g: Grouping<'_>) -> Result<ArrayRef, ArrowError> {
        let mut table = Table::default();
        let mut gstart: Vec<u32> = Vec::with_capacity(g.groups.len() + 1);
        for group in &g.groups {
            gstart.push(table.len);
            let frames = self.frames(&group.res);
            for f in frames.iter() {
                table.push(f, &group.place);
            }
        }
        gstart.push(table.len);

        // Pass 2: row lengths and each frame's address; the frames themselves are copied from
        // the table group by group (a group's frames are adjacent rows there).
        let mut lengths: Vec<usize> = Vec::with_capacity(g.row_end.len());
        let mut addrs: Vec<u64> = Vec::with_capacity(g.elem_group.len() * 2);
        let mut e = 0usize;
        for &end in &g.row_end {
            let before = addrs.len();
            while e < end {
                let grp = g.elem_group[e] as usize;
                let k = (gstart[grp + 1] - gstart[grp]) as usize;
                addrs.extend(std::iter::repeat_n(g.elem_addr[e], k));
                e += 1;
            }
            lengths.push(addrs.len() - before);
        }
        self.stats.frames_in += g.elem_group.len() as u64;
        self.stats.frames_out += addrs.len() as u64;

        let stack = table.finish(
            &g.elem_group,
            &gstart,
            UInt64Array::from(addrs),
            self.copiers,
        )?;
        let DataType::List(field) = stacks_stream::stack_type() else {
            unreachable!("stack type is a list")
        };
        let nulls = g.row_valid.iter().any(|v| !v).then(|| g.row_valid.into());
        let list = ListArray::try_new(
            field,
            OffsetBuffer::from_lengths(lengths),
            Arc::new(stack),
            nulls,
        )?;
        Ok(Arc::new(list))
    }

    fn frames(&self, res: &Res<'_>) -> Frames {
        let got = match res {
            Res::User(m, off) => self.user.get(&(*m, *off)).cloned(),
            Res::KSym(s, off) => self.ksym.get(&(Box::<str>::from(*s), *off)).cloned(),
            Res::KAddr(a) => self.kaddr.get(a).cloned(),
            Res::Fixed(f) => Some(Frames::from(vec![f.clone()])),
        };
        got.unwrap_or_else(|| {
            Frames::from(vec![SymFrame::unresolved(
                Unresolved::NoSymbol,
                "not looked up",
            )])
        })
    }
}
