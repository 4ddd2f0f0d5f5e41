//! stacks-cluster: Apache DataFusion Ballista's scheduler and executor (`stacks-scheduler`,
//! `stacks-executor`) with what stacks queries need: the stack functions (`stack_fold`,
//! `stack_any`, …) and object stores opened from the environment on first use. Their command
//! lines are Ballista's own; `stacks-query --cluster df://HOST:PORT -d s3://…` sends queries.

#![warn(unreachable_pub)]

use std::sync::Arc;

use ballista_core::registry::BallistaFunctionRegistry;
use ballista_core::{ConfigProducer, RuntimeProducer};
use datafusion::error::DataFusionError;
use datafusion::execution::session_state::SessionState;
use datafusion::prelude::SessionConfig;
use tracing_subscriber::EnvFilter;

/// An error of the stacks-sql library as DataFusion's.
fn df_error(e: anyhow::Error) -> DataFusionError {
    DataFusionError::External(format!("{e:#}").into())
}

/// The session options a scheduler or executor starts from (each query brings its own).
pub fn config_producer() -> ConfigProducer {
    use ballista_core::extension::SessionConfigExt;
    Arc::new(|| stacks_sql::config().upgrade_for_ballista())
}

/// The scheduler's session for a query: DataFusion's and the stack functions, and a runtime of
/// its own, so each query lists the store afresh.
pub fn session_state(config: SessionConfig) -> datafusion::error::Result<SessionState> {
    let mut config = config;
    let runtime = stacks_sql::runtime(&mut config, None).map_err(df_error)?;
    stacks_sql::state(config, runtime).map_err(df_error)
}

/// The executor's runtime for a task's session: object stores from the environment.
pub fn runtime_producer() -> RuntimeProducer {
    Arc::new(|config: &SessionConfig| {
        stacks_sql::runtime(&mut config.clone(), None).map_err(df_error)
    })
}

/// The functions an executor resolves plans' functions by name in: DataFusion's and the
/// stack functions.
pub fn function_registry() -> anyhow::Result<BallistaFunctionRegistry> {
    let state = session_state(config_producer()())?;
    Ok(BallistaFunctionRegistry::from(&state))
}

/// Logs to stderr (stdout carries only data), at `RUST_LOG` if set, else `level`.
pub fn init_logs(level: &str, thread_info: bool) {
    let filter = EnvFilter::new(std::env::var(EnvFilter::DEFAULT_ENV).unwrap_or(level.into()));
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_thread_names(thread_info)
        .with_thread_ids(thread_info)
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .init();
}

/// How often an executor tells the scheduler it is alive (Ballista's default: 60 s).
pub const HEARTBEAT_SECONDS: &str = "1";
/// How long the scheduler waits for an executor's heartbeat before it takes the executor for
/// dead and runs its tasks elsewhere (Ballista's default: 180 s): five missed heartbeats.
pub const EXECUTOR_TIMEOUT_SECONDS: &str = "5";
/// How often the scheduler looks for executors past that timeout (Ballista's default: 15 s).
pub const EXPIRE_CHECK_SECONDS: &str = "1";

/// The defaults stacks-scheduler gives Ballista's options: a lost executor costs seconds.
pub const SCHEDULER_DEFAULTS: &[(&str, &str)] = &[
    ("executor_timeout_seconds", EXECUTOR_TIMEOUT_SECONDS),
    (
        "expire_dead_executor_interval_seconds",
        EXPIRE_CHECK_SECONDS,
    ),
];
/// The defaults stacks-executor gives Ballista's options.
pub const EXECUTOR_DEFAULTS: &[(&str, &str)] =
    &[("executor_heartbeat_interval_seconds", HEARTBEAT_SECONDS)];

/// Ballista's `Config` as the command line of `tool`, with `defaults` (option id, value) in
/// place of Ballista's (an id Ballista does not have is a panic: the tests parse both).
fn command<T: clap::Parser>(
    tool: &'static str,
    about: &'static str,
    defaults: &[(&'static str, &'static str)],
) -> clap::Command {
    let mut command = T::command().name(tool).bin_name(tool).about(about);
    for (id, value) in defaults {
        command = command.mut_arg(*id, |a| a.default_value(*value));
    }
    command
}

/// Parse the command line of Ballista's `Config` under the name `tool`, with `defaults` (option
/// id, value) in place of Ballista's: a usage error is the one line of every stacks tool,
/// `--help` and `--version` print as clap does.
pub fn parse_args<T: clap::Parser>(
    tool: &'static str,
    about: &'static str,
    defaults: &[(&'static str, &'static str)],
) -> T {
    let fail = |e: clap::Error| -> ! {
        if e.use_stderr() {
            stacks_stream::cli::usage_error(tool, &e.to_string())
        }
        e.exit()
    };
    let matches = command::<T>(tool, about, defaults)
        .try_get_matches()
        .unwrap_or_else(|e| fail(e));
    T::from_arg_matches(&matches).unwrap_or_else(|e| fail(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executors_know_the_stack_functions() {
        let registry = function_registry().unwrap();
        for name in stacks_sql::udf::NAMES {
            let known = registry.scalar_functions.contains_key(*name)
                || registry.aggregate_functions.contains_key(*name);
            assert!(known, "{name} missing");
        }
        assert!(registry.aggregate_functions.contains_key("first_value"));
    }

    #[test]
    fn the_short_timeouts_are_ballistas_options_and_taken() {
        use ballista_executor::config::Config as Executor;
        use ballista_scheduler::config::Config as Scheduler;
        let m = command::<Scheduler>("s", "", SCHEDULER_DEFAULTS)
            .try_get_matches_from(["s"])
            .unwrap();
        let s = <Scheduler as clap::FromArgMatches>::from_arg_matches(&m).unwrap();
        assert_eq!(s.executor_timeout_seconds, 5);
        assert_eq!(s.expire_dead_executor_interval_seconds, 1);
        let m = command::<Executor>("e", "", EXECUTOR_DEFAULTS)
            .try_get_matches_from(["e"])
            .unwrap();
        let e = <Executor as clap::FromArgMatches>::from_arg_matches(&m).unwrap();
        assert_eq!(e.executor_heartbeat_interval_seconds, 1);
        // Given on the command line, Ballista's options win.
        let m = command::<Scheduler>("s", "", SCHEDULER_DEFAULTS)
            .try_get_matches_from(["s", "--executor-timeout-seconds", "60"])
            .unwrap();
        let s = <Scheduler as clap::FromArgMatches>::from_arg_matches(&m).unwrap();
        assert_eq!(s.executor_timeout_seconds, 60);
        // The timeout outlasts several heartbeats and the scheduler's check.
        let (timeout, beat): (u64, u64) = (
            EXECUTOR_TIMEOUT_SECONDS.parse().unwrap(),
            HEARTBEAT_SECONDS.parse().unwrap(),
        );
        assert!(timeout >= 3 * beat && timeout > EXPIRE_CHECK_SECONDS.parse().unwrap());
    }
}
