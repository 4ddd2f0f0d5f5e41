#!/usr/bin/env python3
# scripts/bench_bpf.py — what recording costs the traced program: each BPF program's mean run
# time (kernel.bpf_stats_enabled) and runs/s, fio's own IOPS and completion-latency percentiles
# bare / under stacks-record / under perf record (with and without stacks), the latency stacks
# records for the same reads next to fio's, and a pipe ping-pong (perf bench sched pipe) under
# switch:uk:0 and perf record -g -e sched:sched_switch, and with wakers (switch,wake) next to
# perf sched record and perf record -g on sched_switch and sched_waking, and what sampling
# wakeups 1 in N saves (`wake:k:N`). Runs are interleaved, medians of BENCH_REPS (default 5).
# Writes its section of BENCHMARKS.md. Run through scripts/bench (BENCH_ONLY=bpf), as root;
# BENCH_BPF_ONLY=wake measures only the wake sampling and rewrites only its part of the section.
"""Recording cost per BPF program and in the traced program, side by side with perf.

perf records syscall and block tracepoints only with tracefs mounted: it runs inside
`unshare -m` with tracefs mounted there, so the host stays as a fresh one. Environment:
CARGO_TARGET_DIR, BENCH_OUT, BENCH_REPS, BENCH_FIO_SECONDS (default 5), BENCH_FIO_FILE,
BENCH_BPF_ONLY (`wake`: the wake sampling alone), BENCH_PROFILE (default release).
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import benchmd

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR") or Path.home() / ".cache/stacks-target")
# The recorder's build: release unless BENCH_PROFILE names another (`debug`: the dev build).
PROFILE = os.environ.get("BENCH_PROFILE") or "release"
BIN = TARGET / PROFILE
OUT = Path(os.environ.get("BENCH_OUT") or ROOT / "BENCHMARKS.md")
REPS = int(os.environ.get("BENCH_REPS") or 5)
FIO_SECONDS = int(os.environ.get("BENCH_FIO_SECONDS") or 5)
FIO_FILE = os.environ.get("BENCH_FIO_FILE") or "/var/tmp/stacks-bench-fio.dat"
REC, WORK = str(BIN / "stacks-record"), str(BIN / "stacks-workload")
BEGIN, END = "<!-- bench-bpf:begin -->", "<!-- bench-bpf:end -->"
# The wake sampling's part, inside the section: rewritten alone with BENCH_BPF_ONLY=wake.
WAKE_BEGIN, WAKE_END = "<!-- bench-bpf-wake:begin -->", "<!-- bench-bpf-wake:end -->"
WAKE_NS = (1, 8, 64)
WAKE_LOOPS = 200000
STATS = Path("/proc/sys/kernel/bpf_stats_enabled")
IO_TPS = ("syscalls:sys_enter_pread64,syscalls:sys_exit_pread64,"
          "block:block_io_start,block:block_rq_complete")


def log(msg):
    print(f"bench-bpf: {msg}", file=sys.stderr, flush=True)


def fio_argv(out):
    return ["fio", "--name=randread", f"--filename={FIO_FILE}", "--size=256M",
            "--rw=randread", "--bs=4k", "--ioengine=psync", "--direct=1",
            f"--runtime={FIO_SECONDS}", "--time_based", "--output-format=json",
            f"--output={out}"]


def in_tracefs_ns(argv):
    """`argv` in a private mount namespace with tracefs mounted (perf's syscall tracepoints)."""
    script = 'mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null; exec "$@"'
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *argv]


def run(argv, what):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"bench-bpf: error: {what} failed ({p.returncode}): {p.stderr[-2000:]}")
    return p


def fio_result(path):
    j = json.loads(Path(path).read_text())["jobs"][0]["read"]
    pct = j["clat_ns"]["percentile"]
    return {"iops": j["iops"], "p50": pct["50.000000"] / 1e3, "p99": pct["99.000000"] / 1e3}


def recorded_latency(stream):
    """p50 and p99 (µs) of the pread64 rows' latency in a raw stream."""
    import pyarrow.compute as pc
    import pyarrow.ipc as ipc
    t = ipc.open_stream(open(stream, "rb")).read_all()
    t = t.filter(pc.and_(pc.equal(t["kind"], "vfs"), pc.equal(t["syscall"], "pread64")))
    # Rows summed in the kernel (count > 1) carry a latency total, not one call's.
    t = t.filter(pc.equal(t["count"], 1))
    if t.num_rows == 0:
        return None
    q = pc.quantile(t["duration"], q=[0.5, 0.99], interpolation="nearest").to_pylist()
    return {"p50": q[0] / 1e3, "p99": q[1] / 1e3, "rows": t.num_rows}


