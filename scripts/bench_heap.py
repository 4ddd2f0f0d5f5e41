#!/usr/bin/env python3
# scripts/bench_heap.py — the cost of heap profiling (#47): an allocation-heavy C program (small
# malloc/free pairs on one thread) plain, with a do-nothing interposer of malloc and free (the
# floor), with libstacks_alloc.so preloaded, under
# `stacks-record -e alloc`, under bcc-memleak-style uprobes on every malloc and free, and under
# heaptrack, interleaved in one run. Writes its section of BENCHMARKS.md (between markers).
# Run through scripts/bench (release build, root: BENCH_ONLY=heap).
"""Heap profiling cost per malloc/free pair against uprobes on every call and heaptrack.

The workload (`churn`, compiled here from the C below) makes N pairs of `malloc(16..31)` and
`free`, one thread, in 100 chunks, and reports its own thread CPU time per pair
(CLOCK_THREAD_CPUTIME_ID: user and system time of that thread, so the uprobes' traps count and
time spent waiting for a core does not) in its fastest chunk: what is left after interrupts,
preemption and a neighbour's bursts, which only ever add time. Each round runs every
configuration once, in turn (the order reversed every other round, against drift); a
configuration's ratio in a round is against the plain program of the same round, and the
figures are the medians over the rounds of those paired ratios, with their interquartile range
(the noise), and the ratios of the minimums over the rounds (the quiet state, when a neighbour
on the other core makes runs bimodal). Environment: CARGO_TARGET_DIR, BENCH_OUT, BENCH_REPS (rounds, default 15),
BENCH_PAIRS (default 10,000,000), BENCH_SLOW_PAIRS (for the per-call tracers, default 200,000).
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
REPS = int(os.environ.get("BENCH_REPS") or 15)
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

CHUNKS = 100
CHURN = r"""
/* churn: N malloc/free pairs of 16..31 bytes on one thread, each after WORK dependent
   multiply-adds, timed in CHUNKS chunks of its thread's CPU time; writes the ns per pair of the
   fastest chunk and of the whole run to FILE. Usage: churn N WORK CHUNKS FILE */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
  long n = atol(argv[1]), work = atol(argv[2]), chunks = atol(argv[3]);
  long per = n / chunks;
  unsigned x = 1;
  double best = 1e300, t0 = now(), a = t0;
  for (long c = 0; c < chunks; c++) {
    for (long i = 0; i < per; i++) {
      for (long k = 0; k < work; k++)
        x = x * 1103515245u + 12345u;
      x = x * 1103515245u + 12345u;
      char *volatile p = malloc(16 + (x >> 28));
      p[0] = (char)x;
      free(p);
    }
    double b = now();
    if (b - a < best)
      best = b - a;
    a = b;
  }
  FILE *f = fopen(argv[4], "w");
  fprintf(f, "%.3f %.3f\n", best / per, (a - t0) / (per * chunks));
  return fclose(f) != 0;
}
"""

# The floor: an interposer of malloc and free that does nothing but forward them, each through a
# pointer the dynamic linker fills at load time (glibc's exported __libc_malloc/__libc_free: no
# lookup, so no bootstrap). What any LD_PRELOAD interposition costs: the extra jump per call.
FLOOR = r"""
#include <stddef.h>
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
static void *(*volatile next_malloc)(size_t) = __libc_malloc;
static void (*volatile next_free)(void *) = __libc_free;
void *malloc(size_t n) { return next_malloc(n); }
void free(void *p) { next_free(p); }
"""


def log(msg):
    print(f"bench-heap: {msg}", file=sys.stderr, flush=True)


def configs(churn, floor, tmp):
    """(name, command builder of (pairs, work, result file), env, pairs) of each configuration."""
    def bare(n, work, res):
        return [churn, str(n), str(work), str(CHUNKS), res]

    def rec(spec):
        return lambda n, work, res: [REC, "-e", spec, "-o", "/dev/null", "--", *bare(n, work, res)]

    def heaptrack(n, work, res):
        return ["heaptrack", "-o", str(tmp / "heaptrack"), *bare(n, work, res)]

    preload = {"LD_PRELOAD": LIB, "STACKS_ALLOC_INTERVAL": str(512 << 10)}
    out = [
        ("plain", bare, {}, PAIRS),
        ("do-nothing interposer of malloc and free (the floor)", bare, {"LD_PRELOAD": floor},
         PAIRS),
        ("libstacks_alloc.so preloaded, no recorder", bare, preload, PAIRS),
        ("`stacks-record -e alloc` (512 KiB)", rec("alloc"), {}, PAIRS),
        ("uprobes on malloc (entry, return) and free, `:count`", rec(UPROBES), {}, SLOW_PAIRS),
    ]
    if shutil.which("heaptrack"):
        out.append(("heaptrack", heaptrack, {}, SLOW_PAIRS))
    return out


def run(cmd, env, res, tmp):
    """Run `cmd`; the churn's ns per pair (fastest chunk, whole run) and, under stacks-record,
    the alloc rows."""
    Path(res).unlink(missing_ok=True)
    p = subprocess.run(cmd, env={**os.environ, **env}, cwd=tmp, capture_output=True, text=True)
    if p.returncode != 0 or not Path(res).exists():
        sys.exit(f"bench-heap: error: {' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
    for f in tmp.glob("heaptrack*"):
        f.unlink()
    m = re.search(r"\balloc (\d+)", p.stderr)
    best, whole = map(float, Path(res).read_text().split())
    return (best, whole), int(m.group(1)) if m else None


def calibrate(churn, tmp):
    """WORK (multiply-adds per pair) for RATE pairs a second in the plain program: a line through
    two medians of three runs."""
    res = str(tmp / "result")

    def ns(work):
        return statistics.median(run([churn, "1000000", str(work), "10", res], {}, res, tmp)[0][1]
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
        (tmp / "floor.c").write_text(FLOOR)
        floor = str(tmp / "libfloor.so")
        subprocess.run(["cc", "-O2", "-fPIC", "-shared", "-o", floor, str(tmp / "floor.c")],
                       check=True)
        work = calibrate(churn, tmp)
        log(f"{work} multiply-adds per pair for {RATE / 1e6:g}M pairs/s")
        cs = configs(churn, floor, tmp)
        loads = [("tight loop", 0), (f"~{RATE / 1e6:g}M pairs/s", work)]
        ns = {(w, c[0]): [] for w, _ in loads for c in cs}
        rows = {(w, c[0]): [] for w, _ in loads for c in cs}
        for rep in range(REPS):
            for w, k in loads:
                for name, build, env, n in (cs if rep % 2 == 0 else cs[::-1]):
                    v, r = run(build(n, k, str(tmp / "result")), env, str(tmp / "result"), tmp)
                    ns[(w, name)].append(v)
                    if r is not None:
                        rows[(w, name)].append(r)
                    log(f"round {rep + 1}/{REPS}, {w}: {name}: {v[0]:.2f} ns/pair "
                        f"(whole run {v[1]:.2f})")
    load1 = Path("/proc/loadavg").read_text().split()[:3]
    write(cs, loads, work, ns, rows, load0, load1)
    log(f"wrote {OUT}")


def quartiles(xs):
    """(first quartile, median, third quartile) of `xs`."""
    if len(xs) < 2:
        return xs[0], xs[0], xs[0]
    q1, q2, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return q1, q2, q3


def write(cs, loads, work, ns, rows, load0, load1):
    lines = [
        BEGIN,
        "",
        "## Heap profiling cost (`scripts/bench_heap.py`)",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M')}, {REPS} interleaved rounds; load "
        f"average before {' '.join(load0)}, after {' '.join(load1)}. The workload makes "
        f"{PAIRS:,} pairs of `malloc(16..31)` and `free` on one thread ({SLOW_PAIRS:,} under the "
        f"per-call tracers) in {CHUNKS} chunks and reports its thread's CPU time per pair (user "
        "and system: the uprobes' traps count) in its fastest chunk, the least disturbed. The "
        "*tight loop* does nothing else (the interposition's cost per pair in ns, the worst "
        f"case); the *~{RATE / 1e6:g}M pairs/s* program does {work} "
        "dependent multiply-adds before each pair (calibrated so that it runs at that rate "
        "plain: an allocation-heavy program, #47's target of ≤ 2%). The *do-nothing "
        "interposer* is a preload of `malloc` and `free` that only forwards them (each through "
        "a pointer to glibc's, filled at load): what any interposition costs, the floor under "
        "libstacks_alloc.so. *stacks-record -e alloc* "
        "preloads libstacks_alloc.so, which samples one allocation per ~512 KiB allocated and "
        "fires a USDT probe only for those (and their frees); the *uprobes* row attaches "
        "`uprobe:`/`uretprobe:` to libc's malloc and `uprobe:` to free, counted in the kernel "
        "by stack (what bcc's memleak does). *ns per pair*: the median over the rounds (the "
        "minimum in parentheses; *whole run*: the median of the runs' mean over all their "
        "chunks). *vs plain*: the median over the rounds of the ratio to the plain program of "
        "the same workload in the same round, and the interquartile range of those ratios "
        "(the noise: half the rounds fall inside it); *minimums*: the ratio of the minimums "
        "(on a machine whose other core comes and goes, runs are bimodal and the minimum is "
        "the quiet state; on a quiet one the two agree).",
        "",
        "| workload | configuration | ns per pair (min) | whole run | vs plain | ratio IQR "
        "| minimums | samples (alloc rows) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for w, _ in loads:
        plain = ns[(w, "plain")]
        for name, *_ in cs:
            runs = ns[(w, name)]
            best = [v[0] for v in runs]
            whole = statistics.median(v[1] for v in runs)
            q1, q2, q3 = quartiles([v[0] / p[0] for v, p in zip(runs, plain)])
            r = f"{statistics.median(rows[(w, name)]):,.0f}" if rows[(w, name)] else ""
            low = min(best) / min(p[0] for p in plain)
            lines.append(f"| {w} | {name} | {statistics.median(best):.1f} ({min(best):.1f}) | "
                         f"{whole:.1f} | {q2:.3f}× | {q1:.3f}–{q3:.3f} | {low:.3f}× | {r} |")
    lines += ["", END]
    benchmd.replace_section(OUT, BEGIN, END, "\n".join(lines))


if __name__ == "__main__":
    main()
