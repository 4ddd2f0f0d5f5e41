#!/usr/bin/env python3
# scripts/bench_soak.py — memory over a long system-wide recording with process churn (#31):
# `stacks-record -a -e profile:u:99,switch:u,rss:u:29 --ringbuf-mb 8 | stacks-symbolize |
# stacks-pack --max-age 60 DIR` (the stages as stacks-agent runs them) next to
# `stacks-workload churn` (short-lived processes and threads, a CPU burner), each stage's
# VmRSS sampled from /proc every BENCH_SOAK_INTERVAL seconds. Writes its section of
# BENCHMARKS.md (between markers) and the samples as CSV. Run through scripts/bench
# (BENCH_ONLY=soak; release build, root).
"""RSS over time of the three pipeline stages in a soak with process churn.

Environment: CARGO_TARGET_DIR, BENCH_OUT, BENCH_SOAK_SECONDS (default 3600),
BENCH_SOAK_INTERVAL (default 10), BENCH_SOAK_SPAWNERS (default 2: churn's process spawners),
BENCH_SOAK_CSV (where the samples go; default soak-rss.csv in the scratch directory, which is
removed unless BENCH_KEEP is set), BENCH_BEFORE (a directory holding another build's
stacks-record, stacks-symbolize and stacks-pack to measure instead; the section is then printed, not written),
BENCH_SOAK_BEFORE_CSV (the CSV of such a run: its 2-minute and last RSS are shown next to
this run's).
"""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchmd

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR") or Path.home() / ".cache/stacks-target")
BIN = TARGET / "release"
STAGE_BIN = Path(os.environ.get("BENCH_BEFORE") or BIN)
OUT = Path(os.environ.get("BENCH_OUT") or ROOT / "BENCHMARKS.md")
SECONDS = float(os.environ.get("BENCH_SOAK_SECONDS") or 3600)
INTERVAL = float(os.environ.get("BENCH_SOAK_INTERVAL") or 10)
SPAWNERS = int(os.environ.get("BENCH_SOAK_SPAWNERS") or 2)
EVENTS = "profile:u:99,switch:u,rss:u:29"
# The recorder's rings as stacks-agent sizes them (its `ringbuf_mb` default): the stages are
# measured as the always-on agent runs them.
RINGBUF_MB = "8"
STAGES = ["stacks-record", "stacks-symbolize", "stacks-pack"]
BEGIN, END = "<!-- bench-soak:begin -->", "<!-- bench-soak:end -->"
# The early point each stage's final RSS is compared with (the target: end <= +15%).
EARLY = 120.0


def log(msg):
    print(f"bench-soak: {msg}", file=sys.stderr, flush=True)


def rss_kib(pid):
    """(VmRSS, RssAnon) of `pid` in KiB, None once it is gone."""
    got = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key = line.split(":", 1)[0]
                if key in ("VmRSS", "RssAnon"):
                    got[key] = int(line.split()[1])
    except OSError:
        return None
    if len(got) < 2:
        return None
    return got["VmRSS"], got["RssAnon"]


def peak_kib(pid):
    """VmHWM of `pid` in KiB (its peak RSS since the last `reset_peak`), None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def reset_peak(pid):
    """Start `pid`'s VmHWM over from its current RSS (proc(5): clear_refs, value 5)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def start_pipeline(scratch):
    store = Path(scratch) / "store"
    err = open(Path(scratch) / "stderr.log", "w")
    rec = subprocess.Popen(
        [str(STAGE_BIN / "stacks-record"), "-a", "-e", EVENTS, "--ringbuf-mb", RINGBUF_MB],
        stdout=subprocess.PIPE, stderr=err,
    )
    sym = subprocess.Popen(
        [str(STAGE_BIN / "stacks-symbolize")], stdin=rec.stdout, stdout=subprocess.PIPE, stderr=err,
    )
    rec.stdout.close()
    pack = subprocess.Popen(
        [str(STAGE_BIN / "stacks-pack"), "--max-age", "60", str(store)], stdin=sym.stdout, stderr=err,
    )
    sym.stdout.close()
    return [rec, sym, pack], store


