#!/usr/bin/env python3
# scripts/bench_probes.py — the cost of a probe hit (#18): a uprobe on a function called N
# times and a tracepoint hit by N system calls, recorded by stacks-record (a row per hit, and
# counted in the kernel with `:count`), perf record and bpftrace, side by side in one run.
# Writes its section of BENCHMARKS.md (between markers). Run through scripts/bench (release
# build, root, tracefs mounted in a private namespace for perf).
"""Cost per probe hit against perf record and bpftrace.

The workload is `stacks-workload probes` (N calls of `stacks_workload_probed`, or N `getppid`
system calls), run by each tracer as its command. CPU is user+sys of the tracer and the
workload together (wait4 rusage of the tracer, which reaps the workload), less the workload's
CPU run alone: the extra CPU per hit, the uprobe's trap included. Environment:
CARGO_TARGET_DIR, BENCH_OUT, BENCH_REPS (default 3; medians), BENCH_HITS (default 1000000).
"""

import os
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
REPS = int(os.environ.get("BENCH_REPS") or 3)
HITS = int(os.environ.get("BENCH_HITS") or 1_000_000)
REC, WORK = str(BIN / "stacks-record"), str(BIN / "stacks-workload")
BEGIN, END = "<!-- bench-probes:begin -->", "<!-- bench-probes:end -->"
FUNC = "stacks_workload_probed"


def workload(probe):
    """The workload command line hitting `probe` ("uprobe" or "tp") HITS times."""
    what = ["--calls", str(HITS)] if probe == "uprobe" else ["--calls", "0", "--syscalls", str(HITS)]
    return [WORK, "probes", *what, "--usdt", "0", "--forks", "0"]


def cpu_of(cmd, tmp):
    """Run `cmd` (its output discarded); user+sys CPU seconds of it and its children."""
    with open(tmp / "stderr.log", "w") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=tmp)
        cpu = benchmd.reap(p)
    if p.returncode != 0:
        sys.exit(f"bench_probes: error: {' '.join(cmd)} failed:\n{(tmp / 'stderr.log').read_text()}")
    return cpu


def tracers(probe, tmp):
    """(name, command, setup, teardown) of each tracer of `probe`."""
    wl = workload(probe)
    perf_data = str(tmp / "perf.data")
    if probe == "uprobe":
        spec = f"uprobe:{WORK}:{FUNC}:u"
        perf_event = f"probe_stacks:{FUNC}"
        perf_setup = ["perf", "probe", "-q", "-x", WORK, "-a", f"probe_stacks:{FUNC}={FUNC}"]
        perf_teardown = ["perf", "probe", "-q", "-d", "probe_stacks:*"]
        bt = f"uprobe:{WORK}:{FUNC} {{ @[ustack] = count(); }}"
    else:
        spec = "tp:raw_syscalls:sys_enter:uk"
        perf_event = "raw_syscalls:sys_enter"
        perf_setup = perf_teardown = None
        bt = "tracepoint:raw_syscalls:sys_enter /pid == cpid/ { @[kstack, ustack] = count(); }"
    out = [
        ("stacks-record, a row per hit", [REC, "-e", spec, "-o", "/dev/null", "--", *wl], None, None),
        ("stacks-record `:count`", [REC, "-e", spec + ":count", "-o", "/dev/null", "--", *wl], None, None),
        ("perf record -g", ["perf", "record", "-q", "-e", perf_event, "--call-graph", "fp",
                            "-o", perf_data, "--", *wl], perf_setup, perf_teardown),
    ]
    if shutil.which("bpftrace"):
        out.append(("bpftrace, counted by stack", ["bpftrace", "-q", "-e", bt, "-c", " ".join(wl)],
                    None, None))
    return out


def main():
    benchmd.preflight("bench_probes", "BPF, perf events", [REC, WORK])
    if not shutil.which("perf"):
        sys.exit("bench_probes: error: perf is missing (scripts/bench installs it)")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-probes-") as t:
        tmp = Path(t)
        for probe in ["uprobe", "tp"]:
            base = statistics.median(cpu_of(workload(probe), tmp) for _ in range(REPS))
            for name, cmd, setup, teardown in tracers(probe, tmp):
                runs = []
                for _ in range(REPS):
                    if setup:
                        subprocess.run(setup, check=True, capture_output=True)
                    try:
                        runs.append(cpu_of(cmd, tmp))
                    finally:
                        if teardown:
                            subprocess.run(teardown, capture_output=True)
                cost = statistics.median(runs)
                rows.append((probe, name, cost, (cost - base) / HITS * 1e9, base))
                print(f"{probe:6} {name:32} {cost:6.2f} s  {(cost - base) / HITS * 1e9:7.0f} ns/hit",
                      file=sys.stderr)
    write(rows)


def write(rows):
    when = time.strftime("%Y-%m-%d")
    bt = "" if shutil.which("bpftrace") else " (bpftrace is not installed here)"
    lines = [
        BEGIN,
        "## Probes: cost per hit (`scripts/bench_probes.py`)",
        "",
        f"Measured {when}, {REPS} runs each (medians), {HITS:,} hits per run{bt}. The probed",
        f"workload runs as each tracer's command: `stacks-workload probes` calls `{FUNC}`",
        "(uprobe) or makes `getppid` system calls (tracepoint `raw_syscalls:sys_enter`, a raw",
        "tracepoint for stacks-record). *CPU* is the tracer's and the workload's user+sys",
        "together; *per hit* is that less the workload alone, over the hits: the uprobe's trap,",
        "the program, stack capture and the tracer's user side. Ratios are against `perf record -g`",
        "on the same probe.",
        "",
        "| probe | tracer | CPU s | per hit | vs perf |",
        "|---|---|---|---|---|",
    ]
    for probe in ["uprobe", "tp"]:
        mine = [r for r in rows if r[0] == probe]
        perf = next(r for r in mine if r[1].startswith("perf"))
        label = f"uprobe `{FUNC}`" if probe == "uprobe" else "tracepoint `sys_enter`"
        base = mine[0][4]
        lines.append(f"| {label} | (workload alone) | {base:.2f} | | |")
        for _, name, cost, per_hit, _ in mine:
            ratio = per_hit / perf[3] if perf[3] > 0 else float("nan")
            lines.append(f"| {label} | {name} | {cost:.2f} | {per_hit:.0f} ns | {ratio:.2f}× |")
    lines.append(END)
    benchmd.replace_section(OUT, BEGIN, END, "\n".join(lines))


if __name__ == "__main__":
    main()