def progs(stderr):
    """{program: (runs, ns per run)} from a stacks-record summary."""
    out = {}
    for line in stderr.splitlines():
        if "BPF program runs" in line:
            for part in line.split("): ", 1)[1].split("; "):
                name = part.split(" ", 1)[0]
                out[name] = benchmd.bpf_runs(line, name)
    return out


FIO_CASES = [
    ("bare", None),
    ("stacks -e vfs:n,block:n", ["stacks", "vfs:n,block:n"]),
    ("stacks -e vfs:u,block:uk", ["stacks", "vfs:u,block:uk"]),
    # The same with every kernel stack unwound by the kernel (no cache of its unwinds).
    ("stacks -e vfs:u,block:uk --kernel-stacks-unwound",
     ["stacks", "vfs:u,block:uk", "--kernel-stacks-unwound"]),
    ("perf record (no stacks)", ["perf", []]),
    ("perf record -g", ["perf", ["-g"]]),
]


def fio_case(case, tmp, seconds):
    out = tmp / "fio.json"
    how = case[1]
    if how is None:
        run(fio_argv(out), "fio")
        return fio_result(out), None, {}
    if how[0] == "stacks":
        # fio's figures with run-time counting off, as users run (counting adds two clock reads
        # to every program run); the programs' figures from a second run with it on.
        stream = tmp / "rec.arrow"
        argv = [REC, *how[2:], "-e", how[1], "-o", str(stream), "--", *fio_argv(out)]
        STATS.write_text("0")
        try:
            run(argv, case[0])
        finally:
            STATS.write_text("1")
        rec = recorded_latency(stream)
        result = fio_result(out)
        p = run(argv, case[0])
        stream.unlink()
        return result, rec, progs(p.stderr)
    data = tmp / "perf.data"
    run(in_tracefs_ns(["perf", "record", "-q", *how[1], "-e", IO_TPS, "-o", str(data), "--",
                       *fio_argv(out)]), case[0])
    data.unlink()
    return fio_result(out), None, {}


def bench_fio(tmp):
    run(["fio", "--name=prepare", f"--filename={FIO_FILE}", "--size=256M", "--rw=write",
         "--bs=1M", "--output=/dev/null"], "fio prepare")
    results = {c[0]: [] for c in FIO_CASES}
    for rep in range(REPS):
        for case in FIO_CASES:
            r = fio_case(case, tmp, FIO_SECONDS)
            results[case[0]].append(r)
            log(f"rep {rep + 1}/{REPS} {case[0]}: {r[0]['iops']:.0f} IOPS")
    return results


def pingpong(argv_prefix, tmp):
    """perf bench sched pipe under `argv_prefix`: µs per round trip."""
    # Both tasks on CPU 0: each round trip is two switches on one CPU, so what a switch costs
    # adds to it. Left to the scheduler on this 2-vCPU VM, a round trip mostly measured where
    # the tasks ran and the waking of an idle vCPU: 42 µs bare, 34 µs with the kernel unwinding
    # every switch and 43 µs with the cache, more work per switch being faster.
    p = run([*argv_prefix, "taskset", "-c", "0", "perf", "bench", "sched", "pipe", "-l",
             "200000"], "ping-pong")
    text = p.stdout + p.stderr
    for line in text.splitlines():
        if "usecs/op" in line:
            return float(line.split()[0]), p
    sys.exit(f"bench-bpf: error: no usecs/op in perf bench's output: {text[-500:]}")


