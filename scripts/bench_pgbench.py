#!/usr/bin/env python3
# scripts/bench_pgbench.py — what the always-on agent costs beside PostgreSQL under pgbench
# (#65): `stacks-agent -a -e profile:u:49,state:uk:5,switch:uk,wake:u` (its budget off, so the
# configuration stays as configured) beside a private PostgreSQL cluster under
# `pgbench -c 8 -j 2`, its CPU (the agent's and its three stages' utime+stime from /proc, plus
# the run time of the recorder's BPF programs with kernel.bpf_stats_enabled=1) as a share of the
# host's CPUs, the stored rows per second by kind and each stage's memory; pgbench's tps and the
# host's busy CPU time per transaction with and without the agent (runs without it interleaved). Runs interleaved with BENCH_BEFORE (another build's binaries), so
# before and after are measured side by side under the same conditions. Run as root with a
# release build (scripts/bench, BENCH_ONLY=pgbench).
"""The agent's cost beside pgbench, with and without a second build interleaved.

Environment: CARGO_TARGET_DIR (its release/ holds the binaries), BENCH_OUT, BENCH_BEFORE (a
directory with another build's stacks-agent, stacks-record, stacks-symbolize and stacks-pack:
runs alternate between it and this build), BENCH_PG_SECONDS (measured seconds a run, default
60), BENCH_PG_WARMUP (seconds before measuring, default 15), BENCH_PG_RUNS (runs of each build,
default 2), BENCH_PG_BIN (PostgreSQL's bin directory, default the newest of
/usr/lib/postgresql/*/bin), BENCH_PG_EVENTS (the agent's events instead of #65's),
BENCH_PG_EVENTS_BEFORE (the "before" runs' events: interleaved with this build's, or
BENCH_BEFORE's, under BENCH_PG_EVENTS, to compare two configurations), BENCH_KEEP (keep the scratch directory: the agents' logs). The
section is written into BENCH_OUT between its markers.
"""

import glob
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchmd

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR") or Path.home() / ".cache/stacks-target")
AFTER = TARGET / "release"
BEFORE = Path(os.environ["BENCH_BEFORE"]) if os.environ.get("BENCH_BEFORE") else None
OUT = Path(os.environ.get("BENCH_OUT") or ROOT / "BENCHMARKS.md")
SECONDS = float(os.environ.get("BENCH_PG_SECONDS") or 60)
WARMUP = float(os.environ.get("BENCH_PG_WARMUP") or 15)
RUNS = int(os.environ.get("BENCH_PG_RUNS") or 2)
EVENTS = os.environ.get("BENCH_PG_EVENTS") or "profile:u:49,state:uk:5,switch:uk,wake:u"
EVENTS_BEFORE = os.environ.get("BENCH_PG_EVENTS_BEFORE") or EVENTS
if EVENTS_BEFORE != EVENTS and BEFORE is None:
    BEFORE = AFTER
TARGET_SHARE = 0.02
CLIENTS, THREADS = 8, 2
PORT = 54_365
BEGIN, END = "<!-- bench-pgbench:begin -->", "<!-- bench-pgbench:end -->"
TICK = os.sysconf("SC_CLK_TCK")
NCPU = os.cpu_count()


def log(msg):
    print(f"bench-pgbench: {msg}", file=sys.stderr, flush=True)


def pg_bin():
    if os.environ.get("BENCH_PG_BIN"):
        return Path(os.environ["BENCH_PG_BIN"])
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not found:
        sys.exit("bench-pgbench: error: no PostgreSQL under /usr/lib/postgresql (scripts/setup installs it)")
    return Path(found[-1]).parent


def as_postgres(args, check=True, **kw):
    """Run `args` as the user postgres (initdb and postgres refuse root)."""
    return subprocess.run(["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", *map(str, args)],
                          check=check, **kw)


