//! The `stack_id` column stacks-pack adds next to a symbolized `stack`: a 128-bit fingerprint
//! of the whole stack, so queries group and join by stack reading 16 bytes a row instead of
//! decoding every frame (the bundled queries decode stacks once, for the distinct ones).

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use stacks_stream::col;

/// Where the stack column is, when `schema` has a `stack` of List type and no `stack_id` yet.
pub fn stack_column(schema: &Schema) -> Option<usize> {
    let i = schema.index_of(col::STACK).ok()?;
    let list = matches!(schema.field(i).data_type(), DataType::List(_));
    (list
        && stacks_stream::is_stack_type(schema.field(i).data_type())
        && schema.index_of(col::STACK_ID).is_err())
    .then_some(i)
}

/// `schema` with `stack_id` appended (nullable: null where the stack is).
pub fn with_stack_id(schema: &Schema) -> SchemaRef {
    let mut fields: Vec<Arc<Field>> = schema.fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new(
        col::STACK_ID,
        stacks_stream::stack_id_type(),
        true,
    )));
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// `batch` with the `stack_id` of its stack column `stack` appended, as `schema` says.
pub fn add(
    schema: &SchemaRef,
    stack: usize,
    batch: &RecordBatch,
) -> Result<RecordBatch, ArrowError> {
    let list = batch.column(stack).as_list::<i32>();
    let ids = stacks_stream::stack_key::stack_keys(list, batch.num_rows())?;
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    columns.push(Arc::new(ids));
    RecordBatch::try_new(schema.clone(), columns)
}
