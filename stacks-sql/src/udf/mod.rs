//! SQL functions registered on every session: stack helpers (`stack_fold`, `stack_leaf`,
//! `stack_user_leaf`, `stack_kernel_leaf`,
//! `stack_root`, `stack_depth`, `stack_functions`, `stack_keep`, `stack_drop`, `stack_or`,
//! `stack_key`, `stack_chain`), the aggregates `stack_any`, `arg_min` and `approx_percentiles`, `as_stack`,
//! `time_bucket`, `epoch_ns` and `kind_unit`. docs/queries.md documents each.

mod any;
mod arg_min;
mod as_stack;
mod chain;
mod epoch;
mod kind;
mod percentiles;
mod stack;
mod time;

use std::sync::Arc;

use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::{AggregateUDF, ScalarUDF};

/// Register every function of this module in `registry` (a session's state: the client's, the
/// cluster scheduler's, an executor's).
pub fn register(registry: &mut dyn FunctionRegistry) -> datafusion::error::Result<()> {
    for f in stack::StackFn::all() {
        registry.register_udf(Arc::new(ScalarUDF::new_from_impl(f)))?;
    }
    registry.register_udaf(Arc::new(AggregateUDF::new_from_impl(any::StackAny::new())))?;
    registry.register_udaf(Arc::new(
        AggregateUDF::new_from_impl(arg_min::ArgMin::new()),
    ))?;
    registry.register_udaf(Arc::new(AggregateUDF::new_from_impl(
        percentiles::ApproxPercentiles::new(),
    )))?;
    registry.register_udf(Arc::new(ScalarUDF::new_from_impl(as_stack::AsStack::new())))?;
    registry.register_udf(Arc::new(ScalarUDF::new_from_impl(chain::StackChain::new())))?;
    registry.register_udf(Arc::new(ScalarUDF::new_from_impl(time::TimeBucket::new())))?;
    registry.register_udf(Arc::new(ScalarUDF::new_from_impl(epoch::EpochNs::new())))?;
    registry.register_udf(Arc::new(ScalarUDF::new_from_impl(kind::KindUnit::new())))?;
    Ok(())
}

/// Names of the registered functions, for `--list` and tests.
pub const NAMES: &[&str] = &[
    "stack_fold",
    "stack_leaf",
    "stack_user_leaf",
    "stack_kernel_leaf",
    "stack_root",
    "stack_depth",
    "stack_functions",
    "stack_keep",
    "stack_drop",
    "stack_or",
    "stack_key",
    "stack_chain",
    "stack_any",
    "arg_min",
    "approx_percentiles",
    "as_stack",
    "time_bucket",
    "epoch_ns",
    "kind_unit",
];