class Cluster:
    """A private cluster in a scratch directory, on a Unix socket only."""

    def __init__(self, scratch):
        self.bin = pg_bin()
        self.dir = Path(scratch) / "pg"
        self.dir.mkdir()
        shutil.chown(self.dir, "postgres", "postgres")
        self.data = self.dir / "data"
        as_postgres([self.bin / "initdb", "-D", self.data, "-A", "trust", "-U", "postgres"],
                    stdout=subprocess.DEVNULL)
        as_postgres([self.bin / "pg_ctl", "-D", self.data, "-l", self.dir / "log", "-w", "-o",
                     f"-k {self.dir} -p {PORT} -c listen_addresses=''", "start"], stdout=subprocess.DEVNULL)
        self.pgbench(["-i", "-q"], stderr=subprocess.DEVNULL)
        self.version = subprocess.run([self.bin / "postgres", "--version"], capture_output=True,
                                      text=True).stdout.strip()

    def pgbench(self, args, **kw):
        return as_postgres([self.bin / "pgbench", "-h", self.dir, "-p", PORT, *args, "postgres"], **kw)

    def start_load(self, seconds):
        return subprocess.Popen(
            ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", str(self.bin / "pgbench"),
             "-h", str(self.dir), "-p", str(PORT), "-c", str(CLIENTS), "-j", str(THREADS), "-T",
             str(int(seconds)), "postgres"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def commits(self):
        """Transactions committed in the database so far (pg_stat_database)."""
        out = as_postgres([self.bin / "psql", "-h", self.dir, "-p", PORT, "-Atc",
                           "SELECT pg_stat_force_next_flush(); "
                           "SELECT xact_commit FROM pg_stat_database WHERE datname = 'postgres'",
                           "postgres"], capture_output=True, text=True)
        return int(out.stdout.split()[-1])

    def stop(self):
        as_postgres([self.bin / "pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop"],
                    stdout=subprocess.DEVNULL, check=False)


def host_busy_s():
    """The host's busy CPU time so far, all CPUs (s): /proc/stat's first line less idle and
    iowait. What the agent costs the host in all, the system-call paths its programs slow down
    included, which no program's run time counts."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:8]]
    return (sum(fields) - fields[3] - fields[4]) / TICK


def tps(out):
    for line in out.splitlines():
        if line.startswith("tps ="):
            return float(line.split()[2])
    return None


def children(pid):
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def comm(pid):
    """The name of `pid`'s executable (comm is cut at 15 bytes: stacks-symbolize is longer)."""
    try:
        return Path(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()).name
    except (OSError, IndexError):
        return None


def cpu_ticks(pid):
    """utime + stime of `pid`, in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def status_kib(pid, key):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return None


def bpf_run_ns(pid):
    """{prog id: run_time_ns} of the BPF programs `pid` holds (its fdinfo)."""
    progs = {}
    for fd in glob.glob(f"/proc/{pid}/fdinfo/*"):
        try:
            text = Path(fd).read_text()
        except OSError:
            continue
        got = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if "prog_id" in got and "run_time_ns" in got:
            progs[int(got["prog_id"])] = int(got["run_time_ns"])
    return progs


def enable_bpf_stats():
    """An fd that keeps the kernel's BPF run-time statistics on while it is open
    (BPF_ENABLE_STATS): on a shared host another tool may write kernel.bpf_stats_enabled=0
    in the middle of a run, which this fd outlives."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    attr = ctypes.create_string_buffer(8)  # union bpf_attr's enable_stats: type 0, run time
    fd = libc.syscall(321, 32, attr, 8)  # SYS_bpf (x86-64), BPF_ENABLE_STATS
    if fd < 0:
        sys.exit(f"bench-pgbench: error: BPF_ENABLE_STATS: {os.strerror(ctypes.get_errno())}")
    return fd


def bpftool_progs(ids):
    """{id: (name, run_time_ns)} of programs `ids` as bpftool shows them."""
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=True).stdout
    return {p["id"]: (p.get("name", ""), p.get("run_time_ns", 0)) for p in json.loads(out) if p["id"] in ids}


# The thread-state iterator runs in the recorder's own read() of each pass: its run time is
# in the recorder's stime already, and is not added again.
IN_RECORDER = {"sample_states"}


