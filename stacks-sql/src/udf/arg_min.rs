//! `arg_min(value, key)`: an aggregate giving the value of its group's row with the least
//! (non-null) key, of any value type; keys are integers. `-d URL` uses it to take each
//! stack's `frame_ids` from one file set (the least `set_id`) in the same pass over the
//! stacks files that gathers the rest of `stack_table`. Like `stack_any`, it keeps a compact
//! copy of the values it holds, where `first_value(value ORDER BY key)` keeps a slice of each
//! group's input batch (and the memory pool counts every such slice as its whole batch).

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt64Type};
use arrow_array::{Array, ArrayRef, BooleanArray, UInt32Array, new_null_array};
use arrow_schema::{DataType, Field, FieldRef};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, EmitTo, GroupsAccumulator, Signature, Volatility,
};

const NAME: &str = "arg_min";

/// The `arg_min` aggregate.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct ArgMin {
    signature: Signature,
}

impl ArgMin {
    pub(super) fn new() -> Self {
        Self {
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for ArgMin {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        if !arg_types[1].is_integer() {
            return plan_err!("{NAME}: the key must be an integer, not {}", arg_types[1]);
        }
        Ok(arg_types[0].clone())
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![
            Arc::new(Field::new("value", args.return_type().clone(), true)),
            Arc::new(Field::new(
                "key",
                args.input_fields[1].data_type().clone(),
                true,
            )),
        ])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(OneArgMin {
            least: Least::new(args.return_type().clone()),
        }))
    }

    fn groups_accumulator_supported(&self, _args: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(Least::new(args.return_type().clone())))
    }
}

/// A key as compared: every integer type fits.
fn keys(key: &ArrayRef) -> Result<Vec<Option<i128>>> {
    Ok(if key.data_type().is_signed_integer() {
        let k = arrow_cast::cast(key, &DataType::Int64)?;
        k.as_primitive::<Int64Type>()
            .iter()
            .map(|v| v.map(i128::from))
            .collect()
    } else if key.data_type().is_unsigned_integer() {
        let k = arrow_cast::cast(key, &DataType::UInt64)?;
        k.as_primitive::<UInt64Type>()
            .iter()
            .map(|v| v.map(i128::from))
            .collect()
    } else {
        return exec_err!(
            "{NAME}: the key must be an integer, not {}",
            key.data_type()
        );
    })
}

/// A group's least key so far and where its value is kept (chunk, row).
#[derive(Clone, Copy)]
struct Held {
    key: i128,
    chunk: u32,
    row: u32,
}

/// The grouped form: each group's value in compact chunks (a chunk per batch that lowered
/// some group's key; values no group holds any more are dropped at the next full emit).
struct Least {
    data_type: DataType,
    chunks: Vec<ArrayRef>,
    chunk_bytes: usize,
    /// Each chunk's key type, for `state` (the key column as it came in).
    key_type: Option<DataType>,
    groups: Vec<Option<Held>>,
}

impl Least {
    fn new(data_type: DataType) -> Self {
        Self {
            data_type,
            chunks: Vec::new(),
            chunk_bytes: 0,
            key_type: None,
            groups: Vec::new(),
        }
    }

    /// Lower the key of each group of `group_indices` to its rows' least, keeping that row's
    /// value.
    fn add(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.groups.resize(total_num_groups, None);
        let (value, key) = (&values[0], &values[1]);
        self.key_type.get_or_insert_with(|| key.data_type().clone());
        let keys = keys(key)?;
        // The best row of this batch for each group it lowers, by group.
        let mut best: std::collections::HashMap<usize, (i128, u32)> =
            std::collections::HashMap::new();
        for (row, &g) in group_indices.iter().enumerate() {
            let Some(k) = keys[row] else { continue };
            if filter.is_some_and(|f| !f.is_valid(row) || !f.value(row)) {
                continue;
            }
            if self.groups[g].is_some_and(|h| h.key <= k) {
                continue;
            }
            let e = best.entry(g).or_insert((k, row as u32));
            if k < e.0 {
                *e = (k, row as u32);
            }
        }
        if best.is_empty() {
            return Ok(());
        }
        let chunk = self.chunks.len() as u32;
        let mut rows = Vec::with_capacity(best.len());
        for (g, (k, row)) in best {
            self.groups[g] = Some(Held {
                key: k,
                chunk,
                row: rows.len() as u32,
            });
            rows.push(row);
        }
        let kept = arrow_select::take::take(value.as_ref(), &UInt32Array::from(rows), None)?;
        self.chunk_bytes += kept.get_array_memory_size();
        self.chunks.push(kept);
        Ok(())
    }