def bench_pingpong(tmp):
    data = tmp / "perf.data"
    cases = [
        ("bare", lambda: []),
        ("stacks -e switch:n:0", lambda: [REC, "-e", "switch:n:0", "-o", "/dev/null", "--"]),
        ("stacks -e switch:uk:0", lambda: [REC, "-e", "switch:uk:0", "-o", "/dev/null", "--"]),
        ("perf record -g -e sched:sched_switch",
         lambda: in_tracefs_ns(["perf", "record", "-q", "-g", "-e", "sched:sched_switch",
                                "-o", str(data), "--"])),
        # Wakers: stacks' `wake` rows next to perf's scheduler recording (no stacks) and to
        # perf's stacks at every switch and wakeup.
        ("stacks -e switch:n:0,wake:n",
         lambda: [REC, "-e", "switch:n:0,wake:n", "-o", "/dev/null", "--"]),
        ("stacks -e switch:uk:0,wake:uk",
         lambda: [REC, "-e", "switch:uk:0,wake:uk", "-o", "/dev/null", "--"]),
        ("stacks -e switch:uk:0,wake:uk --kernel-stacks-unwound",
         lambda: [REC, "--kernel-stacks-unwound", "-e", "switch:uk:0,wake:uk", "-o",
                  "/dev/null", "--"]),
        # The defaults: stacks only for waits of at least 1 ms (none here), a note otherwise.
        ("stacks -e switch:uk,wake:uk",
         lambda: [REC, "-e", "switch:uk,wake:uk", "-o", "/dev/null", "--"]),
        ("perf sched record",
         lambda: in_tracefs_ns(["perf", "sched", "record", "-q", "-o", str(data), "--"])),
        ("perf record -g -e sched:sched_switch,sched:sched_waking",
         lambda: in_tracefs_ns(["perf", "record", "-q", "-g", "-e",
                                "sched:sched_switch,sched:sched_waking", "-o", str(data),
                                "--"])),
    ]
    results = {c[0]: [] for c in cases}
    for _ in range(REPS):
        for name, prefix in cases:
            us, p = pingpong(prefix(), tmp)
            results[name].append((us, progs(p.stderr)))
    return results


def wake_case(n):
    """(wakeups/s with run-time counting off, wakeups/s with it on, {program: (runs, ns)})
    of the ping-pong under `-e switch:n:0,wake:k:N` (every wait kept, so every wakeup is one
    the 1-in-N draw is for), or bare for n None."""
    if n is None:
        us, _ = pingpong([], None)
        return 2e6 / us, None, {}
    prefix = [REC, "-e", f"switch:n:0,wake:k:{n}", "-o", "/dev/null", "--"]
    STATS.write_text("0")
    try:
        us_off, _ = pingpong(prefix, None)
    finally:
        STATS.write_text("1")
    us_on, p = pingpong(prefix, None)
    return 2e6 / us_off, 2e6 / us_on, progs(p.stderr)


def loadavg():
    return os.getloadavg()[0]


def bench_wake():
    """The wake sampling's cost: `on_wakeup` per run at 1 in 1, 8 and 64, beside the
    ping-pong's wakeups per second bare and recorded; each round runs every case in turn."""
    cases = [None, *WAKE_NS]
    results = {n: [] for n in cases}
    loads = [loadavg()]
    for rep in range(REPS):
        for n in cases:
            r = wake_case(n)
            results[n].append(r)
            log(f"wake rep {rep + 1}/{REPS} {'bare' if n is None else f'wake:k:{n}'}: "
                f"{r[0]:,.0f} wakeups/s")
        loads.append(loadavg())
    return results, loads


def wake_section(wake, machine):
    results, loads = wake
    bare = med([r[0] for r in results[None]])
    def spread(xs):
        return f"{min(xs) / 1e3:,.0f}k-{max(xs) / 1e3:,.0f}k"
    rows = [["recording", "wakeups/s", "of bare", "rounds' range",
             "wakeups/s (run time counted)", "on_wakeup ns per run", "on_wakeup runs",
             "on_switch ns per run"]]
    rows.append(["bare", f"{bare:,.0f}", "1.00", spread([r[0] for r in results[None]]),
                 "", "", "", ""])
    for n in WAKE_NS:
        rs = results[n]
        off = med([r[0] for r in rs])
        rows.append([f"stacks -e switch:n:0,wake:k:{n}", f"{off:,.0f}", f"{off / bare:.2f}",
                     spread([r[0] for r in rs]),
                     f"{med([r[1] for r in rs]):,.0f}",
                     f"{med([r[2].get('on_wakeup', (0, 0))[1] for r in rs]):,.0f}",
                     f"{med([r[2].get('on_wakeup', (0, 0))[0] for r in rs]):,.0f}",
                     f"{med([r[2].get('on_switch', (0, 0))[1] for r in rs]):,.0f}"])
    return f"""{WAKE_BEGIN}
### Sampling wakeups 1 in N

What `wake:k:N` costs where wakeups are many: the pipe ping-pong above (`taskset -c 0 perf
bench sched pipe -l {WAKE_LOOPS}`, two wakeups a round trip) recorded with `-e
switch:n:0,wake:k:N`, every wait kept, so that every wakeup is one the 1-in-N draw is for:
the ping-pong's wakeups per second with run-time counting off (as users run it) and on, and
`on_wakeup`'s mean run time (`kernel.bpf_stats_enabled`, `run_time_ns` ÷ `run_cnt`, from the
recorder's summary). {machine}, the recorder's {PROFILE} build; rounds interleaved (each round runs every line in turn),
medians of {REPS}; the load average (1 min) was {min(loads):.1f}-{max(loads):.1f} while it
ran: other work shared the 2 CPUs, and where the rounds' ranges overlap the rates tell the
lines apart no better than that; `on_wakeup`'s run time is the figure that does.

{table(rows)}
{WAKE_END}"""


