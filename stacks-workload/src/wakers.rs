//! Workloads whose wakers are known: `chain` (thread `chain-a` starts a round and waits on
//! `chain-b`, which waits on `chain-c`, which burns CPU and fsyncs before passing: the ground
//! truth of who woke whom and why) and `pool` (producers signalling one consumer through a condition variable, each
//! receipt naming the producer that signalled).

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::{Value, json};

use crate::contention::pipe;
use crate::sys;

#[derive(clap::Args)]
pub(crate) struct ChainArgs {
    /// Rounds of the chain.
    #[arg(long, default_value_t = 100)]
    rounds: u32,
    /// CPU time chain-c burns each round, ms (its own CPU clock).
    #[arg(long, default_value_t = 5)]
    burn_ms: u64,
    /// Short sleeps (100 µs each) chain-c takes between equal slices of its burn each round
    /// (`chain_nap`): off-CPU intervals shorter than the default `switch` MIN, so folded.
    #[arg(long, default_value_t = 0)]
    naps: u32,
    /// Bytes chain-c writes to its file before each fsync.
    #[arg(long, default_value_t = 4096)]
    write_bytes: usize,
    /// Directory for chain-c's file.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// How long chain-c's naps are: well under the default `switch` MIN (1 ms).
const NAP_NS: u64 = 100_000;

/// chain-c's CPU work of a round.
#[inline(never)]
fn chain_burn(ns: u64) -> u64 {
    sys::spin_cpu_ns(ns)
}

/// chain-c sleeps for `ns` (a short off-CPU interval in its work).
#[inline(never)]
fn chain_nap(ns: u64) -> Result<()> {
    let req = libc::timespec {
        tv_sec: 0,
        tv_nsec: ns as libc::c_long,
    };
    let mut rem = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    Ok(sys::nanosleep(&req, &mut rem)?)
}

/// chain-c writes and fsyncs its file: the wall time of the fsync, ns.
#[inline(never)]
fn chain_fsync(fd: libc::c_int, buf: &[u8]) -> Result<u64> {
    sys::write(fd, buf)?;
    let t = Instant::now();
    sys::fsync(fd)?;
    Ok(t.elapsed().as_nanos() as u64)
}

/// A thread passes the round on: one byte into the pipe its waiter reads (the wakeup).
#[inline(never)]
fn chain_pass(fd: libc::c_int) -> Result<()> {
    if sys::write(fd, b"x")? != 1 {
        bail!("short write to the chain's pipe");
    }
    Ok(())
}

/// A thread waits for its round: one byte from the pipe (false: the writer closed it).
#[inline(never)]
fn chain_wait(fd: libc::c_int) -> Result<bool> {
    let mut b = [0u8; 1];
    Ok(sys::read(fd, &mut b)? == 1)
}

/// Wall and CPU time of the calling thread from now, for its report.
pub(crate) struct Clock {
    wall: Instant,
    cpu: u64,
}

impl Clock {
    pub(crate) fn start() -> Self {
        Self {
            wall: Instant::now(),
            cpu: sys::thread_cpu_ns(),
        }
    }

    pub(crate) fn report(&self, name: &str, extra: Value) -> Value {
        let wall = self.wall.elapsed().as_nanos() as u64;
        let cpu = sys::thread_cpu_ns() - self.cpu;
        let mut v = json!({
            "thread": name,
            "tid": sys::tid(),
            "wall_ns": wall,
            "cpu_ns": cpu,
            "off_cpu_ns": wall.saturating_sub(cpu),
        });
        if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
            o.extend(e);
        }
        v
    }
}

pub(crate) fn chain(a: &ChainArgs) -> Result<Value> {
    if a.rounds == 0 || a.rounds > 1_000_000 {
        bail!("--rounds must be between 1 and 1000000");
    }
    if a.burn_ms > 10_000 {
        bail!("--burn-ms must be at most 10000");
    }
    if a.naps > 1000 {
        bail!("--naps must be at most 1000");
    }
    let dir = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    let path = dir.join(format!("stacks-workload-chain-{}", std::process::id()));
    let file = sys::open(
        &sys::cpath(&path)?,
        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
        0o600,
    )?;
    let (a_to_c_rx, a_to_c_tx) = pipe()?;
    let (b_to_a_rx, b_to_a_tx) = pipe()?;
    let (c_to_b_rx, c_to_b_tx) = pipe()?;
    let (rounds, burn_ns, buf) = (a.rounds, a.burn_ms * 1_000_000, vec![0x5au8; a.write_bytes]);
    let naps = u64::from(a.naps);
    // chain-c works only when chain-a starts a round, so all of its work of a round falls
    // inside chain-a's wait for it.
    let c = sys::spawn_named("chain-c", move || {
        let clock = Clock::start();
        let (mut burn_cpu, mut fsync_ns) = (0u64, 0u64);
        while chain_wait(a_to_c_rx)? {
            for slice in 0..=naps {
                if slice > 0 {
                    chain_nap(NAP_NS)?;
                }
                let before = sys::thread_cpu_ns();
                chain_burn(burn_ns / (naps + 1));
                burn_cpu += sys::thread_cpu_ns() - before;
            }
            fsync_ns += chain_fsync(file, &buf)?;
            chain_pass(c_to_b_tx)?;
        }
        sys::close(c_to_b_tx)?;
        Ok(clock.report(
            "chain-c",
            json!({ "burn_cpu_ns": burn_cpu, "fsync_ns": fsync_ns }),
        ))
    })?;
    let b = sys::spawn_named("chain-b", move || {
        let clock = Clock::start();
        let mut passed = 0u32;
        while chain_wait(c_to_b_rx)? {
            chain_pass(b_to_a_tx)?;
            passed += 1;
        }
        sys::close(b_to_a_tx)?;
        Ok(clock.report("chain-b", json!({ "rounds": passed })))
    })?;
    let a_thread = sys::spawn_named("chain-a", move || {
        let clock = Clock::start();
        let mut got = 0u32;
        for _ in 0..rounds {
            chain_pass(a_to_c_tx)?;
            if !chain_wait(b_to_a_rx)? {
                bail!("chain-b closed its pipe early");
            }
            got += 1;
        }
        let report = clock.report("chain-a", json!({ "rounds": got }));
        sys::close(a_to_c_tx)?;
        Ok(report)
    })?;
    let reports = vec![
        sys::join_named("chain-a", a_thread)?,
        sys::join_named("chain-b", b)?,
        sys::join_named("chain-c", c)?,
    ];
    for fd in [a_to_c_rx, b_to_a_rx, c_to_b_rx, file] {
        let _ = sys::close(fd);
    }
    let _ = std::fs::remove_file(&path);
    Ok(json!({ "workload": "chain", "rounds": rounds, "threads": reports }))
}