    /// The values and keys of the groups `emit_to` takes.
    fn emit(&mut self, emit_to: EmitTo) -> Result<(ArrayRef, Vec<Option<i128>>)> {
        let held = emit_to.take_needed(&mut self.groups);
        let null = new_null_array(&self.data_type, 1);
        let null_at = self.chunks.len();
        let indices: Vec<(usize, usize)> = held
            .iter()
            .map(|h| match h {
                Some(h) => (h.chunk as usize, h.row as usize),
                None => (null_at, 0),
            })
            .collect();
        let mut sources: Vec<&dyn Array> = self.chunks.iter().map(|c| c.as_ref()).collect();
        sources.push(null.as_ref());
        let out = arrow_select::interleave::interleave(&sources, &indices)?;
        if self.groups.is_empty() {
            self.chunks.clear();
            self.chunk_bytes = 0;
        }
        Ok((out, held.iter().map(|h| h.map(|h| h.key)).collect()))
    }

    /// `keys` as an array of the key type that came in.
    fn key_array(&self, keys: Vec<Option<i128>>) -> Result<ArrayRef> {
        let key_type = self.key_type.clone().unwrap_or(DataType::Int64);
        let wide: ArrayRef = if key_type.is_unsigned_integer() {
            Arc::new(arrow_array::UInt64Array::from_iter(
                keys.into_iter().map(|k| k.map(|k| k as u64)),
            ))
        } else {
            Arc::new(arrow_array::Int64Array::from_iter(
                keys.into_iter().map(|k| k.map(|k| k as i64)),
            ))
        };
        Ok(arrow_cast::cast(&wide, &key_type)?)
    }
}

impl GroupsAccumulator for Least {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.add(values, group_indices, opt_filter, total_num_groups)
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        Ok(self.emit(emit_to)?.0)
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let (values, keys) = self.emit(emit_to)?;
        Ok(vec![values, self.key_array(keys)?])
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.add(values, group_indices, None, total_num_groups)
    }

    /// Skipping partial aggregation (many groups): each row is its own state, filtered rows
    /// keyless.
    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let Some(filter) = opt_filter else {
            return Ok(values.to_vec());
        };
        let dropped: BooleanArray = (0..filter.len())
            .map(|i| Some(!(filter.is_valid(i) && filter.value(i))))
            .collect();
        Ok(vec![
            Arc::clone(&values[0]),
            arrow_select::nullif::nullif(&values[1], &dropped)?,
        ])
    }

    fn size(&self) -> usize {
        self.chunk_bytes + self.groups.capacity() * std::mem::size_of::<Option<Held>>()
    }
}

/// The row-by-row form (used where DataFusion cannot use the grouped one): one group.
struct OneArgMin {
    least: Least,
}

impl std::fmt::Debug for OneArgMin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OneArgMin").finish_non_exhaustive()
    }
}

impl Accumulator for OneArgMin {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let groups = vec![0; values[0].len()];
        self.least.add(values, &groups, None, 1)?;
        // Keep only the value held: earlier chunks are garbage.
        if self.least.chunks.len() > 1 {
            let (value, keys) = self.least.emit(EmitTo::All)?;
            self.least.groups = vec![None];
            let key = self.least.key_array(keys)?;
            self.least.add(&[value, key], &[0], None, 1)?;
        }
        Ok(())
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let held = self.least.groups.first().copied().flatten();
        match held {
            Some(h) => ScalarValue::try_from_array(
                self.least.chunks[h.chunk as usize].as_ref(),
                h.row as usize,
            ),
            None => ScalarValue::try_from(&self.least.data_type),
        }
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.least.size()
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let held = self.least.groups.first().copied().flatten();
        let key_type = self.least.key_type.clone().unwrap_or(DataType::Int64);
        let key = match held {
            Some(h) => {
                let k = self.least.key_array(vec![Some(h.key)])?;
                ScalarValue::try_from_array(k.as_ref(), 0)?
            }
            None => ScalarValue::try_from(&key_type)?,
        };
        Ok(vec![self.evaluate()?, key])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.update_batch(states)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::builder::{ListBuilder, UInt32Builder};
    use arrow_array::{ListArray, UInt64Array};

    fn lists(rows: &[&[u32]]) -> ArrayRef {
        let mut b = ListBuilder::new(UInt32Builder::new());
        for row in rows {
            b.values().append_slice(row);
            b.append(true);
        }
        Arc::new(b.finish())
    }

    fn rows(a: &ArrayRef) -> Vec<Option<Vec<u32>>> {
        let l: &ListArray = a.as_list::<i32>();
        (0..l.len())
            .map(|i| {
                l.is_valid(i).then(|| {
                    let v = l.value(i);
                    v.as_primitive::<arrow_array::types::UInt32Type>()
                        .values()
                        .to_vec()
                })
            })
            .collect()
    }

    fn keys(k: &[Option<u64>]) -> ArrayRef {
        Arc::new(UInt64Array::from(k.to_vec()))
    }

