//! `stacks-scheduler`: Ballista's scheduler with the stack functions and object stores from
//! the environment. Its options are Ballista's (`--bind-host`, `--bind-port`, …).

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::{Config, SchedulerConfig};
use ballista_scheduler::scheduler_process::start_server;

const TOOL: &str = "stacks-scheduler";

fn main() -> ExitCode {
    stacks_stream::cli::main_with(TOOL, run)
}

fn run() -> anyhow::Result<ExitCode> {
    let opt: Config = stacks_cluster::parse_args(
        TOOL,
        "Apache DataFusion Ballista scheduler for stacks-query --cluster",
        stacks_cluster::SCHEDULER_DEFAULTS,
    );
    stacks_cluster::init_logs(&opt.log_level_setting, opt.print_thread_info);
    let addr = format!("{}:{}", opt.bind_host, opt.bind_port);
    let addr: std::net::SocketAddr = addr
        .parse()
        .with_context(|| format!("--bind-host/--bind-port: `{addr}`"))?;
    // Planning lists the store and resolves functions by name: both need our session.
    let config: SchedulerConfig = opt.try_into().map_err(anyhow::Error::msg)?;
    let config = config
        .with_override_config_producer(stacks_cluster::config_producer())
        .with_override_session_builder(Arc::new(stacks_cluster::session_state));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // Planning recurses over deep plans (Ballista's own binary does the same).
        .thread_stack_size(32 << 20)
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async {
        let cluster = BallistaCluster::new_from_config(&config)
            .await
            .map_err(anyhow::Error::msg)?;
        start_server(cluster, addr, Arc::new(config))
            .await
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("serving on {addr}"))
    })?;
    Ok(ExitCode::SUCCESS)
}