# Two CPU burners, one per CPU: every CPU sample is of a target. (With one, the other CPU's
# samples are of whatever else runs there, which the program leaves at once: a mean per run
# over both halves the cost of a sample or not, as that CPU is busy or idle.)
TWO_BURNERS = ["sh", "-c", "\"$0\" cpu --seconds 3 & \"$0\" cpu --seconds 3; wait"]

# (label, -e spec, workload argv after stacks-workload (or TWO_BURNERS), programs to report)
PROGRAM_CASES = [
    ("profile:u:999", "profile:u:999", TWO_BURNERS, ["on_cpu_sample"]),
    ("profile:uk:999", "profile:uk:999", TWO_BURNERS, ["on_cpu_sample"]),
    ("rss:n:1", "rss:n:1", ["touch", "--mib", "256", "--hold-ms", "0"], ["on_rss_stat"]),
    ("rss:u:1", "rss:u:1", ["touch", "--mib", "256", "--hold-ms", "0"], ["on_rss_stat"]),
    ("net:n", "net:n", ["udp", "--mib", "16", "--datagram", "1024"],
     ["on_sock_send", "on_sock_recv"]),
    ("net:u", "net:u", ["udp", "--mib", "16", "--datagram", "1024"],
     ["on_sock_send", "on_sock_recv"]),
    ("state:uk:100 (-a)", "state:uk:100", None, ["sample_states"]),
]


def bench_programs():
    out = {}
    for label, spec, work, names in PROGRAM_CASES:
        runs = []
        for _ in range(REPS):
            if work is None:
                target = ["-a", "-d", "3s"]
            elif work is TWO_BURNERS:
                target = ["--", *work, WORK]
            else:
                target = ["--", WORK, *work]
            p = run([REC, "-e", spec, "-o", "/dev/null", *target], label)
            runs.append(progs(p.stderr))
        out[label] = {n: med([r.get(n, (0, 0))[1] for r in runs]) for n in names}
        out[label]["runs"] = {n: med([r.get(n, (0, 0))[0] for r in runs]) for n in names}
    return out


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else 0


def table(rows):
    w = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for k, r in enumerate(rows):
        lines.append("| " + " | ".join(str(c).ljust(w[i]) for i, c in enumerate(r)) + " |")
        if k == 0:
            lines.append("|" + "|".join("-" * (x + 2) for x in w) + "|")
    return "\n".join(lines)


