#!/usr/bin/env python3
# scripts/bench_otlp.py — stacks-otlp next to stacks-pprof on the same real inputs: time and
# bytes. Writes its section of BENCHMARKS.md (between markers).
"""OTLP benchmark: a real recording (`go build -a net/http` with a cold cache, kernel and user
stacks at 999 Hz, and its off-CPU intervals), symbolized, replicated in time to BENCH_OTLP_ROWS
rows (default 10M, bench_store's generator), packed and queried with the bundled `cpu` query;
then, BENCH_REPS times each (default 5), interleaved: stacks-pprof and stacks-otlp on the query
result, and on the recording's symbolized rows replicated to BENCH_OTLP_EVENTS rows (default
1M) with `--kind all` (where OTLP keeps every row as an event and pprof sums them). Given
BENCH_BEFORE (a directory with an earlier build's stacks-pprof), that one too, on the same
inputs. Environment: CARGO_TARGET_DIR (release binaries), BENCH_TOOLS (where stacks-record,
-symbolize, -pack and -query are, default the release binaries: they only make the inputs),
BENCH_OUT, BENCH_REPS, BENCH_OTLP_ROWS, BENCH_OTLP_EVENTS, BENCH_BEFORE, BENCH_KEEP (keep the
scratch directory), BENCH_INPUTS (a kept scratch directory: its inputs are used again; with
`inputs` as the only argument, the inputs are made and kept, nothing is measured)."""

import gzip
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_store
import benchmd

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR") or Path.home() / ".cache/stacks-target")
BIN = TARGET / "release"
OUT = Path(os.environ.get("BENCH_OUT") or ROOT / "BENCHMARKS.md")
REPS = int(os.environ.get("BENCH_REPS") or 5)
ROWS = int(os.environ.get("BENCH_OTLP_ROWS") or 10_000_000)
EVENTS = int(os.environ.get("BENCH_OTLP_EVENTS") or 1_000_000)
TOOLS = Path(os.environ["BENCH_TOOLS"]) if os.environ.get("BENCH_TOOLS") else BIN
BEFORE = Path(os.environ["BENCH_BEFORE"]) if os.environ.get("BENCH_BEFORE") else None
BEGIN, END = "<!-- bench-otlp:begin -->", "<!-- bench-otlp:end -->"


def log(msg):
    print(f"bench-otlp: {msg}", file=sys.stderr, flush=True)


