//! `stack_any(stack)`: an aggregate giving one of its group's stacks (the first non-null one
//! it sees). Bundled queries group by `stack_key(stack)` and take the stack with it, so every
//! stack of a group is the same. Unlike `first_value`, which keeps a slice of each group's
//! input batch alive (a store with a million groups then holds its whole decoded input), this
//! keeps one compact copy per distinct stack and four bytes per group, and reports that size
//! to the memory pool.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, BooleanArray, UInt32Array, new_null_array};
use arrow_schema::DataType;
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::function::AccumulatorArgs;
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, EmitTo, GroupsAccumulator, Signature, Volatility,
};

use stacks_stream::stack_key::stack_keys;

/// The `stack_any` aggregate.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct StackAny {
    signature: Signature,
}

impl StackAny {
    pub(super) fn new() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for StackAny {
    fn name(&self) -> &str {
        "stack_any"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        super::stack::frame_fields("stack_any", &arg_types[0])?;
        Ok(arg_types[0].clone())
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(OneStack {
            value: ScalarValue::try_from(args.return_type())?,
        }))
    }

    fn groups_accumulator_supported(&self, _args: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(GroupStacks::new(args.return_type().clone())))
    }
}

/// The row-by-row form (used where DataFusion cannot use the grouped one).
#[derive(Debug)]
struct OneStack {
    value: ScalarValue,
}

impl Accumulator for OneStack {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        if !self.value.is_null() {
            return Ok(());
        }
        let v = &values[0];
        if let Some(i) = (0..v.len()).find(|&i| v.is_valid(i)) {
            // A copy of just this row, not a slice of the batch.
            self.value = ScalarValue::try_from_array(v.as_ref(), i)?.compacted();
        }
        Ok(())
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(self.value.clone())
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.value.size()
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.value.clone()])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.update_batch(states)
    }
}

/// Where a group's stack is: chunk and row.
type Place = (u32, u32);

/// The grouped form: distinct stacks in compact chunks, found again by key.
struct GroupStacks {
    data_type: DataType,
    /// Compact list arrays holding the distinct stacks seen; the last is a one-row null list
    /// only while evaluating.
    chunks: Vec<ArrayRef>,
    chunk_bytes: usize,
    by_key: HashMap<[u8; 16], Place>,
    groups: Vec<Option<Place>>,
}

impl GroupStacks {
    fn new(data_type: DataType) -> Self {
        Self {
            data_type,
            chunks: Vec::new(),
            chunk_bytes: 0,
            by_key: HashMap::new(),
            groups: Vec::new(),
        }
    }

    /// Give each group of `group_indices` without a stack the stack of its first valid row.
    fn add(
        &mut self,
        values: &ArrayRef,
        group_indices: &[usize],
        filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.groups.resize(total_num_groups, None);
        let Some(list) = values.as_list_opt::<i32>() else {
            return exec_err!(
                "stack_any: the argument must be a stack, not {}",
                values.data_type()
            );
        };
        // Rows whose group has no stack yet, one per group.
        let mut rows: Vec<u32> = Vec::new();
        let mut wanting: Vec<usize> = Vec::new();
        let mut claimed = std::collections::HashSet::new();
        for (row, &g) in group_indices.iter().enumerate() {
            if self.groups[g].is_some()
                || list.is_null(row)
                || filter.is_some_and(|f| !f.is_valid(row) || !f.value(row))
                || !claimed.insert(g)
            {
                continue;
            }
            rows.push(row as u32);
            wanting.push(g);
        }
        if rows.is_empty() {
            return Ok(());
        }
        let picked = arrow_select::take::take(list, &UInt32Array::from(rows), None)?;
        let picked = picked.as_list::<i32>();
        let keys = stack_keys(picked, picked.len())?;
        // Stacks not stored yet go into one new chunk.
        let chunk = self.chunks.len() as u32;
        let mut new_rows: Vec<u32> = Vec::new();
        for (i, &g) in wanting.iter().enumerate() {
            let key: [u8; 16] = keys.value(i).try_into().expect("16-byte keys");
            let place = *self.by_key.entry(key).or_insert_with(|| {
                new_rows.push(i as u32);
                (chunk, new_rows.len() as u32 - 1)
            });
            self.groups[g] = Some(place);
        }
        if !new_rows.is_empty() {
            let stored = arrow_select::take::take(picked, &UInt32Array::from(new_rows), None)?;
            self.chunk_bytes += stored.get_array_memory_size();
            self.chunks.push(stored);
        }
        Ok(())
    }

    fn emit(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let places = emit_to.take_needed(&mut self.groups);
        let null = new_null_array(&self.data_type, 1);
        let null_at = self.chunks.len();
        let indices: Vec<(usize, usize)> = places
            .iter()
            .map(|p| match p {
                Some((c, r)) => (*c as usize, *r as usize),
                None => (null_at, 0),
            })
            .collect();
        let mut sources: Vec<&dyn Array> = self.chunks.iter().map(|c| c.as_ref()).collect();
        sources.push(null.as_ref());
        let out = arrow_select::interleave::interleave(&sources, &indices)?;
        if self.groups.is_empty() {
            self.chunks.clear();
            self.chunk_bytes = 0;
            self.by_key.clear();
        }
        Ok(out)
    }
}

