#!/usr/bin/env python3
# scripts/bench_spans.py — the cost of span labels (#16): nanoseconds per `tracing` span enter
# and exit with no subscriber, a plain registry and the registry with tracing-stacks, with and
# without stacks-record attached (labels only; `-e span`, whose USDT probes trap on every enter
# and exit, next to bpftrace on the same probes), and the recorder's cost per labelled event
# with span reading on and off. Writes its section of BENCHMARKS.md (between markers). Run
# through scripts/bench (release build, root).
"""Cost of span labels: the writer per span enter+exit, the recorder per event.

Writer: `stacks-workload span-bench --layer L --pairs N` times N enters and exits of one span
(its own clock, ns per pair). Recorder: `span-bench --writes W` makes W one-byte writes to
/dev/null inside a span under `stacks-record -e vfs:u`, with span reading on and `--no-spans`;
CPU is the recorder's and the workload's user+sys together (wait4 rusage), less the workload
alone, over the writes. The workload sleeps 300 ms first, so a tracer has attached to it
(stacks-record attaches the span probes once it has seen the exec). Environment: CARGO_TARGET_DIR, BENCH_OUT, BENCH_REPS (default 3;
medians), BENCH_PAIRS (default 10,000,000), BENCH_WRITES (default 500,000).
"""

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
PAIRS = int(os.environ.get("BENCH_PAIRS") or 10_000_000)
# Under a uprobe on every enter and exit, fewer pairs take long enough.
TRAPPED_PAIRS = max(PAIRS // 50, 1000)
WRITES = int(os.environ.get("BENCH_WRITES") or 500_000)
REC, WORK = str(BIN / "stacks-record"), str(BIN / "stacks-workload")
BEGIN, END = "<!-- bench-spans:begin -->", "<!-- bench-spans:end -->"


STATS = Path("/proc/sys/kernel/bpf_stats_enabled")


def vfs_exit_ns(tmp):
    """ns per run of the `vfs_exit` program in the last recorder summary (kernel BPF stats)."""
    runs, ns = benchmd.bpf_runs((tmp / "stderr.log").read_text(), "vfs_exit")
    if runs == 0:
        sys.exit("bench_spans: error: no vfs_exit run time in the recorder's summary")
    return ns


def run(cmd, tmp):
    """Run `cmd`; (its CPU seconds with its children's, the workload's JSON report)."""
    report = tmp / "report.json"
    report.unlink(missing_ok=True)
    with open(tmp / "stderr.log", "w") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=tmp)
        cpu = benchmd.reap(p)
    if p.returncode != 0:
        sys.exit(f"bench_spans: error: {' '.join(cmd)} failed:\n{(tmp / 'stderr.log').read_text()}")
    return cpu, json.loads(report.read_text())


def bench(tmp, layer, pairs, writes=0):
    return [WORK, "--report", str(tmp / "report.json"), "span-bench", "--layer", layer,
            "--pairs", str(pairs), "--writes", str(writes), "--delay-ms", "300"]


def writer(tmp):
    """(setup, subscriber, ns per pair) rows."""
    rows = []
    for name, layer, wrap, pairs in [
        ("no subscriber", "none", [], PAIRS),
        ("`registry()`", "registry", [], PAIRS),
        ("`registry().with(tracing_stacks::layer())`", "stacks", [], PAIRS),
        ("the layer, stacks-record attached (`-e profile:u:99`: labels read)", "stacks",
         [REC, "-e", "profile:u:99", "-o", "/dev/null", "--"], PAIRS),
        ("the layer, stacks-record `-e span:u` (a uprobe on every enter and exit)", "stacks",
         [REC, "-e", "span:u", "-o", "/dev/null", "--"], TRAPPED_PAIRS),
    ]:
        ns = statistics.median(run(wrap + bench(tmp, layer, pairs), tmp)[1]["ns_per_pair"]
                               for _ in range(REPS))
        rows.append((name, layer, ns))
        print(f"writer {name:70} {ns:9.1f} ns/pair", file=sys.stderr)
    if shutil.which("bpftrace"):
        # The same work as `-e span:u`: the user stack at each enter, a count at each exit.
        probes = (f"usdt:{WORK}:stacks_tracing:enter {{ @[ustack] = count(); }} "
                  f"usdt:{WORK}:stacks_tracing:exit {{ @exits = count(); }}")
        cmd = ["bpftrace", "-q", "-e", probes, "-c", " ".join(bench(tmp, "stacks", TRAPPED_PAIRS))]
        ns = statistics.median(run(cmd, tmp)[1]["ns_per_pair"] for _ in range(REPS))
        rows.append(("the layer, bpftrace on the same USDT probes (user stack counted at enter)",
                     "stacks", ns))
        print(f"writer bpftrace {ns:9.1f} ns/pair", file=sys.stderr)
    return rows


