//! Where the columns a symbolizer reads are in the input, checked once per stream, and the
//! output schema: the input columns plus `stack`, every stack column dictionary-encoded
//! (schema version 2).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef};
use stacks_stream::{ContractError, col, dict, meta};

/// Column positions validated once per stream.
pub struct Layout {
    pub(crate) kstack: usize,
    pub(crate) kstack_error: usize,
    pub(crate) ustack: usize,
    pub(crate) ustack_error: usize,
    pub(crate) kstack_symbols: Option<usize>,
    /// Whether every raw stack column is dictionary-encoded: rows are told apart by their
    /// entries (keys hold for the whole stream) and the raw columns pass through as they are.
    /// Otherwise rows are told apart by a hash of their raw stacks and the raw stack columns
    /// are encoded anew, sharing the `stack` column's keys.
    pub(crate) by_entry: bool,
    /// Input columns kept in the output (all but an existing `stack`).
    pub(crate) keep: Vec<usize>,
    pub output: SchemaRef,
}

impl Layout {
    pub fn new(
        input: &Schema,
        name: &str,
        mut metadata: HashMap<String, String>,
    ) -> Result<Self, ContractError> {
        let why = "raw stacks stream from stacks-record";
        let req =
            |column: &str, t: &DataType| stacks_stream::require_column(input, name, column, t, why);
        let kstack = req(col::KSTACK, &stacks_stream::kstack_type())?;
        let ustack = req(col::USTACK, &stacks_stream::ustack_type())?;
        let kstack_error = req(col::KSTACK_ERROR, &DataType::Int32)?;
        let ustack_error = req(col::USTACK_ERROR, &DataType::Int32)?;
        // Optional: streams of older recorders have no record-time kernel symbols.
        let kstack_symbols = match input.index_of(col::KSTACK_SYMBOLS) {
            Ok(_) => Some(req(
                col::KSTACK_SYMBOLS,
                &stacks_stream::kstack_symbols_type(),
            )?),
            Err(_) => None,
        };
        let is_dict = |i: usize| matches!(input.field(i).data_type(), DataType::Dictionary(..));
        let by_entry = [Some(kstack), Some(ustack), kstack_symbols]
            .into_iter()
            .flatten()
            .all(is_dict);
        let keep: Vec<usize> = (0..input.fields().len())
            .filter(|&i| input.field(i).name() != col::STACK)
            .collect();
        let mut fields: Vec<Field> = keep
            .iter()
            .map(|&i| {
                let f = input.field(i);
                if dict::is_stack_column(f.name()) && !by_entry {
                    // Encoded anew with Int32 keys (see `by_entry`).
                    Field::new(f.name(), dict::value_type(f.data_type()).clone(), true)
                        .with_metadata(f.metadata().clone())
                } else {
                    f.as_ref().clone()
                }
            })
            .collect();
        fields.push(Field::new(col::STACK, stacks_stream::stack_type(), true));
        // Dictionary-encoded stack columns: schema version 2 whatever the input's.
        metadata.insert(
            meta::SCHEMA_VERSION.into(),
            stacks_stream::SCHEMA_VERSION.into(),
        );
        let output = dict::encoded_schema(&Schema::new_with_metadata(fields, metadata));
        Ok(Layout {
            kstack,
            kstack_error,
            ustack,
            ustack_error,
            kstack_symbols,
            by_entry,
            keep,
            output: Arc::new(output),
        })
    }
}
