#!/usr/bin/env python3
# scripts/bench_otlp_listen.py — stacks-otlp's receiver (--listen) under load: the exporter's
# request of a real recording posted again and again, paced, its events kept and its memory
# sampled. Writes its section of BENCHMARKS.md (between markers).
"""Receiver benchmark: the mixed workload recorded for 3 s (CPU samples at 499 Hz, off-CPU
intervals, file IO), symbolized, replicated in time to BENCH_LISTEN_EVENTS rows (default 5,000)
and exported by stacks-otlp --kind all into one request; then stacks-otlp --listen (writing to a
file) takes it from stacks-otlp/tests/load.py at BENCH_LISTEN_RATE events/s (default 20,000) for
BENCH_LISTEN_SECONDS (default 30), and once more as fast as the generator (one Python client,
one connection, waiting for each answer) can send for 10 s. Reported: events sent and stored,
the rate kept, the receiver's CPU time per event and its resident memory over time. Environment:
CARGO_TARGET_DIR (release stacks-otlp), BENCH_TOOLS (stacks-record, -symbolize and -workload,
default the release binaries), BENCH_OUT, BENCH_LISTEN_EVENTS, BENCH_LISTEN_RATE,
BENCH_LISTEN_SECONDS."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchmd

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR") or Path.home() / ".cache/stacks-target")
BIN = TARGET / "release"
TOOLS = Path(os.environ["BENCH_TOOLS"]) if os.environ.get("BENCH_TOOLS") else BIN
OUT = Path(os.environ.get("BENCH_OUT") or ROOT / "BENCHMARKS.md")
EVENTS = int(os.environ.get("BENCH_LISTEN_EVENTS") or 5_000)
RATE = float(os.environ.get("BENCH_LISTEN_RATE") or 20_000)
SECONDS = float(os.environ.get("BENCH_LISTEN_SECONDS") or 30)
LOAD = ROOT / "stacks-otlp/tests/load.py"
BEGIN, END = "<!-- bench-otlp-listen:begin -->", "<!-- bench-otlp-listen:end -->"

REPLICATE = r"""
import sys, pyarrow as pa, pyarrow.ipc as ipc, pyarrow.compute as pc
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = ipc.open_stream(src).read_all()
span = pc.max(t.column('time').cast('int64')).as_py() - pc.min(t.column('time').cast('int64')).as_py() + 1
parts, rows, i = [], 0, 0
while rows < n:
    shifted = pc.add(t.column('time').cast('int64'), i * span).cast(t.schema.field('time').type)
    part = t.set_column(0, t.schema.field('time'), shifted).slice(0, n - rows)
    parts.append(part); rows += part.num_rows; i += 1
with ipc.new_stream(dst, t.schema) as w:
    w.write_table(pa.concat_tables(parts))
"""


def log(msg):
    print(f"bench-otlp-listen: {msg}", file=sys.stderr, flush=True)


def cpu_seconds(pid):
    """utime + stime of process `pid`, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rows_in(path):
    import pyarrow.ipc as ipc
    with open(path, "rb") as f:
        return ipc.open_stream(f).read_all().num_rows


def receive(work, request, rate, seconds, name):
    """One receiver run: the load's JSON, the receiver's CPU s, rows stored, its summary."""
    out = work / f"{name}.arrow"
    err = open(work / f"{name}.err", "w+")
    p = subprocess.Popen([BIN / "stacks-otlp", "--listen", "127.0.0.1:0", "-o", out], stderr=err)
    for _ in range(100):
        err.seek(0)
        line = err.readline()
        if "listening on" in line:
            break
        time.sleep(0.05)
    port = line.split("127.0.0.1:")[1].split(":")[0]
    load = subprocess.run([sys.executable, LOAD, f"http://127.0.0.1:{port}/v1development/profiles",
                           request, str(rate), str(seconds), str(p.pid)],
                          capture_output=True, text=True, check=True)
    cpu = cpu_seconds(p.pid)
    p.terminate()
    benchmd.reap(p, 30)
    err.seek(0)
    summary = err.read().strip().splitlines()[-1]
    return json.loads(load.stdout), cpu, rows_in(out), summary