def section(fio, pp, programs, wake, machine):
    bare = fio["bare"]
    b_iops = med([r[0]["iops"] for r in bare])
    b50, b99 = med([r[0]["p50"] for r in bare]), med([r[0]["p99"] for r in bare])
    rows = [["recorder", "fio IOPS", "of bare", "fio p50 µs", "fio p99 µs",
             "recorded p50 µs", "recorded p99 µs"]]
    for name, rs in fio.items():
        iops = med([r[0]["iops"] for r in rs])
        rec = [r[1] for r in rs if r[1]]
        rows.append([name, f"{iops:,.0f}", f"{iops / b_iops:.2f}",
                     f"{med([r[0]['p50'] for r in rs]):.1f}",
                     f"{med([r[0]['p99'] for r in rs]):.1f}",
                     f"{med([r['p50'] for r in rec]):.1f}" if rec else "",
                     f"{med([r['p99'] for r in rec]):.1f}" if rec else ""])
    prog_rows = [["recording", "program", "ns per run", "runs/s"]]
    for name, rs in fio.items():
        merged = {}
        for r in rs:
            for prog, (runs, ns) in r[2].items():
                merged.setdefault(prog, []).append((runs, ns))
        for prog, v in sorted(merged.items()):
            if prog in ("on_exec", "on_fork", "on_exit", "on_exit_snapshot", "on_new_mapping"):
                continue
            prog_rows.append([name, prog, f"{med([x[1] for x in v]):,.0f}",
                              f"{med([x[0] for x in v]) / FIO_SECONDS:,.0f}"])
    for name, rs in pp.items():
        merged = {}
        for _, ps in rs:
            for prog, (runs, ns) in ps.items():
                merged.setdefault(prog, []).append((runs, ns))
        for prog in ("on_switch", "on_wakeup"):
            if prog in merged:
                v = merged[prog]
                prog_rows.append([name + " (ping-pong)", prog, f"{med([x[1] for x in v]):,.0f}",
                                  ""])
    for label, v in programs.items():
        for prog, ns in v.items():
            if prog == "runs":
                continue
            prog_rows.append([label, prog, f"{ns:,.0f}", ""])
    pp_bare = med([x[0] for x in pp["bare"]])
    pp_rows = [["recorder", "µs per round trip", "of bare"]]
    for name, rs in pp.items():
        us = med([x[0] for x in rs])
        pp_rows.append([name, f"{us:.2f}", f"{us / pp_bare:.2f}"])
    return f"""{BEGIN}
## The cost of recording (BPF run time and the traced program)

Measured by `scripts/bench_bpf.py` ({machine}); runs interleaved, medians of {REPS}. fio: one
job of 4 KiB random reads, `--ioengine=psync --direct=1`, {FIO_SECONDS} s per run, its own IOPS
and completion-latency percentiles. perf records the same tracepoints (`{IO_TPS}`), inside a
mount namespace with tracefs. "recorded" is the latency stacks-record wrote for the same
`pread64` calls (system call entry to exit). fio's figures under stacks-record are from runs
with `kernel.bpf_stats_enabled` off, as users run it (counting adds two clock reads to every
program run); the programs' figures below from a second run of each with it on. Bare fio: p50
{b50:.1f} µs, p99 {b99:.1f} µs.

{table(rows)}

BPF programs, mean ns per run from `kernel.bpf_stats_enabled` (the stacks-record summary; the
CPU samples of two burners, one per CPU, so that every sample is of a target):

{table(prog_rows)}

Pipe ping-pong (`taskset -c 0 perf bench sched pipe -l 200000`: both tasks on one CPU, so a
round trip is two switches and what recording a switch costs adds to it), every switch
recorded:

{table(pp_rows)}

{wake_section(wake, machine)}
{END}
"""


def main():
    only = os.environ.get("BENCH_BPF_ONLY") or ""
    if only not in ("", "wake"):
        sys.exit(f"bench-bpf: error: BENCH_BPF_ONLY={only}: only `wake` is known")
    benchmd.preflight("bench-bpf", "BPF, perf events", [REC] if only else [REC, WORK])
    for tool in ("perf", "taskset") if only else ("fio", "perf", "unshare"):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode:
            sys.exit(f"bench-bpf: error: {tool} is missing (scripts/setup installs it)")
    machine = f"{os.cpu_count()} CPUs, kernel {os.uname().release}"
    stats = STATS
    before = stats.read_text().strip()
    stats.write_text("1")
    try:
        if only == "wake":
            wake = bench_wake()
        else:
            with tempfile.TemporaryDirectory(prefix="stacks-bench-bpf-") as d:
                tmp = Path(d)
                fio = bench_fio(tmp)
                pp = bench_pingpong(tmp)
                programs = bench_programs()
                wake = bench_wake()
    finally:
        stats.write_text(before)
        Path(FIO_FILE).unlink(missing_ok=True)
    if only == "wake":
        text = OUT.read_text() if OUT.exists() else ""
        if WAKE_BEGIN not in text and END in text:
            # First time: the part goes at the end of the section.
            OUT.write_text(text.replace(END, f"\n{WAKE_BEGIN}\n{WAKE_END}\n{END}", 1))
        benchmd.replace_section(OUT, WAKE_BEGIN, WAKE_END, wake_section(wake, machine))
    else:
        benchmd.replace_section(OUT, BEGIN, END, section(fio, pp, programs, wake, machine))
    log(f"wrote {OUT}")


if __name__ == "__main__":
    main()
