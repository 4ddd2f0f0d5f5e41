#!/usr/bin/env python3
# scripts/bench_trace.py — stacks-trace's two formats side by side (#62): a real recording with
# diverse stacks (`stacks-record -a` for BENCH_TRACE_SECONDS while a Rust build runs), symbolized
# once, then converted to Chrome Trace Event JSON and to a native Perfetto trace: each file's
# bytes, and each conversion's wall and CPU time. Writes its section of BENCHMARKS.md (between
# markers). Run through scripts/bench (release build, root).
"""stacks-trace: JSON vs Perfetto, bytes and time, on one real recording.

The recording: `stacks-record -a -e profile:uk:99,switch:uk,wake:k,state:uk:20,block:uk,vfs:u,
rss:u:29 -d SECONDS` while `cargo build` compiles a crate of this workspace into a scratch
target directory (rustc, cc, the linker, cargo's own threads: many processes and distinct
stacks), then `stacks-symbolize`. Each conversion reads that symbolized file and writes to a
file (`-o`); CPU is its user+sys (wait4 rusage), REPS runs each, medians. The Perfetto file is
decoded by the `perfetto` package's bindings (stacks-trace/tests/perfetto_check.py) before its
numbers are kept. Environment: CARGO_TARGET_DIR, BENCH_OUT, BENCH_REPS (default 3),
BENCH_TRACE_SECONDS (default 20), BENCH_TRACE_INPUT (a symbolized stream recorded so already:
converted instead of recording one).
"""

import gzip
import json
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
SECONDS = float(os.environ.get("BENCH_TRACE_SECONDS") or 20)
INPUT = os.environ.get("BENCH_TRACE_INPUT")
EVENTS = "profile:uk:99,switch:uk,wake:k,state:uk:20,block:uk,vfs:u,rss:u:29"
REC, SYM, TRACE = (str(BIN / t) for t in ("stacks-record", "stacks-symbolize", "stacks-trace"))
BEGIN, END = "<!-- bench-trace:begin -->", "<!-- bench-trace:end -->"