def stages(agent):
    """{name: pid} of the agent's stages."""
    return {comm(c): c for c in children(agent.pid) if comm(c)}


def snapshot(agent):
    st = stages(agent)
    ticks = {"stacks-agent": cpu_ticks(agent.pid)}
    ticks.update({n: cpu_ticks(p) for n, p in st.items()})
    rec = st.get("stacks-record")
    return {"t": time.monotonic(), "ticks": ticks, "pids": st, "bpf": bpf_run_ns(rec) if rec else {}}


def rows_by_kind(store, t0_ns, t1_ns):
    """Rows and events (Σ count) by kind of the stored rows timed in [t0, t1)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    rows, events = {}, {}
    for f in glob.glob(f"{store}/**/*.samples.parquet", recursive=True):
        t = pq.read_table(f, columns=["kind", "time", "count"])
        ns = t["time"].cast("int64")
        t = t.filter(pc.and_(pc.greater_equal(ns, t0_ns), pc.less(ns, t1_ns)))
        for kind, cnt in zip(t["kind"].to_pylist(), t["count"].to_pylist()):
            rows[kind] = rows.get(kind, 0) + 1
            events[kind] = events.get(kind, 0) + (cnt or 1)
    return rows, events


def one_run(cluster, bindir, label, scratch, events=EVENTS):
    store = Path(scratch) / f"store-{label}"
    err = open(Path(scratch) / f"agent-{label}.log", "w")
    load = cluster.start_load(WARMUP + SECONDS + 5)
    time.sleep(2)
    try:
        agent = subprocess.Popen(
            [str(bindir / "stacks-agent"), "-a", "-e", events, "--store", str(store), "--metrics", "off",
             "--budget-cpu", "off", "--max-age", "30"],
            stderr=err, stdout=subprocess.DEVNULL,
        )
    except OSError:
        load.kill()
        raise
    try:
        time.sleep(WARMUP)
        if agent.poll() is not None:
            sys.exit(f"bench-pgbench: error: the agent exited ({agent.returncode}): see {err.name}")
        a = snapshot(agent)
        busy0, tx0 = host_busy_s(), cluster.commits()
        wall0 = time.time_ns()
        peaks = {}
        while time.monotonic() - a["t"] < SECONDS:
            time.sleep(1)
            for n, p in stages(agent).items():
                try:
                    peaks[n] = max(peaks.get(n, 0), status_kib(p, "VmRSS") or 0)
                except OSError:
                    pass
        b = snapshot(agent)
        busy1, tx1 = host_busy_s(), cluster.commits()
        wall1 = time.time_ns()
        names = bpftool_progs(set(b["bpf"]))
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)
        if sys.exc_info()[0] is not None:
            load.kill()
    out, _ = load.communicate()
    if a["pids"] != b["pids"]:
        sys.exit(f"bench-pgbench: error: a stage restarted during the run ({a['pids']} -> {b['pids']})")
    dt = b["t"] - a["t"]
    cpu = {n: (b["ticks"][n] - a["ticks"][n]) / TICK for n in b["ticks"]}
    ran = {i: (b["bpf"][i] - a["bpf"].get(i, 0)) / 1e9 for i in b["bpf"]}
    iter_s = sum(v for i, v in ran.items() if names.get(i, ("",))[0] in IN_RECORDER)
    bpf = sum(ran.values()) - iter_s
    rows, events = rows_by_kind(store, wall0, wall1)
    shutil.rmtree(store, ignore_errors=True)
    run = {
        "label": label, "seconds": dt, "cpu": cpu, "bpf": bpf,
        "share": (sum(cpu.values()) + bpf) / (dt * NCPU),
        "rows": {k: v / dt for k, v in rows.items()}, "events": {k: v / dt for k, v in events.items()},
        "peak_mib": {k: v / 1024 for k, v in peaks.items()}, "tps": tps(out),
        "iter": iter_s, "host_ms_tx": (busy1 - busy0) * 1e3 / max(tx1 - tx0, 1),
        "by_prog": sorted(((names.get(i, ("?",))[0], v / dt) for i, v in ran.items() if v > 0),
                          key=lambda x: -x[1]),
    }
    log(f"{label}: {run['share'] * 100:.2f}% of {NCPU} CPUs (stages "
        + ", ".join(f"{n} {c / dt * 100:.2f}%" for n, c in cpu.items())
        + f" of one CPU; BPF {bpf / dt * 100:.2f}% of one CPU, besides the state passes' "
        f"{iter_s / dt * 100:.2f}% in the recorder's), {sum(rows.values()) / dt:.0f} rows/s, "
        f"pgbench {run['tps']:.0f} tps, the host's CPU {run['host_ms_tx']:.3f} ms a transaction; programs " + ", ".join(f"{n} {v * 100:.2f}%" for n, v in run["by_prog"][:6]))
    return run


def baseline(cluster, label):
    """pgbench alone, measured as a run with the agent is: its tps and the host's CPU time a
    transaction."""
    load = cluster.start_load(WARMUP + SECONDS + 5)
    time.sleep(2 + WARMUP)
    busy0, tx0 = host_busy_s(), cluster.commits()
    time.sleep(SECONDS)
    busy1, tx1 = host_busy_s(), cluster.commits()
    out, _ = load.communicate()
    run = {"label": label, "tps": tps(out), "host_ms_tx": (busy1 - busy0) * 1e3 / max(tx1 - tx0, 1)}
    log(f"{label}: pgbench {run['tps']:.0f} tps, the host's CPU {run['host_ms_tx']:.3f} ms a transaction")
    return run


def per_row(r):
    """The recorder's CPU time (user + system) per row stored, µs."""
    rows = sum(r["rows"].values())  # a second
    return r["cpu"].get("stacks-record", 0) / r["seconds"] / rows * 1e6 if rows else float("nan")