def main():
    work = Path(tempfile.mkdtemp(prefix="bench-otlp-listen-"))
    try:
        log("recording the mixed workload for 3 s")
        data = work / "data"
        data.mkdir()
        raw, rows, big, request = (work / n for n in ("raw.arrow", "rows.arrow", "big.arrow", "request.otlp"))
        with open(raw, "wb") as f:
            subprocess.run([TOOLS / "stacks-record", "-e", "profile:uk:499,switch:uk,vfs:u", "--",
                            TOOLS / "stacks-workload", "mixed", "--dir", data, "--seconds", "3"],
                           stdout=f, stderr=subprocess.DEVNULL, check=True)
        with open(raw, "rb") as i, open(rows, "wb") as o:
            subprocess.run([TOOLS / "stacks-symbolize"], stdin=i, stdout=o, stderr=subprocess.DEVNULL, check=True)
        subprocess.run([sys.executable, "-c", REPLICATE, rows, big, str(EVENTS)], check=True)
        with open(request, "wb") as o:
            subprocess.run([BIN / "stacks-otlp", "--kind", "all", big], stdout=o, check=True)
        load_avg = os.getloadavg()
        log(f"paced: {RATE:,.0f} events/s for {SECONDS:.0f} s")
        paced = receive(work, request, RATE, SECONDS, "paced")
        log("as fast as the generator sends, 10 s")
        fast = receive(work, request, 1e9, 10, "fast")
        load_after = os.getloadavg()
    finally:
        if not os.environ.get("BENCH_KEEP"):
            shutil.rmtree(work, ignore_errors=True)

    def figures(run):
        load, cpu, stored, summary = run
        mem = [(t, r / 1048576) for t, r in load["memory"]]
        after5 = [r for t, r in mem if t >= 5]
        return {
            "sent": load["events"], "stored": stored, "failed": load["failed"],
            "rate": load["events"] / load["wall"], "wall": load["wall"],
            "cpu_us": cpu / max(load["events"], 1) * 1e6, "cpu": cpu,
            "rss_start": mem[0][1], "rss_min": min(after5 or [0]), "rss_max": max(after5 or [0]),
            "mem": mem, "summary": summary, "per_request": load["events_per_request"],
        }

    p, f = figures(paced), figures(fast)
    n = lambda x: f"{x:,.0f}"
    lines = [BEGIN, "", "## stacks-otlp --listen under load (`scripts/bench_otlp_listen.py`)", ""]
    lines.append(f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `scripts/bench_otlp_listen.py`; "
                 f"load average {' '.join(f'{x:.2f}' for x in load_avg)} before, "
                 f"{' '.join(f'{x:.2f}' for x in load_after)} after (2 cores shared with other work).")
    lines.append("")
    lines.append(f"The exporter's request (`stacks-otlp --kind all`) of a 3 s recording of the mixed workload "
                 f"(CPU samples, off-CPU intervals, file IO) replicated in time to {p['per_request']:,} events, "
                 f"posted again and again by `stacks-otlp/tests/load.py` (Python, one connection, each request "
                 f"waiting for its answer) to `stacks-otlp --listen` writing its stream to a file. No peer: an "
                 f"OpenTelemetry Collector is not installed on this machine.")
    lines.append("")
    lines.append("| run | events sent | events stored | failed | events/s | receiver CPU µs/event | RSS MiB at start | RSS MiB after 5 s, min–max |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---|")
    for name, x in ((f"paced at {n(RATE)}/s, {SECONDS:.0f} s", p), ("as fast as the client sends, 10 s", f)):
        lines.append(f"| {name} | {n(x['sent'])} | {n(x['stored'])} | {x['failed']} | {n(x['rate'])} | "
                     f"{x['cpu_us']:.2f} | {x['rss_start']:.1f} | {x['rss_min']:.1f}–{x['rss_max']:.1f} |")
    lines.append("")
    lines.append(f"- Paced: {n(p['stored'])} of {n(p['sent'])} events stored at {n(p['rate'])} events/s; the receiver "
                 f"used {p['cpu']:.2f} CPU s ({100 * p['cpu'] / p['wall']:.1f}% of one core).")
    every5 = [next((t, r) for t, r in p["mem"] if t >= k) for k in range(0, int(p["mem"][-1][0]) + 1, 5)]
    lines.append("- RSS (MiB) over the paced run, every 5 s: " + ", ".join(f"{t:.0f} s {r:.1f}" for t, r in every5))
    lines.append(f"- The receiver's summary: `{p['summary']}`")
    lines += ["", END]
    benchmd.replace_section(OUT, BEGIN, END, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