def sample_loop(procs, churn, seconds):
    """[(elapsed s, [RSS KiB per stage])] every INTERVAL s until `seconds` have passed, and
    each whole minute's exact peak per stage ({minute: [VmHWM KiB per stage]}): a sample every
    INTERVAL s misses the peaks that last a second (stacks-pack's row groups), so a minute's
    peak is read from the kernel's high-water mark, started over at each minute."""
    samples, minute_peaks, t0 = [], {}, time.monotonic()
    for p in procs:
        reset_peak(p.pid)
    nxt, minute = t0, 0
    while True:
        if time.monotonic() - t0 >= (minute + 1) * 60:
            peaks = [peak_kib(p.pid) for p in procs]
            if all(k is not None for k in peaks):
                minute_peaks[minute] = peaks
            for p in procs:
                reset_peak(p.pid)
            minute += 1
        if time.monotonic() >= nxt:
            now = time.monotonic() - t0
            both = [rss_kib(p.pid) for p in procs]
            if any(r is None for r in both):
                sys.exit(f"bench-soak: error: a stage exited early (codes {[p.poll() for p in procs]})")
            row = [r[0] for r in both]
            samples.append((now, row, [r[1] for r in both]))
            if len(samples) % max(1, int(300 / INTERVAL)) == 1:
                log(f"{now:7.0f} s  " + "  ".join(f"{n} {r / 1024:.0f} MiB" for n, r in zip(STAGES, row)))
            if now >= seconds or churn.poll() is not None:
                return samples, minute_peaks
            nxt += INTERVAL
        time.sleep(max(0.0, min(nxt, t0 + (minute + 1) * 60) - time.monotonic()))


def at(samples, t):
    """The sample nearest to `t` seconds."""
    return min(samples, key=lambda s: abs(s[0] - t))


def read_csv(path):
    """Samples of an earlier run's CSV: [(elapsed s, [RSS KiB per stage])]."""
    with open(path) as f:
        rows = list(csv.reader(f))[1:]
    return [(float(r[0]), [int(x) for x in r[1:4]], [int(x) for x in r[4:7]]) for r in rows]


