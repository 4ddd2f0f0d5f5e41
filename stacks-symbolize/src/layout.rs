//! Where the columns a symbolizer reads are in the input, checked once per stream, and the
//! output schema: the input columns plus `stack`.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef};
use stacks_stream::{ContractError, col};

/// Column positions validated once per stream.
pub struct Layout {
    pub(crate) kstack: usize,
    pub(crate) kstack_error: usize,
    pub(crate) ustack: usize,
    pub(crate) ustack_error: usize,
    pub(crate) kstack_symbols: Option<usize>,
    /// Input columns kept in the output (all but an existing `stack`).
    pub(crate) keep: Vec<usize>,
    pub output: SchemaRef,
}

impl Layout {
    pub fn new(
        input: &Schema,
        name: &str,
        metadata: HashMap<String, String>,
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
        let keep: Vec<usize> = (0..input.fields().len())
            .filter(|&i| input.field(i).name() != col::STACK)
            .collect();
        let mut fields: Vec<Field> = keep
            .iter()
            .map(|&i| input.field(i).as_ref().clone())
            .collect();
        fields.push(Field::new(col::STACK, stacks_stream::stack_type(), true));
        Ok(Layout {
            kstack,
            kstack_error,
            ustack,
            ustack_error,
            kstack_symbols,
            keep,
            output: Arc::new(Schema::new_with_metadata(fields, metadata)),
        })
    }
}
