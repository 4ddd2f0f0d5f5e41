//! `stacks-workload`: programs with known behaviour, the ground truth for stacks' end-to-end
//! tests and demo. Each subcommand prints what it actually did, measured by its own clock, as
//! one JSON object on stdout.

mod anon_maps;
mod callers;
mod churn;
mod contention;
mod convoy;
mod cpu;
mod direct_read;
mod heap;
mod hostile;
mod kernel;
mod mixed;
mod phases;
mod probes;
mod sleep;
mod span_bench;
mod spans;
mod states;
mod sys;
mod tcp;
mod touch;
mod udp;
mod wakers;
mod write;

use std::process::ExitCode;

/// Allocations sampled by bytes for `stacks-record -e alloc` (`heap-sites`' ground truth);
/// with no recorder attached, a thread-local countdown per allocation.
#[global_allocator]
static ALLOC: tracing_stacks::SampledAlloc<std::alloc::System> =
    tracing_stacks::SampledAlloc::new(std::alloc::System);

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "stacks-workload", version)]
struct Args {
    /// Also write the JSON report to this file.
    #[arg(long, global = true, value_name = "FILE")]
    report: Option<std::path::PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Burn CPU in two distinct functions, `burn_heavy` and `burn_light`, in a fixed ratio of
    /// iterations (default 3:1), alternating in short slices.
    Cpu(cpu::CpuArgs),
    /// Burn CPU in one function, `burn_shared`, called from two callers, `caller_a` and
    /// `caller_b`, in a fixed ratio of units (default 3:1); the CPU time through each measured.
    Callers(callers::CallersArgs),
    /// Spend the time in the kernel: read /dev/zero in large chunks (function `read_zero`).
    Kernel(kernel::KernelArgs),
    /// Sleep COUNT intervals of MS ms in thread `sleeper`, one nanosleep each
    /// (function `sleep_interval`).
    Sleep(sleep::SleepArgs),
    /// Write exactly MIB MiB of non-zero data to a fresh FILE, then fsync (function `write_file`).
    Write(write::WriteArgs),
    /// Read exactly MIB MiB of FILE with O_DIRECT (function `read_direct`), creating it first
    /// when missing or of another size (function `prepare_file`).
    DirectRead(direct_read::DirectReadArgs),
    /// Map MIB MiB of fresh anonymous memory and write every page (function `touch_memory`).
    Touch(touch::TouchArgs),
    /// Carry MIB MiB each way over loopback TCP between the main thread and thread `tcp-server`
    /// (functions `tcp_send`, `tcp_recv`).
    Tcp(tcp::TcpArgs),
    /// Carry MIB MiB each way over connected loopback UDP sockets between the main thread and
    /// thread `udp-server`, without loss (functions `udp_send`, `udp_recv`).
    Udp(udp::UdpArgs),
    /// CPU burn, sleeper, file write, memory touch and a TCP exchange at once, in named threads.
    Mixed(mixed::MixedArgs),
    /// A busy host's turnover for SECONDS: SPAWNERS threads each starting one short-lived
    /// `/bin/sh` process after another (it loops, runs `/bin/true` and execs `cat`), short-lived
    /// threads (function `churn_thread_work`) and a CPU burner (`burn_heavy`).
    Churn(churn::ChurnArgs),
    /// More runnable threads than CPUs: two CPU hogs, a pipe ping-pong pair and a writer that
    /// fsyncs, each reporting its wall and CPU time (so its exact time off CPU) and its
    /// read/write calls and bytes (`pong` apart).
    Contention(contention::ContentionArgs),
    /// Threads in known states for SECONDS: `spinner` on CPU, `sleeper` in nanosleep, `reader`
    /// blocked in `read` on an empty pipe, `fsyncer` in write + fsync (uninterruptible IO),
    /// `receiver` blocked in `recvfrom` on an idle loopback TCP connection.
    States(states::StatesArgs),
    /// Two phases of SECONDS: `spinner` on CPU, `reader-a`/`reader-b` blocked in `read` on a
    /// pipe (function `block_in_read`) and `napper` in nanosleep; then the readers end and
    /// `spinner-b` spins too (`--mark FILE` is created as it starts).
    Phases(phases::PhasesArgs),
    /// Exactly CALLS calls of the C-ABI function `stacks_workload_probed` (returns 2i+1),
    /// USDT firings of `stacks_workload:fired` and of `stacks_workload:tick` (a semaphore: it
    /// fires only while a tracer has set it, `usdt_enabled` in the report), FORKS forks and
    /// SYSCALLS `getppid` calls, from the main thread (functions `call_probed`, `fire_usdt`,
    /// `fork_children`, `make_syscalls`).
    Probes(probes::ProbesArgs),
    /// A loop of `tracing` spans labelled by the tracing-stacks layer, in thread `spans` (or a
    /// tokio task with `--tokio`): `burn` spins 30 ms, `nap` sleeps 20 ms, 10 ms spin in no
    /// span, `outer { inner { 5 ms }; 5 ms }`, `io` writes IO_KIB KiB to FILE and fsyncs; CPU
    /// time per span name reported by the thread's CPU clock.
    Spans(spans::SpansArgs),
    /// Three threads in a chain, ROUNDS times: `chain-a` starts a round (`chain_pass` to
    /// `chain-c`) and waits in `read` for `chain-b` (function `chain_wait`), which waits the
    /// same way for `chain-c`, which burns BURN_MS of CPU (`chain_burn`, in NAPS + 1 slices
    /// with a 100 µs sleep between them, `chain_nap`), writes and fsyncs a file
    /// (`chain_fsync`) and passes (`chain_pass`);
    /// each thread reports its wall and CPU time, chain-c its burn CPU and fsync time.
    Chain(wakers::ChainArgs),
    /// PRODUCERS threads taking turns to hand ITEMS items, one at a time, to thread `consumer`
    /// through a condition variable (function `pool_signal`), each after sleeping PAUSE_MS;
    /// the consumer (`pool_wait`) reports when it received each item, from which producer, and
    /// whether it blocked for it.
    Pool(wakers::PoolArgs),
    /// A lock convoy: THREADS threads (`convoy-N`) each take one mutex ROUNDS times
    /// (`convoy_lock`), hold it while burning HOLD_MS of CPU (`convoy_hold`) and release it
    /// (`convoy_release`, which wakes a waiter); each reports its time waiting for the lock by
    /// its own clocks (`lock_wait_ns`, of it on CPU `lock_wait_cpu_ns`) and its CPU holding it.
    Convoy(convoy::ConvoyArgs),
    /// Three allocation sites through the global allocator (tracing-stacks' SampledAlloc):
    /// `site_small` (SMALL 48-byte blocks freed at once), `site_leak` (LEAK 4 KiB blocks
    /// kept), `site_big` (BIG 1 MiB blocks freed at once); reports each site's bytes
    /// allocated and kept.
    HeapSites(heap::HeapSitesArgs),
    /// PAIRS enters and exits of one `tracing` span under LAYER (none, a plain registry, or
    /// the registry with tracing-stacks), timed; then WRITES one-byte writes to /dev/null
    /// inside a span (function `write_devnull`).
    SpanBench(span_bench::SpanBenchArgs),
    /// A process hostile to its recorder: spins in code run from anonymous memory (named
    /// `hostile_spin` by a good perf-map line) while what the recorder reads of it is made
    /// hostile (CASE: a 1 GiB perf map, 10 million lines, binary junk, 64 KiB names, a
    /// symbolic link out of its view, a FIFO).
    Hostile(hostile::HostileArgs),
    /// An allocator's traffic for SECONDS: `map_anon_chunk` maps KIB KiB of anonymous
    /// read-write memory, writes each page and unmaps it, BATCH times between a ~0.5 ms spin
    /// (`burn_between_maps`) and a 1 ms nap; reports the mappings made.
    AnonMaps(anon_maps::AnonMapsArgs),
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match args.cmd {
        Cmd::Cpu(a) => cpu::run(&a),
        Cmd::Callers(a) => callers::run(&a),
        Cmd::Kernel(a) => kernel::run(&a),
        Cmd::Sleep(a) => sleep::run(&a),
        Cmd::Write(a) => write::run(&a),
        Cmd::DirectRead(a) => direct_read::run(&a),
        Cmd::Touch(a) => touch::run(&a),
        Cmd::Tcp(a) => tcp::run(&a),
        Cmd::Udp(a) => udp::run(&a),
        Cmd::Mixed(a) => mixed::run(&a),
        Cmd::Churn(a) => churn::run(&a),
        Cmd::Contention(a) => contention::run(&a),
        Cmd::States(a) => states::run(&a),
        Cmd::Phases(a) => phases::run(&a),
        Cmd::Probes(a) => probes::run(&a),
        Cmd::Spans(a) => spans::run(a),
        Cmd::SpanBench(a) => span_bench::run(&a),
        Cmd::Chain(a) => wakers::chain(&a),
        Cmd::Pool(a) => wakers::pool(&a),
        Cmd::Convoy(a) => convoy::convoy(&a),
        Cmd::HeapSites(a) => heap::run(&a),
        Cmd::Hostile(a) => hostile::run(&a),
        Cmd::AnonMaps(a) => anon_maps::run(&a),
    };
    match result {
        Ok(report) => {
            println!("{report}");
            if let Some(path) = &args.report
                && let Err(e) = std::fs::write(path, format!("{report}\n"))
            {
                eprintln!("stacks-workload: error: {}: {e}", path.display());
                return ExitCode::from(1);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("stacks-workload: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
