#!/usr/bin/env python3
# scripts/bench_states.py — the cost of `-e state` sampling (#17): recorder CPU per sampling
# pass and per sampled thread at 10, 100 and 1,000 threads, 20 and 100 Hz, the workload's own
# CPU, next to a user-space sampler reading /proc/PID/task/*/stat and .../stack at the same
# rate. Writes its section of BENCHMARKS.md (between markers). Run through scripts/bench
# (release build, root).
"""Thread-state sampling cost against a /proc sampler.

The workload is `stacks-workload states --idle N` (five threads in known states, the main
thread and N-6 threads blocked in `read`), started held at a FIFO; the sampler attaches to its
pid, then it is released, so the wait4 rusage of each process is its own CPU. Environment:
CARGO_TARGET_DIR, BENCH_OUT, BENCH_REPS (default 3; medians), BENCH_SECONDS (default 5).
"""

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchmd

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR") or Path.home() / ".cache/stacks-target")
BIN = TARGET / "release"
OUT = Path(os.environ.get("BENCH_OUT") or ROOT / "BENCHMARKS.md")
REPS = int(os.environ.get("BENCH_REPS") or 3)
SECONDS = float(os.environ.get("BENCH_SECONDS") or 5)
REC, WORK = str(BIN / "stacks-record"), str(BIN / "stacks-workload")
BEGIN, END = "<!-- bench-states:begin -->", "<!-- bench-states:end -->"
THREADS = [10, 100, 1000]
RATES = [20, 100]
NAMED = 6  # the states workload's main thread and its five named threads

# What a user-space sampler does: every 1/HZ s, each thread's stat (state, syscall-less) and
# kernel stack files, opened, read and closed. Exits when the process is gone.
PROC_SAMPLER = r"""
import os, sys, time

pid, hz = sys.argv[1], float(sys.argv[2])
base, period, nxt, passes, reads = f"/proc/{pid}/task", 1.0 / hz, time.monotonic(), 0, 0
while True:
    try:
        tids = os.listdir(base)
    except OSError:
        break
    for t in tids:
        for f in ("stat", "stack"):
            try:
                fd = os.open(f"{base}/{t}/{f}", os.O_RDONLY)
            except OSError:
                continue
            try:
                os.read(fd, 65536)
                reads += 1
            except OSError:
                pass
            os.close(fd)
    passes += 1
    nxt += period
    left = nxt - time.monotonic()
    if left > 0:
        time.sleep(left)
    else:
        nxt = time.monotonic()
print(passes, reads)
"""


def log(msg):
    print(f"bench-states: {msg}", file=sys.stderr, flush=True)


def run(sampler, threads, hz, scratch):
    fifo = os.path.join(scratch, "gate")
    if os.path.exists(fifo):
        os.unlink(fifo)
    os.mkfifo(fifo)
    wargs = ["states", "--seconds", str(SECONDS), "--dir", scratch,
             "--idle", str(threads - NAMED)]
    w = subprocess.Popen(["sh", "-c", 'read _ < "$0"; exec "$@"', fifo, WORK] + wargs,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    data = os.path.join(scratch, "state.data")
    argv = {
        "stacks": [REC, "-e", f"state:uk:{hz}", "-p", str(w.pid), "-o", data],
        "proc": [sys.executable, "-c", PROC_SAMPLER, str(w.pid), str(hz)],
    }.get(sampler)
    prof = None
    if argv:
        prof = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)  # attached
    t0 = time.perf_counter()
    with open(fifo, "w") as g:
        g.write("go\n")
    wcpu = benchmd.reap(w)
    wall = time.perf_counter() - t0
    if w.returncode != 0:
        raise SystemExit(f"bench-states: error: workload {' '.join(wargs)} failed")
    res = {"wall": wall, "wcpu": wcpu}
    if not prof:
        return res
    out, err = prof.stdout.read(), prof.stderr.read()
    res["cpu"] = benchmd.reap(prof, timeout=60)
    if sampler == "stacks":
        m = re.search(r"lost (\d+) events.*?events: ([^;]*);", err)
        if not m:
            raise SystemExit(f"bench-states: error: no stacks-record summary:\n{err[-400:]}")
        counts = dict((k, int(v)) for k, v in
                      (x.strip().rsplit(" ", 1) for x in m.group(2).split(",") if x.strip()))
        res["rows"], res["lost"] = counts.get("state", 0), int(m.group(1))
        res["bytes"] = os.path.getsize(data)
        os.unlink(data)
    else:
        passes, reads = (int(x) for x in out.split())
        res["rows"], res["passes"] = reads // 2, passes
    return res


def med(xs):
    return statistics.median(xs)