def section(runs, conditions, version, bases):
    def fmt_share(r):
        return f"{r['share'] * 100:.2f}%"

    builds = sorted({r["label"].split("#")[0] for r in runs}, key=lambda b: b != "before")
    lines = [
        "## The agent beside PostgreSQL under pgbench (#65)",
        "",
        f"`scripts/bench_pgbench.py`: `stacks-agent -a -e {EVENTS}`"
        + (f" (*before*: `-e {EVENTS_BEFORE}`)" if EVENTS_BEFORE != EVENTS else "")
        + " (budget off, so the level stays as "
        f"configured) beside a private {version} cluster (scale 1) under `pgbench -c {CLIENTS} -j {THREADS}`; "
        f"each run measured for {SECONDS:.0f} s after {WARMUP:.0f} s. CPU is the agent's and its three stages' "
        "utime+stime from /proc plus the recorder's BPF programs' run time (`kernel.bpf_stats_enabled=1`, "
        "held on with a `BPF_ENABLE_STATS` fd, "
        f"`run_time_ns`; the state passes' iterator is left out, its run time being in the recorder's own "
        f"system time: it runs in the recorder's read() of each pass), as a share of the host's {NCPU} CPUs; "
        f"the target is {TARGET_SHARE * 100:.0f}%. "
        f"Stage columns are % of one CPU. {conditions}",
        "",
        "| run | host CPUs (all) | record | symbolize | pack | agent | BPF | rows/s | record µs/row | pgbench tps | host CPU ms/tx |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        c = {n: r["cpu"].get(n, 0) / r["seconds"] * 100 for n in
             ("stacks-record", "stacks-symbolize", "stacks-pack", "stacks-agent")}
        lines.append(
            f"| {r['label']} | {fmt_share(r)} | {c['stacks-record']:.2f}% | {c['stacks-symbolize']:.2f}% | "
            f"{c['stacks-pack']:.2f}% | {c['stacks-agent']:.2f}% | {r['bpf'] / r['seconds'] * 100:.2f}% | "
            f"{sum(r['rows'].values()):,.0f} | {per_row(r):.1f} | {r['tps']:.0f} | {r['host_ms_tx']:.3f} |")
    for r in bases:
        lines.append(f"| {r['label']} | | | | | | | | | {r['tps']:.0f} | {r['host_ms_tx']:.3f} |")
    alone = statistics.median(r["host_ms_tx"] for r in bases)
    lines += ["", "The host's busy CPU time (all CPUs, /proc/stat less idle and iowait) per committed "
              "transaction (pg_stat_database) over the same window, against pgbench alone (median "
              f"{alone:.3f} ms): what the agent costs in all, the system-call paths its programs slow "
              "down included, which no program's `run_time_ns` counts; the workload's own CPU a "
              "transaction moves with its lock waits, so this is the noisier measure:"]
    for b in builds:
        mine = [r["host_ms_tx"] / alone - 1 for r in runs if r["label"].startswith(b)]
        lines.append(f"- {b}: " + ", ".join(f"{x * 100:+.1f}%" for x in mine))
    for b in builds:
        mine = [per_row(r) for r in runs if r["label"].startswith(b)]
        lines.append("")
        lines.append(f"The recorder's CPU per stored row, {b}: {', '.join(f'{x:.1f}' for x in mine)} µs "
                     f"(median {statistics.median(mine):.1f}).")
    last = [r for r in runs if r["label"].startswith(builds[-1])]
    kinds = sorted({k for r in last for k in r["rows"]})
    lines += ["", f"Rows per second stored, by kind ({builds[-1]} runs; events = Σ `count`):", "",
              "| kind | " + " | ".join(r["label"] for r in last) + " |",
              "|---|" + "---|" * len(last)]
    for k in kinds:
        lines.append(f"| {k} | " + " | ".join(
            f"{r['rows'].get(k, 0):,.0f} rows ({r['events'].get(k, 0):,.0f} events)" for r in last) + " |")
    lines += ["", "Peak VmRSS per stage (MiB, sampled each second; the rings count twice, cost.md):", "",
              "| run | record | symbolize | pack |", "|---|---|---|---|"]
    for r in runs:
        p = r["peak_mib"]
        lines.append(f"| {r['label']} | {p.get('stacks-record', 0):.0f} | {p.get('stacks-symbolize', 0):.0f} | {p.get('stacks-pack', 0):.0f} |")
    return "\n".join(lines) + "\n"