#[derive(clap::Args)]
pub(crate) struct PoolArgs {
    /// Producer threads (`producer-N`).
    #[arg(long, default_value_t = 3)]
    producers: u32,
    /// Items in all, handed over one at a time, the producers taking turns.
    #[arg(long, default_value_t = 150)]
    items: u32,
    /// How long a producer sleeps before each item it hands over, ms (the consumer waits that
    /// long, off CPU).
    #[arg(long, default_value_t = 3)]
    pause_ms: u64,
}

/// What the producers and the consumer share, under one mutex.
#[derive(Default)]
struct Handover {
    /// Items handed over so far (whose turn it is: `round % producers`).
    round: u32,
    /// The item waiting for the consumer: the tid of the producer that put it there.
    item: Option<i32>,
}

/// A producer hands its item over and signals the consumer.
#[inline(never)]
fn pool_signal(shared: &(Mutex<Handover>, Condvar, Condvar), tid: i32) {
    let (lock, to_consumer, _) = shared;
    let mut h = lock.lock().unwrap_or_else(|e| e.into_inner());
    h.item = Some(tid);
    to_consumer.notify_one();
}

/// The calling thread's voluntary context switches so far (it blocked that many times).
fn voluntary_switches() -> i64 {
    // SAFETY: getrusage writes only the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD is the calling thread.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
    u.ru_nvcsw
}

/// The consumer waits for an item: the tid of the producer that signalled, and whether it
/// blocked for it (left the CPU: a condition variable's wait may return at once when the
/// signal came between its unlock and its sleep).
#[inline(never)]
fn pool_wait(shared: &(Mutex<Handover>, Condvar, Condvar)) -> (i32, bool) {
    let (lock, to_consumer, to_producers) = shared;
    let before = voluntary_switches();
    let mut h = lock.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if let Some(tid) = h.item.take() {
            h.round += 1;
            to_producers.notify_all();
            return (tid, voluntary_switches() != before);
        }
        h = to_consumer.wait(h).unwrap_or_else(|e| e.into_inner());
    }
}

pub(crate) fn pool(a: &PoolArgs) -> Result<Value> {
    if a.producers == 0 || a.producers > 64 {
        bail!("--producers must be between 1 and 64");
    }
    if a.items == 0 || a.items > 1_000_000 {
        bail!("--items must be between 1 and 1000000");
    }
    let shared = Arc::new((
        Mutex::new(Handover::default()),
        Condvar::new(),
        Condvar::new(),
    ));
    let (producers, items, pause) = (a.producers, a.items, Duration::from_millis(a.pause_ms));
    let mut handles = Vec::new();
    for i in 0..producers {
        let shared = shared.clone();
        let name = format!("producer-{i}");
        handles.push(sys::spawn_named(&name.clone(), move || {
            let tid = sys::tid();
            let mut handed = 0u32;
            loop {
                // Wait for this producer's turn (or the end).
                {
                    let (lock, _, to_producers) = &*shared;
                    let mut h = lock.lock().unwrap_or_else(|e| e.into_inner());
                    while h.round < items && (h.round % producers != i || h.item.is_some()) {
                        h = to_producers.wait(h).unwrap_or_else(|e| e.into_inner());
                    }
                    if h.round >= items {
                        break;
                    }
                }
                std::thread::sleep(pause);
                pool_signal(&shared, tid);
                handed += 1;
            }
            Ok(json!({ "thread": name, "tid": tid, "items": handed }))
        })?);
    }
    let consumer = {
        let shared = shared.clone();
        sys::spawn_named("consumer", move || {
            let mut receipts = Vec::new();
            for _ in 0..items {
                let (from, waited) = pool_wait(&shared);
                receipts.push(json!({
                    "time_ns": sys::realtime_ns(),
                    "producer": from,
                    "waited": waited,
                }));
            }
            Ok(json!({ "thread": "consumer", "tid": sys::tid(), "receipts": receipts }))
        })?
    };
    let consumer = sys::join_named("consumer", consumer)?;
    let mut reports = Vec::new();
    for (i, h) in handles.into_iter().enumerate() {
        reports.push(sys::join_named(&format!("producer-{i}"), h)?);
    }
    Ok(json!({ "workload": "pool", "producers": reports, "consumer": consumer }))
}
