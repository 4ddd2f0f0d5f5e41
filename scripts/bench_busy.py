#!/usr/bin/env python3
# scripts/bench_busy.py — recording a busy host with -a (#31): the IO flood (CPU hogs, a pipe
# ping-pong pair, an fsyncing writer) next to `perf record -e raw_syscalls:* -a -g`, and a
# single-threaded spinner's slowdown under `-a` CPU sampling next to `perf record -a -g`.
# Writes its section of BENCHMARKS.md (between markers). Run through scripts/bench (release
# build, root; perf's tracepoints need tracefs, mounted in a private mount namespace there).
"""Busy-host recording against perf.

Flood: `stacks-workload contention --seconds S` runs while each recorder traces everything
(-a), started first and stopped after the workload; CPU is the recorder's own user+sys time
(wait4 rusage). stacks-record counts every read/write call (rows, plus the events summed in
the kernel while its IO ring was backed up); perf counts its samples (two per system call of
any kind: enter and exit) and the samples it lost. Spinner: `stacks-workload cpu` alone, its
work per wall second bare and under each recorder, interleaved. Environment:
CARGO_TARGET_DIR, BENCH_OUT, BENCH_REPS (default 3; medians), BENCH_SECONDS (default 5).
"""

import json
import os
import re
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
BIN = TARGET / "release"
OUT = Path(os.environ.get("BENCH_OUT") or ROOT / "BENCHMARKS.md")
REPS = int(os.environ.get("BENCH_REPS") or 3)
SECONDS = float(os.environ.get("BENCH_SECONDS") or 5)
REC, WORK = str(BIN / "stacks-record"), str(BIN / "stacks-workload")
BEGIN, END = "<!-- bench-busy:begin -->", "<!-- bench-busy:end -->"


def log(msg):
    print(f"bench-busy: {msg}", file=sys.stderr, flush=True)


def start(argv, scratch, ready):
    """Start a recorder with stderr to a file; wait until `ready` (a stderr substring, or a
    number of seconds)."""
    err = open(os.path.join(scratch, "rec.err"), "w+")
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
    if isinstance(ready, str):
        deadline = time.time() + 30
        while time.time() < deadline:
            err.seek(0)
            if ready in err.read():
                break
            time.sleep(0.05)
    else:
        time.sleep(ready)
    return p, err


def stop(p, err):
    """SIGINT the recorder; its CPU seconds and stderr."""
    p.send_signal(signal.SIGINT)
    cpu = benchmd.reap(p, timeout=120)
    err.seek(0)
    text = err.read()
    err.close()
    return cpu, text