def recorder(tmp):
    """(name, CPU s, ns per event) rows and the workload's CPU alone."""
    wl = bench(tmp, "stacks", 0, WRITES)
    base = statistics.median(run(wl, tmp)[0] for _ in range(REPS))
    modes = [("span reading on", []), ("`--no-spans`", ["--no-spans"])]
    cmds = [[REC, "-e", "vfs:u", *extra, "-o", "/dev/null", "--", *wl] for _, extra in modes]
    # The modes alternate run by run, so a drift of the machine weighs on both alike.
    cpu = [[], []]
    for _ in range(REPS):
        for i, cmd in enumerate(cmds):
            cpu[i].append(run(cmd, tmp)[0])
    # The BPF program's own time per event, from the kernel's counters (which cost a little
    # themselves: measured in separate runs).
    prog = [[], []]
    before = STATS.read_text()
    STATS.write_text("1")
    try:
        for _ in range(REPS):
            for i, cmd in enumerate(cmds):
                run(cmd, tmp)
                prog[i].append(vfs_exit_ns(tmp))
    finally:
        STATS.write_text(before)
    rows = []
    for i, (name, _) in enumerate(modes):
        c, p = statistics.median(cpu[i]), statistics.median(prog[i])
        rows.append((name, c, (c - base) / WRITES * 1e9, p))
        print(f"recorder {name:20} {c:6.2f} s {(c - base) / WRITES * 1e9:7.0f} ns/event "
              f"vfs_exit {p:.0f} ns", file=sys.stderr)
    return base, rows


def main():
    benchmd.preflight("bench_spans", "BPF", [REC, WORK])
    with tempfile.TemporaryDirectory(prefix="bench-spans-") as t:
        tmp = Path(t)
        w = writer(tmp)
        base, r = recorder(tmp)
    write(w, base, r)


def write(w, base, r):
    when = time.strftime("%Y-%m-%d")
    registry = next(ns for _, layer, ns in w if layer == "registry")
    off = next(per for name, _, per, _ in r if "no-spans" in name)
    off_prog = next(prog for name, _, _, prog in r if "no-spans" in name)
    lines = [
        BEGIN,
        "## Span labels: the writer per span, the recorder per event (`scripts/bench_spans.py`)",
        "",
        f"Measured {when}, {REPS} runs each (medians). *Writer*: `stacks-workload span-bench`",
        f"enters and leaves one `tracing` span {PAIRS:,} times ({TRAPPED_PAIRS:,} under a uprobe)",
        "and times it with its own clock; the ratio is against a plain `tracing_subscriber::registry()`.",
        "",
        "| subscriber and tracer | ns per enter+exit | vs registry |",
        "|---|---|---|",
    ]
    for name, _, ns in w:
        lines.append(f"| {name} | {ns:.1f} | {ns / registry:.2f}× |")
    lines += [
        "",
        f"*Recorder*: {WRITES:,} one-byte writes to /dev/null inside a span, recorded with",
        "`stacks-record -e vfs:u` (a row per write, user stack, span read in BPF); CPU is the",
        "recorder's and the workload's together, *per event* that less the workload alone",
        f"({base:.2f} s), over the writes; *vfs_exit* is the BPF program that builds each row",
        "(span read included), per run, from the kernel's counters (`kernel.bpf_stats_enabled`, in",
        "separate runs); ratios are against `--no-spans`.",
        "",
        "| recorder | CPU s | per event | vs `--no-spans` | vfs_exit per run | vs `--no-spans` |",
        "|---|---|---|---|---|---|",
    ]
    for name, cpu, per, prog in r:
        lines.append(f"| {name} | {cpu:.2f} | {per:.0f} ns | {per / off:.2f}× | {prog:.0f} ns | "
                     f"{prog / off_prog:.2f}× |")
    lines.append(END)
    benchmd.replace_section(OUT, BEGIN, END, "\n".join(lines))


if __name__ == "__main__":
    main()