    #[test]
    fn each_group_keeps_the_value_of_its_least_key() {
        let mut acc = Least::new(lists(&[]).data_type().clone());
        // group 0: keys 9, 3 (-> [3]); group 1: key 7; group 2: a null key only.
        let v = lists(&[&[9], &[3], &[7, 7], &[1]]);
        let k = keys(&[Some(9), Some(3), Some(7), None]);
        acc.update_batch(&[v, k], &[0, 0, 1, 2], None, 3).unwrap();
        // A later batch lowers group 1 (a filtered row with a lower key is ignored) and
        // leaves group 0 (an equal key does not replace).
        let v = lists(&[&[5], &[0], &[33]]);
        let k = keys(&[Some(5), Some(1), Some(3)]);
        let filter = BooleanArray::from(vec![true, false, true]);
        acc.update_batch(&[v, k], &[1, 1, 0], Some(&filter), 3)
            .unwrap();
        let state = acc.state(EmitTo::All).unwrap();
        assert_eq!(
            rows(&state[0]),
            [Some(vec![3]), Some(vec![5]), None],
            "values"
        );
        assert_eq!(state[1].as_primitive::<UInt64Type>().value(1), 5);
        assert!(acc.chunks.is_empty());
        // The state merges into another accumulator, against its own values: its group 0
        // (key 2) keeps its value, its group 1 (key 4) takes the state's [3] (key 3).
        let mut fin = Least::new(lists(&[]).data_type().clone());
        let v = lists(&[&[2], &[4]]);
        fin.update_batch(&[v, keys(&[Some(2), Some(4)])], &[0, 1], None, 2)
            .unwrap();
        fin.merge_batch(&state, &[1, 0, 1], 2).unwrap();
        assert_eq!(
            rows(&fin.evaluate(EmitTo::All).unwrap()),
            [Some(vec![2]), Some(vec![3])]
        );
    }

    #[test]
    fn kept_values_are_compact_copies() {
        let big: Vec<&[u32]> = (0..1000).map(|_| &[1u32, 2, 3][..]).collect();
        let v = lists(&big);
        let k: ArrayRef = Arc::new(UInt64Array::from_iter_values(0..1000));
        let mut acc = Least::new(v.data_type().clone());
        acc.update_batch(&[Arc::clone(&v), k.clone()], &[0; 1000], None, 1)
            .unwrap();
        assert!(acc.size() < v.get_array_memory_size() / 4, "{}", acc.size());
        let mut one = OneArgMin {
            least: Least::new(v.data_type().clone()),
        };
        one.update_batch(&[v, k]).unwrap();
        let ScalarValue::List(l) = one.evaluate().unwrap() else {
            panic!("a list")
        };
        assert_eq!(rows(&(l as ArrayRef)), [Some(vec![1, 2, 3])]);
        let signed: ArrayRef = Arc::new(arrow_array::Int8Array::from(vec![-1, -5]));
        let mut acc = Least::new(DataType::Utf8);
        let names: ArrayRef = Arc::new(arrow_array::StringArray::from(vec!["a", "b"]));
        acc.update_batch(&[names, signed], &[0, 0], None, 1)
            .unwrap();
        let state = acc.state(EmitTo::All).unwrap();
        assert_eq!(state[0].as_string::<i32>().value(0), "b");
        assert_eq!(state[1].data_type(), &DataType::Int8);
    }

    /// `arg_min` in SQL, grouped and over the whole input, over several partitions (so the
    /// states merge).
    #[tokio::test]
    async fn sql_gives_the_value_of_the_least_key() {
        use datafusion::prelude::{SessionConfig, SessionContext};
        let mut ctx =
            SessionContext::new_with_config(SessionConfig::new().with_target_partitions(4));
        crate::udf::register(&mut ctx).unwrap();
        let rows = "(VALUES (1, 30, 'c'), (1, 10, 'a'), (2, 5, 'x'), (1, 20, 'b'), (2, NULL, 'n'), \
                    (3, NULL, 'z')) AS t(g, k, v)";
        let sql = format!(
            "SELECT g, arg_min(make_array(v, v), CAST(k AS BIGINT UNSIGNED)) FROM \
             (SELECT * FROM {rows} UNION ALL SELECT * FROM {rows}) GROUP BY g ORDER BY g"
        );
        let batches = ctx.sql(&sql).await.unwrap().collect().await.unwrap();
        let got: Vec<Option<String>> = batches
            .iter()
            .flat_map(|b| {
                let l = b.column(1).as_list::<i32>().clone();
                (0..l.len())
                    .map(move |i| {
                        l.is_valid(i)
                            .then(|| l.value(i).as_string::<i32>().value(0).to_string())
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(got, [Some("a".into()), Some("x".into()), None]);
        let batches = ctx
            .sql(&format!("SELECT arg_min(v, k - 100) FROM {rows}"))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        assert_eq!(batches[0].column(0).as_string::<i32>().value(0), "x");
        let err = ctx
            .sql(&format!("SELECT arg_min(v, v) FROM {rows}"))
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("arg_min: the key must be an integer"),
            "{err}"
        );
    }
}
