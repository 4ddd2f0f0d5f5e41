#!/usr/bin/env python3
# scripts/bench_uring.py — what `-e uring` costs an io_uring program: each uring BPF program's
# mean run time per request (kernel.bpf_stats_enabled) and fio's own IOPS and completion
# latency (4 KiB direct random reads at depth 8, io_uring engine) bare, under stacks-record
# -e uring:n and -e uring:u, and under perf record on the same tracepoints without and with
# stacks. Runs are interleaved, medians of BENCH_REPS (default 3). Writes its section of
# BENCHMARKS.md. As root, with nothing else running on the machine (the load average is
# written with the figures). BENCH_BEFORE (a directory holding an earlier build's
# stacks-record) adds its `uring:n` and `uring:u` cases, interleaved with the others.
"""io_uring recording cost per request and in fio's IOPS, side by side with perf.

perf records the io_uring tracepoints only with tracefs mounted: it runs inside `unshare -m`
with tracefs mounted there, so the host stays as a fresh one. Environment: CARGO_TARGET_DIR,
BENCH_OUT, BENCH_REPS, BENCH_FIO_SECONDS (default 5), BENCH_FIO_FILE, BENCH_FIO_SIZE (default
64M), BENCH_BEFORE, BENCH_BEFORE_LABEL.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchmd

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR") or Path.home() / ".cache/stacks-target")
REC = str(TARGET / "release" / "stacks-record")
OUT = Path(os.environ.get("BENCH_OUT") or ROOT / "BENCHMARKS.md")
REPS = int(os.environ.get("BENCH_REPS") or 3)
FIO_SECONDS = int(os.environ.get("BENCH_FIO_SECONDS") or 5)
FIO_FILE = os.environ.get("BENCH_FIO_FILE") or "/var/tmp/stacks-bench-uring.dat"
FIO_SIZE = os.environ.get("BENCH_FIO_SIZE") or "64M"
BEFORE = os.environ.get("BENCH_BEFORE")
BEFORE_REC = str(Path(BEFORE) / "stacks-record") if BEFORE else None
# What the earlier build is, for the text (default: its directory).
BEFORE_LABEL = os.environ.get("BENCH_BEFORE_LABEL") or BEFORE
BEGIN, END = "<!-- bench-uring:begin -->", "<!-- bench-uring:end -->"
STATS = Path("/proc/sys/kernel/bpf_stats_enabled")
TPS = "io_uring:io_uring_submit_req,io_uring:io_uring_queue_async_work,io_uring:io_uring_poll_arm,io_uring:io_uring_complete"
PROGS = ["on_uring_submit", "on_uring_async", "on_uring_poll", "on_uring_complete"]


def log(msg):
    print(f"bench-uring: {msg}", file=sys.stderr, flush=True)


def fio_argv(out):
    return ["fio", "--name=randread", f"--filename={FIO_FILE}", f"--size={FIO_SIZE}",
            "--rw=randread", "--bs=4k", "--ioengine=io_uring", "--iodepth=8", "--direct=1",
            f"--runtime={FIO_SECONDS}", "--time_based", "--output-format=json",
            f"--output={out}"]


def in_tracefs_ns(argv):
    script = 'mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null; exec "$@"'
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *argv]


def run(argv, what):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"bench-uring: error: {what} failed ({p.returncode}): {p.stderr[-2000:]}")
    return p


def fio_result(path):
    j = json.loads(Path(path).read_text())["jobs"][0]["read"]
    pct = j["clat_ns"]["percentile"]
    return {"iops": j["iops"], "p50": pct["50.000000"] / 1e3, "p99": pct["99.000000"] / 1e3}


CASES = [
    ("bare", None),
    ("stacks -e uring:n", ["stacks", "uring:n", REC]),
    ("stacks -e uring:u", ["stacks", "uring:u", REC]),
    ("perf record (no stacks)", ["perf", []]),
    ("perf record -g", ["perf", ["-g"]]),
]
if BEFORE_REC:
    CASES[3:3] = [
        ("before: stacks -e uring:n", ["stacks", "uring:n", BEFORE_REC]),
        ("before: stacks -e uring:u", ["stacks", "uring:u", BEFORE_REC]),
    ]


def case_run(case, tmp):
    out = tmp / "fio.json"
    how = case[1]
    if how is None:
        run(fio_argv(out), "fio")
        return fio_result(out), {}
    if how[0] == "stacks":
        # fio's figures with run-time counting off (it adds two clock reads to every program
        # run); the programs' figures from a second run with it on.
        argv = [how[2], "-e", how[1], "-o", "/dev/null", "--", *fio_argv(out)]
        # (On only for that second run: the other cases run with it off too.)
        STATS.write_text("0")
        run(argv, case[0])
        result = fio_result(out)
        STATS.write_text("1")
        try:
            p = run(argv, case[0])
        finally:
            STATS.write_text("0")
        return result, {name: benchmd.bpf_runs(p.stderr, name) for name in PROGS}
    data = tmp / "perf.data"
    run(in_tracefs_ns(["perf", "record", "-q", *how[1], "-e", TPS, "-o", str(data), "--",
                       *fio_argv(out)]), case[0])
    data.unlink()
    return fio_result(out), {}


def main():
    benchmd.preflight("bench-uring", "BPF and kernel.bpf_stats_enabled",
                      [REC] + ([BEFORE_REC] if BEFORE_REC else []))
    run(["fio", "--name=prepare", f"--filename={FIO_FILE}", f"--size={FIO_SIZE}", "--rw=write",
         "--bs=1M", "--direct=1", "--output=/dev/null"], "fio prepare")
    before = STATS.read_text().strip()
    STATS.write_text("0")
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results = {c[0]: [] for c in CASES}
    try:
        with tempfile.TemporaryDirectory() as t:
            tmp = Path(t)
            for rep in range(REPS):
                for case in CASES:
                    r = case_run(case, tmp)
                    results[case[0]].append(r)
                    log(f"rep {rep + 1}/{REPS} {case[0]}: {r[0]['iops']:.0f} IOPS")
    finally:
        STATS.write_text(before)
    load_after = Path("/proc/loadavg").read_text().split()[:3]
    med = lambda xs: statistics.median(xs) if xs else 0.0  # noqa: E731
    bare = med([r[0]["iops"] for r in results["bare"]])
    lines = [
        BEGIN,
        "## io_uring requests (`-e uring`): cost per request and in fio's IOPS "
        "(`scripts/bench_uring.py`)",
        "",
        f"fio's io_uring engine, 4 KiB direct random reads at depth 8 of a file of `--size={FIO_SIZE}` for "
        f"{FIO_SECONDS} s, medians of {REPS} interleaved runs. IOPS and completion latency are "
        "fio's own, with BPF run-time counting off; the programs' ns per run from a second run "
        "with it on (`kernel.bpf_stats_enabled`).",
        "",
        f"Measured {started} by `scripts/bench_uring.py`; load average {' '.join(load_before)} "
        f"before, {' '.join(load_after)} after ({os.cpu_count()} CPUs; a load above that means "
        "other work shared them, which lowers every case's IOPS and raises the programs' ns).",
        "",
    ]
    if BEFORE_REC:
        lines += [f"*before*: an earlier build's stacks-record ({BEFORE_LABEL}), run in the same "
                  "rounds.", ""]
    lines += [
        "| case | IOPS | vs bare | clat p50 µs | clat p99 µs |",
        "|---|---|---|---|---|",
    ]
    for name, _ in CASES:
        rs = results[name]
        iops = med([r[0]["iops"] for r in rs])
        lines.append(
            f"| {name} | {iops:,.0f} | {iops / bare:.2f} | {med([r[0]['p50'] for r in rs]):.1f} "
            f"| {med([r[0]['p99'] for r in rs]):.1f} |"
        )
    lines += ["", "| case | program | runs per request | ns per run | ns per request |",
              "|---|---|---|---|---|"]
    for name, how in CASES:
        if not how or how[0] != "stacks":
            continue
        total = 0.0
        submits = med([r[1]["on_uring_submit"][0] for r in results[name]]) or 1
        for prog in PROGS:
            runs = med([r[1][prog][0] for r in results[name]])
            ns = med([r[1][prog][1] for r in results[name]])
            total += runs * ns / submits
            lines.append(f"| {name} | {prog} | {runs / submits:.2f} | {ns:,.0f} | "
                         f"{runs * ns / submits:,.0f} |")
        lines.append(f"| {name} | all | | | **{total:,.0f}** |")
    lines.append(END)
    benchmd.replace_section(OUT, BEGIN, END, "\n".join(lines) + "\n")
    log(f"wrote {OUT}")


if __name__ == "__main__":
    main()