impl GroupsAccumulator for GroupStacks {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.add(&values[0], group_indices, opt_filter, total_num_groups)
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        self.emit(emit_to)
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.emit(emit_to)?])
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.add(&values[0], group_indices, None, total_num_groups)
    }

    /// Skipping partial aggregation (many groups): each row is its own state.
    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let Some(filter) = opt_filter else {
            return Ok(vec![Arc::clone(&values[0])]);
        };
        let dropped: BooleanArray = (0..filter.len())
            .map(|i| Some(!(filter.is_valid(i) && filter.value(i))))
            .collect();
        Ok(vec![arrow_select::nullif::nullif(&values[0], &dropped)?])
    }

    fn size(&self) -> usize {
        self.chunk_bytes
            + self.by_key.capacity() * (16 + 8 + 8)
            + self.groups.capacity() * std::mem::size_of::<Option<Place>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::ListArray;
    use arrow_array::builder::{ListBuilder, StringBuilder, StructBuilder};
    use arrow_schema::{Field, Fields};

    fn stacks(rows: &[Option<&[&str]>]) -> ArrayRef {
        let fields = Fields::from(vec![Field::new("function", DataType::Utf8, true)]);
        let mut b = ListBuilder::new(StructBuilder::from_fields(fields, 0));
        for row in rows {
            match row {
                None => b.append(false),
                Some(frames) => {
                    for f in *frames {
                        let s = b.values();
                        s.field_builder::<StringBuilder>(0).unwrap().append_value(f);
                        s.append(true);
                    }
                    b.append(true);
                }
            }
        }
        Arc::new(b.finish())
    }

    fn names(a: &ArrayRef) -> Vec<Option<Vec<String>>> {
        let l: &ListArray = a.as_list::<i32>();
        (0..l.len())
            .map(|i| {
                l.is_valid(i).then(|| {
                    let v = l.value(i);
                    let f = v.as_struct().column(0).as_string::<i32>().clone();
                    f.iter().map(|s| s.unwrap().to_string()).collect()
                })
            })
            .collect()
    }

    fn own(v: &[&str]) -> Option<Vec<String>> {
        Some(v.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn groups_get_their_first_stack_stored_once() {
        let a: &[&str] = &["leaf", "main"];
        let b: &[&str] = &["other"];
        let input = stacks(&[None, Some(a), Some(b), Some(a), Some(a)]);
        let mut acc = GroupStacks::new(input.data_type().clone());
        // group 0: null then a; group 1: b; group 2: a (stored once for groups 0 and 2);
        // group 3: nothing.
        acc.update_batch(std::slice::from_ref(&input), &[0, 0, 1, 2, 2], None, 4)
            .unwrap();
        assert_eq!(acc.chunks.len(), 1);
        assert_eq!(acc.chunks[0].len(), 2, "two distinct stacks stored");
        // A later batch does not replace a group's stack, and the filter is honoured.
        let later = stacks(&[Some(b), Some(b)]);
        let filter = BooleanArray::from(vec![true, false]);
        acc.update_batch(&[later], &[0, 3], Some(&filter), 4)
            .unwrap();
        assert_eq!(acc.chunks.len(), 1, "b is known: no new chunk");
        let first = acc.evaluate(EmitTo::First(2)).unwrap();
        assert_eq!(names(&first), [own(a), own(b)]);
        let rest = acc.evaluate(EmitTo::All).unwrap();
        assert_eq!(names(&rest), [own(a), None]);
        assert!(acc.chunks.is_empty() && acc.by_key.is_empty());
    }

    #[test]
    fn state_merges_into_another_accumulator() {
        let a: &[&str] = &["x", "y"];
        let input = stacks(&[Some(a), None]);
        let mut partial = GroupStacks::new(input.data_type().clone());
        partial
            .update_batch(std::slice::from_ref(&input), &[0, 1], None, 2)
            .unwrap();
        let state = partial.state(EmitTo::All).unwrap();
        let mut fin = GroupStacks::new(input.data_type().clone());
        fin.merge_batch(&state, &[1, 0], 2).unwrap();
        assert_eq!(names(&fin.evaluate(EmitTo::All).unwrap()), [None, own(a)]);
    }

    #[test]
    fn row_accumulator_keeps_a_compact_copy() {
        let a: &[&str] = &["only"];
        let big: Vec<Option<&[&str]>> = (0..1000).map(|_| Some(a)).collect();
        let input = stacks(&big);
        let mut acc = OneStack {
            value: ScalarValue::try_from(input.data_type()).unwrap(),
        };
        acc.update_batch(std::slice::from_ref(&input)).unwrap();
        assert!(
            acc.size() < input.get_array_memory_size() / 4,
            "{}",
            acc.size()
        );
        let ScalarValue::List(l) = acc.evaluate().unwrap() else {
            panic!("a list")
        };
        assert_eq!(names(&(l as ArrayRef)), [own(a)]);
    }
}