def record(tmp):
    """Record the whole machine while a build runs; the symbolized stream's path and rows."""
    build = subprocess.Popen(
        ["cargo", "build", "--offline", "-p", "stacks-stream"],
        cwd=ROOT,
        env={**os.environ, "CARGO_TARGET_DIR": str(tmp / "build-target")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    raw = tmp / "raw.arrow"
    with open(raw, "wb") as out, open(tmp / "record.log", "w") as err:
        r = subprocess.run([REC, "-a", "-e", EVENTS, "-d", f"{SECONDS}s"], stdout=out, stderr=err)
    build.kill()
    build.wait()
    if r.returncode != 0:
        sys.exit(f"bench_trace: error: stacks-record failed: {(tmp / 'record.log').read_text()}")
    sym = tmp / "sym.arrow"
    with open(raw, "rb") as i, open(sym, "wb") as o:
        subprocess.run([SYM], stdin=i, stdout=o, check=True)
    rows = summary(sym)
    return sym, rows


def summary(sym):
    """Rows, threads and distinct stacks of the stream (pyarrow)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    with pa.ipc.open_stream(str(sym)) as r:
        t = r.read_all()
    kinds = dict(zip(*[c.to_pylist() for c in pc.value_counts(t["kind"]).flatten()]))
    return {
        "rows": t.num_rows,
        "threads": len(pc.unique(t["tid"])),
        "processes": len(pc.unique(t["pid"])),
        "kinds": kinds,
    }


def convert(sym, fmt, out):
    """One conversion; (wall s, CPU s)."""
    start = time.monotonic()
    p = subprocess.Popen([TRACE, "-f", fmt, str(sym), "-o", str(out)], stderr=subprocess.PIPE)
    cpu = benchmd.reap(p)
    wall = time.monotonic() - start
    if p.returncode != 0:
        sys.exit(f"bench_trace: error: stacks-trace -f {fmt}: {p.stderr.read().decode()}")
    return wall, cpu


def main():
    benchmd.preflight("bench_trace", "stacks-record -a", [TRACE] if INPUT else [REC, SYM, TRACE])
    load = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="bench-trace-"))
    try:
        if INPUT:
            sym, rows = Path(INPUT), summary(Path(INPUT))
        else:
            sym, rows = record(tmp)
        results = {}
        for fmt, name in (("json", "trace.json"), ("perfetto", "trace.pftrace")):
            runs = [convert(sym, fmt, tmp / name) for _ in range(REPS)]
            results[fmt] = {
                "bytes": (tmp / name).stat().st_size,
                "wall": statistics.median(r[0] for r in runs),
                "cpu": statistics.median(r[1] for r in runs),
            }
        check = subprocess.run(
            [sys.executable, str(ROOT / "stacks-trace/tests/perfetto_check.py"), str(tmp / "trace.pftrace")],
            capture_output=True,
            text=True,
        )
        if check.returncode != 0:
            sys.exit(f"bench_trace: error: perfetto_check.py: {check.stderr}")
        decoded = json.loads(check.stdout)
        if decoded["errors"]:
            sys.exit(f"bench_trace: error: the Perfetto trace does not decode cleanly: {decoded['errors']}")
        gz = {}
        for name in ("trace.json", "trace.pftrace"):
            with open(tmp / name, "rb") as f:
                gz[name] = len(gzip.compress(f.read(), 6))
        write(rows, results, decoded, gz, sym.stat().st_size, (load, os.getloadavg()))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write(rows, r, decoded, gz, sym_bytes, loads):
    j, p = r["json"], r["perfetto"]
    mb = lambda b: f"{b / 1e6:.2f} MB"  # noqa: E731
    kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(rows["kinds"].items(), key=lambda kv: -kv[1]))
    interned = decoded["interned"]
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        BEGIN,
        "## stacks-trace: Perfetto protobuf next to Chrome JSON (`scripts/bench_trace.py`)",
        "",
        f"Measured {when}, {REPS} runs each (medians). One recording{' (made beforehand, given as `BENCH_TRACE_INPUT`)' if INPUT else ''}: `stacks-record -a -e {EVENTS}`",
        f"for {SECONDS:g} s while `cargo build -p stacks-stream` compiled into a scratch target directory,",
        f"symbolized ({mb(sym_bytes)} of Arrow): {rows['rows']:,} rows ({kinds}) of {rows['threads']:,} threads",
        f"in {rows['processes']:,} processes. Each conversion reads the symbolized file and writes `-o FILE`;",
        "*CPU* is stacks-trace's user+sys. The Perfetto trace decodes cleanly with the `perfetto` package's",
        f"bindings: {decoded['packets']:,} packets; interned once: {interned['callstacks']:,} stacks,",
        f"{interned['frames']:,} frames, {interned['function_names']:,} function names, {interned['mappings']:,} mappings.",
        "Load average before {}, after {} (other work shared the 2 CPUs).".format(
            " ".join(f"{x:.2f}" for x in loads[0]), " ".join(f"{x:.2f}" for x in loads[1])),
        "",
        "| format | bytes | bytes per row | vs JSON | wall s | CPU s | CPU vs JSON |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, x in (("JSON (`-f json`)", j), ("Perfetto (`-f perfetto`)", p)):
        lines.append(
            f"| {name} | {mb(x['bytes'])} | {x['bytes'] / max(rows['rows'], 1):,.0f} | "
            f"{x['bytes'] / j['bytes']:.3f}× | {x['wall']:.2f} | {x['cpu']:.2f} | {x['cpu'] / max(j['cpu'], 1e-9):.2f}× |"
        )
    for name, f in (("JSON", "trace.json"), ("Perfetto", "trace.pftrace")):
        z = gz[f]
        lines.append(
            f"| {name}, gzip -6 (for reference) | {mb(z)} | {z / max(rows['rows'], 1):,.0f} | {z / j['bytes']:.3f}× | | | |"
        )
    lines.append(END)
    benchmd.replace_section(OUT, BEGIN, END, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
