#!/usr/bin/env python3
# scripts/bench_heap.py — the cost of heap profiling (#47): an allocation-heavy C program (small
# malloc/free pairs on one thread) plain, with libstacks_alloc.so preloaded, under
# `stacks-record -e alloc`, under bcc-memleak-style uprobes on every malloc and free, and under
# heaptrack, interleaved in one run. Writes its section of BENCHMARKS.md (between markers).
# Run through scripts/bench (release build, root: BENCH_ONLY=heap).
"""Heap profiling cost per malloc/free pair against uprobes on every call and heaptrack.

The workload (`churn`, compiled here from the C below) makes N pairs of `malloc(16..31)` and
`free`, one thread, and reports its own thread CPU time per pair (CLOCK_THREAD_CPUTIME_ID:
user and system time of that thread, so the uprobes' traps count and time spent waiting for a
core does not). Each round runs every configuration once, in turn; the figures are medians over
the rounds. Ratios are against the plain program in the same run. Environment:
CARGO_TARGET_DIR, BENCH_OUT, BENCH_REPS (rounds, default 5), BENCH_PAIRS (default 10,000,000),
BENCH_SLOW_PAIRS (for the per-call tracers, default 200,000).
"""

import os
import re
import shutil
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
REPS = int(os.environ.get("BENCH_REPS") or 5)
PAIRS = int(os.environ.get("BENCH_PAIRS") or 10_000_000)
SLOW_PAIRS = int(os.environ.get("BENCH_SLOW_PAIRS") or 200_000)
# The allocation-heavy program's rate of pairs a second, plain.
RATE = 10_000_000
REC, LIB = str(BIN / "stacks-record"), str(BIN / "libstacks_alloc.so")
BEGIN, END = "<!-- bench-heap:begin -->", "<!-- bench-heap:end -->"
# bcc memleak attaches to malloc's entry and return (the address) and to free: the same three
# probes, counted in the kernel by stack (`:count`), as memleak keeps its table in a BPF map.
UPROBES = ",".join(f"{p}:libc.so.6:{f}:u:count"
                   for p, f in [("uprobe", "malloc"), ("uretprobe", "malloc"), ("uprobe", "free")])

CHURN = r"""
/* churn: N malloc/free pairs of 16..31 bytes on one thread, each after WORK dependent
   multiply-adds; writes its thread CPU ns per pair to FILE. Usage: churn N WORK FILE */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
  long n = atol(argv[1]), work = atol(argv[2]);
  struct timespec a, b;
  unsigned x = 1;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
  for (long i = 0; i < n; i++) {
    for (long k = 0; k < work; k++)
      x = x * 1103515245u + 12345u;
    x = x * 1103515245u + 12345u;
    char *volatile p = malloc(16 + (x >> 28));
    p[0] = (char)x;
    free(p);
  }
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
  FILE *f = fopen(argv[3], "w");
  fprintf(f, "%.3f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
  return fclose(f) != 0;
}
"""


def log(msg):
    print(f"bench-heap: {msg}", file=sys.stderr, flush=True)


def configs(churn, tmp):
    """(name, command builder of (pairs, work, result file), env, pairs) of each configuration."""
    def bare(n, work, res):
        return [churn, str(n), str(work), res]

    def rec(spec):
        return lambda n, work, res: [REC, "-e", spec, "-o", "/dev/null", "--", *bare(n, work, res)]

    def heaptrack(n, work, res):
        return ["heaptrack", "-o", str(tmp / "heaptrack"), *bare(n, work, res)]

    preload = {"LD_PRELOAD": LIB, "STACKS_ALLOC_INTERVAL": str(512 << 10)}
    out = [
        ("plain", bare, {}, PAIRS),
        ("libstacks_alloc.so preloaded, no recorder", bare, preload, PAIRS),
        ("`stacks-record -e alloc` (512 KiB)", rec("alloc"), {}, PAIRS),
        ("uprobes on malloc (entry, return) and free, `:count`", rec(UPROBES), {}, SLOW_PAIRS),
    ]
    if shutil.which("heaptrack"):
        out.append(("heaptrack", heaptrack, {}, SLOW_PAIRS))
    return out