def section(samples, minute_peaks, churn_report, files, seconds, started, load_before,
            load_after):
    marks = [EARLY] + [m for m in (600, 1200, 1800, 2400, 3000) if m < samples[-1][0] - 30]
    marks.append(samples[-1][0])
    rows = [at(samples, m) for m in marks]
    header = "| stage | " + " | ".join(f"{r[0] / 60:.0f} min" for r in rows) + " | end ÷ 2 min | peak |"
    lines = [header, "|---|" + "---:|" * (len(rows) + 2)]
    for i, name in enumerate(STAGES):
        peak = max(s[1][i] for s in samples)
        early, last = rows[0][1][i], rows[-1][1][i]
        cells = " | ".join(f"{r[1][i] / 1024:.0f} ({r[2][i] / 1024:.0f})" for r in rows)
        lines.append(f"| {name} | {cells} | {last / early:.2f} | {peak / 1024:.0f} |")
    # #44's target is on the three together, at every sample.
    total = [sum(s[1]) for s in samples]
    cells = " | ".join(f"{sum(r[1]) / 1024:.0f}" for r in rows)
    lines.append(
        f"| together | {cells} | {sum(rows[-1][1]) / sum(rows[0][1]):.2f} | {max(total) / 1024:.0f} |"
    )
    # What peers state for their agents' memory, next to ours (MiB and decimal MB both: the
    # peers state MB).
    mid = sorted(total)[len(total) // 2]
    anchors = [
        "",
        "Next to what peers state for their agents: parca-agent under 200 MB, the OpenTelemetry"
        " eBPF profiler 250 MB. The three stages together here: median"
        f" {mid / 1024:.0f} MiB ({mid * 1024 / 1e6:.0f} MB), peak {max(total) / 1024:.0f} MiB"
        f" ({max(total) * 1024 / 1e6:.0f} MB); samples above 300 MB:"
        f" {sum(t * 1024 > 300e6 for t in total)} of {len(total)}.",
    ]
    windows = list(range(0, int(samples[-1][0]) - 150, 300))
    medians = [
        "",
        "Medians of each 5-minute window (RSS, MiB): a sample is a moment of a cycle (dictionaries"
        " filling and starting over, pairs rotating), so these show the level better:",
        "",
        "| stage | " + " | ".join(f"{w // 60}-{w // 60 + 5}" for w in windows) + " |",
        "|---|" + "---:|" * len(windows),
    ]
    for i, name in enumerate(STAGES):
        cells = []
        for w in windows:
            v = sorted(x[1][i] for x in samples if w <= x[0] < w + 300)
            cells.append(f"{v[len(v) // 2] / 1024:.0f}" if v else "")
        medians.append(f"| {name} | " + " | ".join(cells) + " |")
    # The target compares two moments of a sawtooth (pairs rotating, dictionaries starting
    # over, row groups written); the peaks of whole minutes compare its tops instead, read
    # from each stage's high-water mark (VmHWM), started over every minute.
    last_minute = max(minute_peaks, default=0)
    peaks = [
        "",
        "Peaks of a whole minute (RSS, MiB), each stage's exact peak (its VmHWM, started over"
        " at each minute through /proc/PID/clear_refs; samples every"
        f" {INTERVAL:.0f} s miss peaks that last a second): the fifth minute's against the last"
        " one's (#44's target: at most 1.05), and the range of every minute's peak after the"
        " fifth:",
        "",
        f"| stage | 4-5 min | {last_minute}-{last_minute + 1} min | last ÷ fifth |"
        " minutes 5-end: lowest peak | highest peak |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for i, name in enumerate(STAGES):
        fifth = minute_peaks.get(4, [0] * len(STAGES))[i]
        final = minute_peaks.get(last_minute, [0] * len(STAGES))[i]
        later = [v[i] for m, v in minute_peaks.items() if m >= 5]
        ratio = f"{final / fifth:.2f}" if fifth else ""
        low = f"{min(later) / 1024:.0f}" if later else ""
        high = f"{max(later) / 1024:.0f}" if later else ""
        peaks.append(
            f"| {name} | {fifth / 1024:.0f} | {final / 1024:.0f} | {ratio} | {low} | {high} |"
        )
    # The stages' peaks need not fall at one moment: their sum bounds the three together.
    sums = {m: sum(v) for m, v in minute_peaks.items()}
    if sums:
        worst = max(sums.values())
        peaks += [
            "",
            "The three stages' minute peaks added up (at least the three together's peak in that"
            f" minute): at most {worst / 1024:.0f} MiB ({worst * 1024 / 1e6:.0f} MB) in any"
            f" minute; minutes over 300 MB: {sum(v * 1024 > 300e6 for v in sums.values())} of"
            f" {len(sums)}.",
        ]
    before = []
    if os.environ.get("BENCH_SOAK_BEFORE_CSV"):
        old = read_csv(os.environ["BENCH_SOAK_BEFORE_CSV"])
        e, l = at(old, EARLY), old[-1]
        before = [
            "",
            f"Before (the build before #31's memory work, same script and workload, {l[0] / 60:.0f}"
            " minutes):",
            "",
            f"| stage | 2 min | {l[0] / 60:.0f} min | end ÷ 2 min |",
            "|---|---:|---:|---:|",
        ] + [
            f"| {name} | {e[1][i] / 1024:.0f} | {l[1][i] / 1024:.0f} | {l[1][i] / e[1][i]:.2f} |"
            for i, name in enumerate(STAGES)
        ]
    procs = churn_report.get("processes", 0)
    return "\n".join([
        BEGIN,
        "## Memory over a soak with process churn (`scripts/bench_soak.py`)",
        "",
        f"Measured {started} by `scripts/bench_soak.py` (`BENCH_ONLY=soak scripts/bench`,"
        f" `BENCH_SOAK_SECONDS` sets the duration), release build, {os.cpu_count()} cores;"
        f" load average {load_before} before, {load_after} after.",
        "",
        f"`stacks-record -a -e {EVENTS} --ringbuf-mb {RINGBUF_MB} | stacks-symbolize | stacks-pack"
        f" --max-age 60 DIR` (the rings as stacks-agent sizes them) for"
        f" {seconds / 60:.0f} minutes next to `stacks-workload churn --spawners {SPAWNERS}`:"
        f" {procs:,} short-lived `/bin/sh` processes (each runs `/bin/true` and execs `cat`, so"
        f" about {3 * procs / seconds:,.0f} new pids a second), {churn_report.get('threads', 0):,}"
        " short-lived threads and a CPU burner, plus whatever else ran on the host;"
        f" {files} file pairs written. VmRSS of each stage in MiB, sampled every {INTERVAL:.0f} s"
        " (the whole series: `BENCH_SOAK_CSV`), in parentheses its anonymous part (RssAnon:"
        " heap and the symbolizers' parsed debug information; the rest is mapped files, in"
        " stacks-symbolize the binaries it reads symbols from, so it follows which programs the"
        " host runs). The targets (#44): each stage's minute peak at the end at most 1.05 times"
        " its peak in the fifth minute, and the three together at most 300 MB at every sample"
        " (`together`, whose peak is the largest sum of one sample's three).",
        "",
        *lines,
        *anchors,
        *medians,
        *peaks,
        *before,
        END,
    ])


def main():
    tools = [STAGE_BIN / s for s in STAGES] + [BIN / "stacks-workload"]
    benchmd.preflight("bench-soak", "stacks-record -a", [str(t) for t in tools])
    scratch = tempfile.mkdtemp(prefix="bench-soak-")
    try:
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
        procs, store = start_pipeline(scratch)
        time.sleep(2)
        report = Path(scratch) / "churn.json"
        churn = subprocess.Popen(
            [str(BIN / "stacks-workload"), "--report", str(report), "churn", "--seconds",
             str(SECONDS), "--spawners", str(SPAWNERS)],
            stdout=subprocess.DEVNULL,
        )
        log(f"recording {SECONDS:.0f} s with churn; scratch {scratch}")
        samples, minute_peaks = sample_loop(procs, churn, SECONDS + 30)
        churn.wait()
        procs[0].send_signal(signal.SIGINT)
        for p in procs:
            p.wait(timeout=300)
        codes = [p.returncode for p in procs]
        for line in (Path(scratch) / "stderr.log").read_text().splitlines()[-12:]:
            log(f"| {line}")
        if codes != [0, 0, 0]:
            sys.exit(f"bench-soak: error: exit codes {codes}; see {scratch}/stderr.log")
        churn_report = json.loads(report.read_text()) if report.exists() else {}
        files = len(list(store.rglob("*.samples.parquet")))
        csv_path = Path(os.environ.get("BENCH_SOAK_CSV") or Path(scratch) / "soak-rss.csv")
        with open(csv_path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["seconds"] + [f"{s}_rss_kib" for s in STAGES]
                       + [f"{s}_anon_kib" for s in STAGES])
            for t, row, anon in samples:
                w.writerow([f"{t:.1f}"] + row + anon)
        with open(csv_path.with_suffix(".peaks.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["minute"] + [f"{s}_peak_kib" for s in STAGES])
            for m, row in sorted(minute_peaks.items()):
                w.writerow([m] + row)
        log(f"samples in {csv_path}")
        load_after = " ".join(f"{x:.2f}" for x in os.getloadavg())
        text = section(samples, minute_peaks, churn_report, files, samples[-1][0], started,
                       load_before, load_after)
        print(text)
        if not os.environ.get("BENCH_BEFORE"):
            benchmd.replace_section(OUT, BEGIN, END, text)
    finally:
        if not os.environ.get("BENCH_KEEP"):
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
