//! SQL functions registered on every session: stack helpers (`stack_fold`, `stack_leaf`,
//! `stack_root`, `stack_depth`, `stack_functions`, `stack_keep`, `stack_drop`, `stack_or`,
//! `stack_key`), the aggregate `stack_any`, `time_bucket` and `kind_unit`. docs/queries.md
//! documents each.

mod any;
mod kind;
mod stack;
mod time;

use datafusion::logical_expr::{AggregateUDF, ScalarUDF};
use datafusion::prelude::SessionContext;

/// Register every function of this module on `ctx`.
pub fn register(ctx: &SessionContext) {
    for f in stack::StackFn::all() {
        ctx.register_udf(ScalarUDF::new_from_impl(f));
    }
    ctx.register_udaf(AggregateUDF::new_from_impl(any::StackAny::new()));
    ctx.register_udf(ScalarUDF::new_from_impl(time::TimeBucket::new()));
    ctx.register_udf(ScalarUDF::new_from_impl(kind::KindUnit::new()));
}

/// Names of the registered functions, for `--list` and tests.
pub const NAMES: &[&str] = &[
    "stack_fold",
    "stack_leaf",
    "stack_root",
    "stack_depth",
    "stack_functions",
    "stack_keep",
    "stack_drop",
    "stack_or",
    "stack_key",
    "stack_any",
    "time_bucket",
    "kind_unit",
];