def run(argv, stdin=None, stdout=subprocess.DEVNULL):
    """Run argv; returns (wall s, CPU s of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    subprocess.run(argv, stdin=stdin, stdout=stdout, check=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def make_inputs(work):
    """The recording, its rows replicated (events.arrow), and the cpu query result of its store
    (cpu.arrow), in `work`."""
    log("recording go build -a net/http")
    gocache = work / "gocache"
    env = dict(os.environ, GOCACHE=str(gocache))
    raw = work / "raw.arrow"
    with open(raw, "wb") as f:
        subprocess.run([TOOLS / "stacks-record", "-e", "profile:uk:999,switch:uk", "--"] + bench_store.BUILD,
                       stdout=f, env=env, check=True, cwd=work)
    rows = work / "rows.arrow"
    with open(raw, "rb") as i, open(rows, "wb") as o:
        subprocess.run([TOOLS / "stacks-symbolize"], stdin=i, stdout=o, check=True)
    shutil.rmtree(gocache, ignore_errors=True)
    log(f"replicating to {ROWS:,} rows, packing, querying cpu")
    big = work / "big.arrow"
    subprocess.run([sys.executable, "-c", bench_store.GEN, str(rows), str(big), str(ROWS)], check=True)
    store = work / "store"
    with open(big, "rb") as i:
        subprocess.run([TOOLS / "stacks-pack", store], stdin=i, check=True, stderr=subprocess.DEVNULL)
    big.unlink()
    with open(work / "cpu.arrow", "wb") as o:
        subprocess.run([TOOLS / "stacks-query", "-d", store, "cpu", "--format", "arrow"], stdout=o, check=True)
    subprocess.run([sys.executable, "-c", bench_store.GEN, str(rows), str(work / "events.arrow"), str(EVENTS)],
                   check=True)


def main():
    reuse = Path(os.environ["BENCH_INPUTS"]) if os.environ.get("BENCH_INPUTS") else None
    only_inputs = sys.argv[1:] == ["inputs"]
    needed = [] if reuse else [TOOLS / t for t in ["stacks-record", "stacks-symbolize", "stacks-pack", "stacks-query"]]
    if not only_inputs:
        needed += [BIN / "stacks-pprof", BIN / "stacks-otlp"]
    benchmd.preflight("bench-otlp", "stacks-record records the build", needed)
    work = reuse or Path(tempfile.mkdtemp(prefix="bench-otlp-"))
    try:
        if not reuse:
            make_inputs(work)
        if only_inputs:
            log(f"inputs in {work}")
            return
        load_before = os.getloadavg()
        cpu, events = work / "cpu.arrow", work / "events.arrow"
        inputs = [("cpu query result", cpu, []), ("symbolized rows, --kind all", events, ["--kind", "all"])]
        tools = [("stacks-pprof", BIN / "stacks-pprof"), ("stacks-otlp", BIN / "stacks-otlp")]
        if BEFORE:
            tools.append(("stacks-pprof (before)", BEFORE / "stacks-pprof"))
        results = {}
        for name, path, args in inputs:
            for _ in range(REPS):
                for tool, exe in tools:
                    out = work / "out.bin"
                    wall, cpu_s = run([exe] + args + [path, "-o", out])
                    data = out.read_bytes()
                    # pprof is gzipped already; OTLP as --gzip would send it.
                    zipped = len(data) if data[:2] == b"\x1f\x8b" else len(gzip.compress(data, 6))
                    results.setdefault((name, tool), []).append((wall, cpu_s, len(data), zipped))
        load_after = os.getloadavg()
        count = {}
        for name, path, _ in inputs:
            q = subprocess.run([sys.executable, "-c",
                                "import sys, pyarrow.ipc as i; print(i.open_stream(sys.argv[1]).read_all().num_rows)",
                                path], capture_output=True, text=True, check=True)
            count[name] = int(q.stdout)
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        w = [f"## stacks-otlp next to stacks-pprof (`scripts/bench_otlp.py`)\n",
             f"Measured {stamp} by `scripts/bench_otlp.py`, {REPS} runs per figure, interleaved (medians); "
             f"load average {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} before, "
             f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} after.\n",
             "Inputs: the `cpu` query result of a store of a real recording (`go build -a net/http`, "
             f"`-e profile:uk:999,switch:uk`) replicated in time to {ROWS:,} rows, and the recording's "
             f"symbolized rows replicated to {EVENTS:,} with `--kind all` (CPU samples and off-CPU intervals: "
             "OTLP keeps each row as an event with its time, pprof sums them per stack and labels). Bytes: as "
             "written (pprof gzipped, OTLP plain protobuf) and gzipped (OTLP as `--gzip` sends it).\n",
             "| input | rows | tool | wall s | CPU s | bytes | bytes gzipped | CPU ÷ stacks-pprof |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]
        for name, _, _ in inputs:
            base = statistics.median(r[1] for r in results[(name, "stacks-pprof")])
            for tool, _ in tools:
                rs = results[(name, tool)]
                wall = statistics.median(r[0] for r in rs)
                cpu_s = statistics.median(r[1] for r in rs)
                size, zipped = rs[-1][2], rs[-1][3]
                ratio = f"{cpu_s / base:.2f}×" if tool != "stacks-pprof" and base > 0 else ""
                w.append(f"| {name} | {count[name]:,} | {tool} | {wall:.3f} | {cpu_s:.3f} | {size:,} | {zipped:,} | {ratio} |")
        w.append("")
        med = lambda name, tool, i: statistics.median(r[i] for r in results[(name, tool)])
        for name, _, _ in inputs:
            otlp = med(name, "stacks-otlp", 1) / med(name, "stacks-pprof", 1)
            size = results[(name, "stacks-otlp")][-1][3] / results[(name, "stacks-pprof")][-1][3]
            w.append(f"- {name}: stacks-otlp takes **{otlp:.2f}×** stacks-pprof's CPU time and writes "
                     f"{size:.1f}× its bytes, both gzipped.")
        if BEFORE:
            now_before = [med(n, "stacks-pprof", 1) / med(n, "stacks-pprof (before)", 1) for n, _, _ in inputs]
            w.append("- stacks-pprof on the shared library (stacks-profile) ÷ the build before it: "
                     + ", ".join(f"{r:.2f}×" for r in now_before) + " CPU (same bytes).")
        section = BEGIN + "\n\n" + "\n".join(w) + "\n\n" + END + "\n"
        print(section)
        benchmd.replace_section(OUT, BEGIN, END, section)
    finally:
        if os.environ.get("BENCH_KEEP") or reuse or only_inputs:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