def run(cmd, env, res, tmp):
    """Run `cmd`; the churn's ns per pair and, under stacks-record, the alloc rows."""
    Path(res).unlink(missing_ok=True)
    p = subprocess.run(cmd, env={**os.environ, **env}, cwd=tmp, capture_output=True, text=True)
    if p.returncode != 0 or not Path(res).exists():
        sys.exit(f"bench-heap: error: {' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
    for f in tmp.glob("heaptrack*"):
        f.unlink()
    m = re.search(r"\balloc (\d+)", p.stderr)
    return float(Path(res).read_text()), int(m.group(1)) if m else None


def calibrate(churn, tmp):
    """WORK (multiply-adds per pair) for RATE pairs a second in the plain program: a line through
    two medians of three runs."""
    res = str(tmp / "result")

    def ns(work):
        return statistics.median(run([churn, "1000000", str(work), res], {}, res, tmp)[0]
                                 for _ in range(3))

    lo, hi = ns(0), ns(64)
    per_step = max((hi - lo) / 64, 1e-3)
    return max(0, round((1e9 / RATE - lo) / per_step))


def main():
    benchmd.preflight("bench-heap", "BPF, uprobes", (REC, LIB))
    load0 = Path("/proc/loadavg").read_text().split()[:3]
    with tempfile.TemporaryDirectory(prefix="stacks-bench-heap-") as t:
        tmp = Path(t)
        (tmp / "churn.c").write_text(CHURN)
        churn = str(tmp / "churn")
        subprocess.run(["cc", "-O2", "-fno-omit-frame-pointer", "-o", churn, str(tmp / "churn.c")],
                       check=True)
        work = calibrate(churn, tmp)
        log(f"{work} multiply-adds per pair for {RATE / 1e6:g}M pairs/s")
        cs = configs(churn, tmp)
        loads = [("tight loop", 0), (f"~{RATE / 1e6:g}M pairs/s", work)]
        ns = {(w, c[0]): [] for w, _ in loads for c in cs}
        rows = {(w, c[0]): [] for w, _ in loads for c in cs}
        for rep in range(REPS):
            for w, k in loads:
                for name, build, env, n in cs:
                    v, r = run(build(n, k, str(tmp / "result")), env, str(tmp / "result"), tmp)
                    ns[(w, name)].append(v)
                    if r is not None:
                        rows[(w, name)].append(r)
                    log(f"round {rep + 1}/{REPS}, {w}: {name}: {v:.2f} ns/pair")
    load1 = Path("/proc/loadavg").read_text().split()[:3]
    write(cs, loads, work, ns, rows, load0, load1)
    log(f"wrote {OUT}")


def write(cs, loads, work, ns, rows, load0, load1):
    lines = [
        BEGIN,
        "",
        "## Heap profiling cost (`scripts/bench_heap.py`)",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M')}, {REPS} interleaved rounds (medians); load "
        f"average before {' '.join(load0)}, after {' '.join(load1)}. The workload makes "
        f"{PAIRS:,} pairs of `malloc(16..31)` and `free` on one thread ({SLOW_PAIRS:,} under the "
        "per-call tracers) and reports its thread's CPU time per pair (user and system: the "
        "uprobes' traps count). The *tight loop* does nothing else (the interposition's cost "
        f"per pair in ns, the worst case); the *~{RATE / 1e6:g}M pairs/s* program does {work} "
        "dependent multiply-adds before each pair (calibrated so that it runs at that rate "
        "plain: an allocation-heavy program, #47's target of ≤ 2%). *stacks-record -e alloc* "
        "preloads libstacks_alloc.so, which samples one allocation per ~512 KiB allocated and "
        "fires a USDT probe only for those (and their frees); the *uprobes* row attaches "
        "`uprobe:`/`uretprobe:` to libc's malloc and `uprobe:` to free, counted in the kernel "
        "by stack (what bcc's memleak does). Ratios are against the plain program of the same "
        "workload in the same run.",
        "",
        "| workload | configuration | ns per pair | vs plain | samples (alloc rows) |",
        "|---|---|---|---|---|",
    ]
    for w, _ in loads:
        plain = statistics.median(ns[(w, "plain")])
        for name, *_ in cs:
            v = statistics.median(ns[(w, name)])
            r = f"{statistics.median(rows[(w, name)]):,.0f}" if rows[(w, name)] else ""
            lines.append(f"| {w} | {name} | {v:.1f} | {v / plain:.3f}× | {r} |")
    lines += ["", END]
    benchmd.replace_section(OUT, BEGIN, END, "\n".join(lines))


if __name__ == "__main__":
    main()
