//! `stacks-executor`: Ballista's executor with the stack functions and object stores from the
//! environment. Its options are Ballista's (`--scheduler-host`, `--bind-port`, `-c`, …).

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use ballista_executor::config::Config;
use ballista_executor::executor_process::{ExecutorProcessConfig, start_executor_process};

const TOOL: &str = "stacks-executor";

fn main() -> ExitCode {
    stacks_stream::cli::main_with(TOOL, run)
}

fn run() -> anyhow::Result<ExitCode> {
    let opt: Config = stacks_cluster::parse_args(
        TOOL,
        "Apache DataFusion Ballista executor for stacks-query --cluster",
        stacks_cluster::EXECUTOR_DEFAULTS,
    );
    let mut config: ExecutorProcessConfig = opt.try_into().map_err(anyhow::Error::msg)?;
    stacks_cluster::init_logs(&config.special_mod_log_level, config.print_thread_info);
    config.override_config_producer = Some(stacks_cluster::config_producer());
    config.override_runtime_producer = Some(stacks_cluster::runtime_producer());
    config.override_function_registry = Some(Arc::new(stacks_cluster::function_registry()?));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime
        .block_on(start_executor_process(Arc::new(config)))
        .map_err(anyhow::Error::msg)?;
    Ok(ExitCode::SUCCESS)
}
