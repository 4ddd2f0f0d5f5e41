//! `stacks-executor`: Ballista's executor with the stack functions and object stores from the
//! environment. Its options are Ballista's (`--scheduler-host`, `--bind-port`, `-c`, …).

use std::net::{TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    wait_for_scheduler(&config.scheduler_host, config.scheduler_port);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime
        .block_on(start_executor_process(Arc::new(config)))
        .map_err(anyhow::Error::msg)?;
    Ok(ExitCode::SUCCESS)
}

/// How long an executor started before its scheduler waits for it (started together, e.g. by
/// systemd or a test, the scheduler may listen a few seconds after the executor starts).
const SCHEDULER_WAIT: Duration = Duration::from_secs(60);

/// Wait until the scheduler at `host`:`port` accepts connections, up to [`SCHEDULER_WAIT`]
/// (saying so once on stderr); past that, Ballista's own connection fails with its error.
fn wait_for_scheduler(host: &str, port: u16) {
    let deadline = Instant::now() + SCHEDULER_WAIT;
    let mut said = false;
    loop {
        let up = (host, port).to_socket_addrs().is_ok_and(|mut addrs| {
            addrs.any(|a| TcpStream::connect_timeout(&a, Duration::from_secs(1)).is_ok())
        });
        if up || Instant::now() >= deadline {
            if !up {
                eprintln!(
                    "{TOOL}: error: no scheduler at {host}:{port} after {} s",
                    SCHEDULER_WAIT.as_secs()
                );
            }
            return;
        }
        if !said {
            eprintln!("{TOOL}: waiting for the scheduler at {host}:{port}");
            said = true;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}