def main():
    benchmd.preflight("bench-states", "BPF, /proc/PID/task/*/stack", (REC, WORK))
    load0 = Path("/proc/loadavg").read_text().split()[:3]
    cases = []
    with tempfile.TemporaryDirectory(prefix="stacks-bench-states-", dir="/var/tmp") as scratch:
        for hz in RATES:
            for n in THREADS:
                res = {"bare": [], "stacks": [], "proc": []}
                for rep in range(REPS):
                    for s in res:
                        log(f"{n} threads, {hz} Hz: {s} (rep {rep + 1}/{REPS})")
                        res[s].append(run(s, n, hz, scratch))
                cases.append((hz, n, res))
    load1 = Path("/proc/loadavg").read_text().split()[:3]

    def m(res, s, key):
        return med([r[key] for r in res[s]])

    lines = [BEGIN, "", "## Thread-state sampling (`-e state`), next to a /proc sampler", ""]
    lines.append(
        f"Measured by `scripts/bench_states.py` (run by `scripts/bench`), {REPS} runs each, "
        f"medians; {SECONDS:g} s workloads; load average before {' '.join(load0)}, after "
        f"{' '.join(load1)}. The workload is `stacks-workload states --idle N-6`: a spinner, "
        "four threads blocked (nanosleep, pipe read, recvfrom, fsync), the main thread and "
        "N-6 threads blocked in `read`. Held at a FIFO, the sampler attaches to its pid, then "
        "it is released; CPU is each process's own user+sys time (wait4 rusage). "
        "*stacks-record* runs `-e state:uk:HZ` (the task iterator pass, kernel stack and "
        "frame-pointer user stack of every thread off CPU, conversion, zstd stream); *proc* is "
        "a Python loop that, at the same rate, opens, reads and closes /proc/PID/task/TID/stat "
        "and .../stack of every thread (what a user-space sampler does; it gets no user stack, "
        "no system call, no file). *Per pass* and *per thread* divide the whole process's CPU "
        "(start-up included) by the passes (rows / threads) and rows; *marginal per thread* is "
        "the CPU added per row from N = 10 to N = 1,000 at that rate, without fixed costs. "
        "*Workload CPU* is the workload's own CPU time (the spinner alone is about its wall "
        "time).")
    lines.append("")
    lines.append("| HZ | threads | stacks-record rows | CPU ms | CPU % | µs/pass | µs/thread | "
                 "lost | bytes/row | workload CPU ms (bare → sampled) | proc CPU ms | proc CPU % | "
                 "proc µs/pass | proc µs/thread | CPU ratio stacks/proc |")
    lines.append("|" + "---|" * 15)
    marginal = {}
    for hz, n, res in cases:
        rows, cpu, wall = m(res, "stacks", "rows"), m(res, "stacks", "cpu"), m(res, "stacks", "wall")
        prows, pcpu, pwall = m(res, "proc", "rows"), m(res, "proc", "cpu"), m(res, "proc", "wall")
        passes, ppasses = rows / n, m(res, "proc", "passes")
        marginal.setdefault(hz, {})[n] = (rows, cpu, prows, pcpu)
        lines.append(
            f"| {hz} | {n:,} | {rows:,.0f} | {cpu * 1e3:,.0f} | {100 * cpu / wall:.1f}% | "
            f"{cpu * 1e6 / max(passes, 1):,.0f} | {cpu * 1e6 / max(rows, 1):.1f} | "
            f"{m(res, 'stacks', 'lost'):,.0f} | {m(res, 'stacks', 'bytes') / max(rows, 1):,.0f} | "
            f"{m(res, 'bare', 'wcpu') * 1e3:,.0f} → {m(res, 'stacks', 'wcpu') * 1e3:,.0f} | "
            f"{pcpu * 1e3:,.0f} | {100 * pcpu / pwall:.1f}% | {pcpu * 1e6 / max(ppasses, 1):,.0f} | "
            f"{pcpu * 1e6 / max(prows, 1):.1f} | {cpu / pcpu if pcpu else float('nan'):.2f} |")
    lines.append("")
    for hz, by_n in marginal.items():
        lo, hi = by_n[THREADS[0]], by_n[THREADS[-1]]
        s = (hi[1] - lo[1]) * 1e6 / max(hi[0] - lo[0], 1)
        p = (hi[3] - lo[3]) * 1e6 / max(hi[2] - lo[2], 1)
        lines.append(f"- {hz} Hz, marginal CPU per sampled thread: stacks-record {s:.1f} µs, "
                     f"/proc sampler {p:.1f} µs.")
    lines += ["", END]
    benchmd.replace_section(OUT, BEGIN, END, "\n".join(lines))
    log(f"wrote {OUT}")


if __name__ == "__main__":
    main()