def workload(args, scratch):
    report = os.path.join(scratch, "report.json")
    subprocess.run([WORK, "--report", report] + args, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return json.loads(Path(report).read_text())


def flood(tool, scratch):
    data = os.path.join(scratch, "flood.data")
    argv = {
        "stacks": [REC, "-a", "-e", "vfs:u", "-o", data],
        "perf": ["perf", "record", "-q", "-a", "-g", "-e",
                 "raw_syscalls:sys_enter,raw_syscalls:sys_exit", "-o", data],
    }[tool]
    p, err = start(argv, scratch, "recording" if tool == "stacks" else 2.0)
    r = workload(["contention", "--seconds", str(SECONDS), "--dir", scratch], scratch)
    cpu, text = stop(p, err)
    ping = next(t for t in r["threads"] if t["thread"] == "ping")
    res = {"cpu": cpu, "pingpong": ping["vfs_calls"] / (ping["wall_ns"] / 1e9),
           "bytes": os.path.getsize(data)}
    if tool == "stacks":
        m = re.search(r"lost (\d+) events", text)
        rows = re.search(r"events: [^;]*vfs (\d+)", text)
        agg = re.search(r"(\d+) vfs events aggregated", text)
        if not m or not rows:
            raise SystemExit(f"bench-busy: error: no stacks-record summary:\n{text[-400:]}")
        res["lost"] = int(m.group(1))
        res["rows"] = int(rows.group(1))
        res["events"] = res["rows"] + (int(agg.group(1)) if agg else 0)
    else:
        stats = subprocess.run(["perf", "report", "-i", data, "--stats"], capture_output=True,
                               text=True).stdout
        per_event = stats.split("raw_syscalls:sys_enter stats:", 1)[-1]
        samples = sum(int(x) for x in re.findall(r"SAMPLE events:\s+(\d+)", per_event))
        lost = sum(int(x) for x in re.findall(r"LOST_SAMPLES events:\s+(\d+)",
                                              per_event.split("dummy", 1)[0]))
        res.update(rows=samples, events=samples, lost=lost)
    os.unlink(data)
    return res


def spinner(tool, scratch):
    data = os.path.join(scratch, "spin.data")
    argv = {
        "bare": None,
        "stacks": [REC, "-a", "-e", "profile:uk:99", "-o", data],
        "perf": ["perf", "record", "-q", "-a", "-g", "-F", "99", "-e", "cpu-clock", "-o", data],
    }[tool]
    p = err = None
    if argv:
        p, err = start(argv, scratch, "recording" if tool == "stacks" else 2.0)
    r = workload(["cpu", "--seconds", str(SECONDS)], scratch)
    res = {"rate": (r["heavy_units"] + r["light_units"]) / (r["wall_ns"] / 1e9)}
    if p:
        res["cpu"], _ = stop(p, err)
        os.unlink(data)
    return res


def med(rs, key):
    return statistics.median(r[key] for r in rs)


def main():
    benchmd.preflight("bench-busy", "BPF, perf events", (REC, WORK))
    load0 = Path("/proc/loadavg").read_text().split()[:3]
    fl = {"stacks": [], "perf": []}
    sp = {"bare": [], "stacks": [], "perf": []}
    with tempfile.TemporaryDirectory(prefix="stacks-bench-busy-", dir="/var/tmp") as scratch:
        for rep in range(REPS):
            for tool in fl:
                log(f"flood: {tool} (rep {rep + 1}/{REPS})")
                fl[tool].append(flood(tool, scratch))
            for tool in sp:
                log(f"spinner: {tool} (rep {rep + 1}/{REPS})")
                sp[tool].append(spinner(tool, scratch))
    load1 = Path("/proc/loadavg").read_text().split()[:3]
    cpus = os.cpu_count()
    lines = [BEGIN, "", "## A busy host: an IO flood, and a spinner under `-a` sampling, next to perf",
             ""]
    lines.append(
        f"Measured by `scripts/bench_busy.py` (run by `scripts/bench`), {REPS} runs each, "
        f"medians, on {cpus} CPUs; load average before {' '.join(load0)}, after "
        f"{' '.join(load1)}. **Flood**: `stacks-workload contention --seconds {SECONDS:g}` (two "
        "CPU hogs, a pipe ping-pong pair, a writer that fsyncs) while each recorder traces every "
        "process (`-a`) from before the workload starts to after it ends. *stacks-record* runs "
        "`-e vfs:u` (every read/write-family call, with its user stack, file and latency); "
        "*events* are its rows plus the calls the kernel summed while its IO ring was backed "
        "up (each counted exactly, in rows with `count` > 1). *perf* runs `perf record -a -g -e "
        "raw_syscalls:sys_enter,raw_syscalls:sys_exit` (tracefs mounted in a private mount "
        "namespace): two samples per system call of any kind, each with a user and kernel "
        "stack; its losses are perf's own LOST_SAMPLES counts. CPU is the recorder's own "
        "user+sys time (wait4 rusage), for the whole recording; *ping-pong calls/s* is the "
        "workload's own rate under each.")
    lines.append("")
    lines.append("| recorder | events delivered | lost | CPU s | CPU µs / event | output bytes | "
                 "ping-pong calls/s |")
    lines.append("|" + "---|" * 7)
    for tool, rs in fl.items():
        ev, cpu = med(rs, "events"), med(rs, "cpu")
        lines.append(f"| {tool} | {ev:,.0f} | {med(rs, 'lost'):,.0f} | {cpu:.2f} | "
                     f"{cpu * 1e6 / max(ev, 1):.2f} | {med(rs, 'bytes'):,.0f} | "
                     f"{med(rs, 'pingpong'):,.0f} |")
    s_ev, p_ev = med(fl["stacks"], "events"), med(fl["perf"], "events")
    s_cpu, p_cpu = med(fl["stacks"], "cpu"), med(fl["perf"], "cpu")
    lines.append("")
    lines.append(f"- CPU per delivered event, stacks-record / perf: "
                 f"{(s_cpu / max(s_ev, 1)) / (p_cpu / max(p_ev, 1)):.2f}×; total recorder CPU "
                 f"stacks-record / perf: {s_cpu / p_cpu:.2f}×.")
    bare = med(sp["bare"], "rate")
    lines.append("")
    lines.append(
        f"**Spinner**: `stacks-workload cpu --seconds {SECONDS:g}` (one thread), its units of "
        "work per wall second bare and while a recorder samples every CPU at 99 Hz with kernel "
        "and user stacks: *stacks-record* `-a -e profile:uk:99`, *perf* `perf record -a -g -F "
        "99 -e cpu-clock`. Runs interleaved (bare, stacks, perf).")
    lines.append("")
    lines.append("| recorder | work/s | slowdown | recorder CPU s |")
    lines.append("|---|---|---|---|")
    for tool, rs in sp.items():
        rate = med(rs, "rate")
        cpu = f"{med(rs, 'cpu'):.2f}" if tool != "bare" else "—"
        lines.append(f"| {tool} | {rate:,.0f} | {100 * (1 - rate / bare):+.2f}% | {cpu} |")
    lines += ["", END]
    benchmd.replace_section(OUT, BEGIN, END, "\n".join(lines))
    log(f"wrote {OUT}")


if __name__ == "__main__":
    main()