def main():
    if os.geteuid() != 0:
        sys.exit("bench-pgbench: error: run as root (BPF, and PostgreSQL runs as the user postgres)")
    for b in [AFTER] + ([BEFORE] if BEFORE else []):
        for tool in ("stacks-agent", "stacks-record", "stacks-symbolize", "stacks-pack"):
            if not (b / tool).exists():
                sys.exit(f"bench-pgbench: error: {b / tool} not found (cargo build --release)")
    stats = Path("/proc/sys/kernel/bpf_stats_enabled")
    stats_before = stats.read_text().strip()
    load_before = os.getloadavg()
    runs = []
    scratch = tempfile.mkdtemp(prefix="bench-pgbench-")
    try:
        os.chmod(scratch, 0o755)
        cluster = Cluster(scratch)
        try:
            stats.write_text("1")
            stats_fd = enable_bpf_stats()
            bases = []
            for i in range(RUNS):
                bases.append(baseline(cluster, f"without the agent#{i + 1}"))
                if BEFORE:
                    runs.append(one_run(cluster, BEFORE, f"before#{i + 1}", scratch, EVENTS_BEFORE))
                runs.append(one_run(cluster, AFTER, f"after#{i + 1}" if BEFORE else f"run#{i + 1}", scratch))
        finally:
            stats.write_text(stats_before)
            if "stats_fd" in locals():
                os.close(stats_fd)
            cluster.stop()
    finally:
        if os.environ.get("BENCH_KEEP"):
            log(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    load_after = os.getloadavg()
    conditions = (f"Load average {load_before[0]:.1f} before, {load_after[0]:.1f} after "
                  f"(the host's other work runs beside it).")
    text = section(runs, conditions, cluster.version, bases)
    benchmd.replace_section(OUT, BEGIN, END, BEGIN + "\n" + text + END)
    log(f"wrote {OUT}")


if __name__ == "__main__":
    main()
