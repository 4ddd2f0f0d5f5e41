#!/usr/bin/env python3
# scripts/bench_unwind.py — user stacks without frame pointers: `stacks-record -e profile:d:HZ`
# (CFI unwinding of a copied user stack) next to `perf record --call-graph dwarf,16384` on the
# same workload (the chain-nofp fixture, main → a_fn → b_fn → c_fn → leaf) at 99 and 999 Hz:
# workload slowdown, the tools' CPU and bytes per sample, and the share of complete stacks;
# then off-CPU stacks: `-e switch:d` against `switch:u` and perf's dwarf callchains on
# sched_switch (CPU and bytes per row, the BPF programs' time per run).
# Writes its section of BENCHMARKS.md (between markers). Run through scripts/bench (release
# build, root).
"""DWARF unwinding of user stacks: stacks-record `d` stacks against perf's.

The workload is tests/fixtures/unwind/chain-nofp (clang -O2 -fomit-frame-pointer), built into a
temporary directory by tests/fixtures/unwind/build.sh; it burns one CPU for BENCH_SECONDS and
prints `calls N`, the work done. It is started held (a shell stops itself before exec'ing it),
the tool attaches with `-p PID` and, once it is recording (stacks-record's `recording` line;
perf record started with `-D -1` and enabled through `--control`, which acks), the workload is
released; both tools stop when it exits (SIGINT otherwise). Each run is one of: the workload
alone, under stacks-record, under perf record, in turn (the order rotating run by run). CPU is
each process's user+sys from wait4; `perf script` (where perf unwinds) and `stacks-symbolize`
are timed on each run's recording. The BPF program's time per sample comes from the kernel's
counters (kernel.bpf_stats_enabled) in separate runs. Environment: CARGO_TARGET_DIR, BENCH_OUT,
BENCH_REPS (default 3; medians), BENCH_SECONDS (default 5).
"""

import os
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import benchmd

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR") or Path.home() / ".cache/stacks-target")
BIN = TARGET / "release"
OUT = Path(os.environ.get("BENCH_OUT") or ROOT / "BENCHMARKS.md")
REPS = int(os.environ.get("BENCH_REPS") or 3)
SECONDS = float(os.environ.get("BENCH_SECONDS") or 5)
REC, SYM = str(BIN / "stacks-record"), str(BIN / "stacks-symbolize")
WORK = str(BIN / "stacks-workload")
NAPS = 2000  # 1 ms sleeps of the `switch` part (each an off-CPU interval with a user stack)
BUILD = ROOT / "tests/fixtures/unwind/build.sh"
BEGIN, END = "<!-- bench-unwind:begin -->", "<!-- bench-unwind:end -->"
RATES = [99, 999]
USTACK = 16384  # bytes of user stack copied per sample, both tools (stacks-record's default)
CHAIN = {"main", "a_fn", "b_fn", "c_fn", "leaf"}
STATS = Path("/proc/sys/kernel/bpf_stats_enabled")
READY_TIMEOUT = 60  # seconds for a tool to start recording
GRACE = 5  # seconds for a tool to stop by itself after the workload exits, before SIGINT

SUMMARY = re.compile(r"stacks-record: \d+ rows: (\d+) samples from .*?; lost (\d+) events")
DSTACKS = re.compile(r"stacks-record: d stacks: (\d+) unwound, (\d+) by CFI to the root, "
                     r"(\d+) continued by frame pointers, (\d+) by frame pointers only, "
                     r"(\d+) truncated")


def log(msg):
    print(f"bench_unwind: {msg}", file=sys.stderr, flush=True)


def fail(msg):
    sys.exit(f"bench_unwind: error: {msg}")


def tail(path, n=400):
    return Path(path).read_text(errors="replace")[-n:].strip() if Path(path).exists() else ""


def wait_exit(p, grace, timeout=120):
    """Reap the Popen `p` (CPU seconds, wait4 rusage): it has `grace` seconds to exit by
    itself, then gets SIGINT (and SIGKILL after `timeout` more)."""
    deadline = time.time() + grace
    while time.time() < deadline:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            return ru.ru_utime + ru.ru_stime
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    return benchmd.reap(p, timeout)


def held_workload(chain, tmp):
    """chain-nofp SECONDS started stopped before its exec; (Popen, its stdout file)."""
    calls = tmp / "calls.txt"
    with open(calls, "w") as out:
        p = subprocess.Popen(["sh", "-c", 'kill -STOP $$; exec "$0" "$@"', chain, f"{SECONDS:g}"],
                             stdout=out, stderr=subprocess.DEVNULL)
    _, status = os.waitpid(p.pid, os.WUNTRACED)
    if not os.WIFSTOPPED(status):
        fail("the held workload did not stop before its exec")
    return p, calls


def release(work, calls):
    """Let the held workload run to its end; the `calls` it printed."""
    os.kill(work.pid, signal.SIGCONT)
    benchmd.reap(work, SECONDS + 120)
    text = calls.read_text()
    m = re.search(r"calls (\d+)", text)
    if work.returncode != 0 or not m:
        fail(f"chain-nofp failed (status {work.returncode}): {text.strip()!r}")
    return int(m.group(1))


def wait_recording(tool, err, what):
    """Until stacks-record's stderr `err` says it is recording."""
    deadline = time.time() + READY_TIMEOUT
    while "Ctrl-C stops" not in err.read_text(errors="replace"):
        if tool.poll() is not None:
            fail(f"{what} exited before recording: {tail(err)}")
        if time.time() > deadline:
            tool.kill()
            fail(f"{what} did not start recording in {READY_TIMEOUT} s: {tail(err)}")
        time.sleep(0.02)


def perf_enable(tool, ctl, ack, err):
    """Enable perf record's events through its control FIFO; return once it has acked."""
    # O_RDWR: opening a FIFO so never blocks, whether perf has opened its end or not.
    cfd, afd = os.open(ctl, os.O_RDWR), os.open(ack, os.O_RDWR)
    try:
        os.write(cfd, b"enable\n")
        deadline, got = time.time() + READY_TIMEOUT, b""
        while b"ack" not in got:
            if tool.poll() is not None:
                fail(f"perf record exited before recording: {tail(err)}")
            if time.time() > deadline:
                tool.kill()
                fail(f"perf record did not ack `enable` in {READY_TIMEOUT} s: {tail(err)}")
            if select.select([afd], [], [], 0.1)[0]:
                got += os.read(afd, 64)
    finally:
        os.close(cfd)
        os.close(afd)


def timed(argv, stdout, err):
    """Run `argv` with stdout to the file `stdout`; its CPU seconds."""
    with open(stdout, "wb") as out, open(err, "w") as e:
        p = subprocess.Popen(argv, stdout=out, stderr=e)
        cpu = benchmd.reap(p, 600)
    if p.returncode != 0:
        fail(f"{' '.join(argv)} failed (status {p.returncode}): {tail(err)}")
    return cpu


def stacks_complete(path):
    """(profile rows, those whose symbolized stack holds the whole chain) in a symbolized stream."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    with open(path, "rb") as f:
        r = ipc.open_stream(f)
        t = pa.Table.from_batches(list(r), schema=r.schema)
    if "stack" not in t.column_names:
        fail(f"no `stack` column in stacks-symbolize's output {path}")
    rows = complete = 0
    for kind, stack in zip(t.column("kind").to_pylist(), t.column("stack").to_pylist()):
        if kind != "profile":
            continue
        rows += 1
        if CHAIN <= {f["function"] for f in stack or []}:
            complete += 1
    return rows, complete


def perf_complete(path):
    """(samples, those whose stack holds the whole chain) in `perf script -F comm,tid,ip,sym`:
    a sample is a header line (comm, tid) followed by one indented line per frame."""
    samples, complete, syms = 0, 0, None
    with open(path, errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            if not line[0].isspace():
                if syms is not None and CHAIN <= syms:
                    complete += 1
                samples, syms = samples + 1, set()
            elif syms is not None:
                parts = line.split(None, 1)
                if len(parts) == 2:
                    syms.add(parts[1].strip().removesuffix("(inlined)").strip())
    if syms is not None and CHAIN <= syms:
        complete += 1
    return samples, complete


def run_alone(chain, tmp):
    work, calls = held_workload(chain, tmp)
    return {"calls": release(work, calls)}


def run_stacks(chain, tmp, hz, post=True):
    raw, sym, err = tmp / "raw.arrow", tmp / "sym.arrow", tmp / "record.err"
    work, calls = held_workload(chain, tmp)
    with open(err, "w") as e:
        tool = subprocess.Popen([REC, "-e", f"profile:d:{hz}", "--ustack-bytes", str(USTACK),
                                 "-p", str(work.pid), "-o", str(raw)],
                                stdout=subprocess.DEVNULL, stderr=e)
    try:
        wait_recording(tool, err, "stacks-record")
    except SystemExit:
        os.kill(work.pid, signal.SIGKILL)
        raise
    n = release(work, calls)
    cpu = wait_exit(tool, GRACE)
    text = err.read_text(errors="replace")
    if tool.returncode != 0:
        fail(f"stacks-record failed (status {tool.returncode}): {tail(err)}")
    m, d = SUMMARY.search(text), DSTACKS.search(text)
    if not m or not d:
        fail(f"no summary or `d stacks` line from stacks-record: {tail(err)}")
    samples, lost = int(m.group(1)), int(m.group(2))
    if samples == 0:
        fail(f"stacks-record recorded no samples at {hz} Hz")
    if lost:
        log(f"warning: stacks-record lost {lost} events at {hz} Hz")
    row = {"calls": n, "samples": samples, "cpu": cpu, "bytes": raw.stat().st_size,
           "cfi_root": int(d.group(2)) / max(int(d.group(1)), 1), "text": text}
    if post:
        row["post"] = timed([SYM, str(raw), "-o", str(sym)], os.devnull, tmp / "symbolize.err")
        rows, complete = stacks_complete(sym)
        if rows != samples:
            fail(f"stacks-record reported {samples} samples, its stream holds {rows} profile rows")
        row["complete"] = complete / rows
        sym.unlink()
    raw.unlink()
    return row


def run_perf(chain, tmp, hz):
    data, err, script = tmp / "perf.data", tmp / "perf.err", tmp / "perf-script.txt"
    ctl, ack = tmp / "perf-ctl", tmp / "perf-ack"
    for fifo in (ctl, ack):
        fifo.unlink(missing_ok=True)
        os.mkfifo(fifo)
    work, calls = held_workload(chain, tmp)
    # --no-buildid-cache: binaries are not copied into ~/.debug (build ids are still written).
    with open(err, "w") as e:
        tool = subprocess.Popen(["perf", "record", "--call-graph", f"dwarf,{USTACK}",
                                 "-e", "cpu-clock", "-F", str(hz), "--no-buildid-cache",
                                 "-D", "-1", "--control", f"fifo:{ctl},{ack}",
                                 "-p", str(work.pid), "-o", str(data)],
                                stdout=subprocess.DEVNULL, stderr=e)
    try:
        perf_enable(tool, ctl, ack, err)
    except SystemExit:
        os.kill(work.pid, signal.SIGKILL)
        raise
    n = release(work, calls)
    cpu = wait_exit(tool, GRACE)
    if tool.returncode != 0:
        fail(f"perf record failed (status {tool.returncode}): {tail(err)}")
    m = re.search(r"lost (\d+) chunks", err.read_text(errors="replace"))
    if m:
        log(f"warning: perf record lost {m.group(1)} chunks at {hz} Hz")
    post = timed(["perf", "script", "-i", str(data), "-F", "comm,tid,ip,sym"], script,
                 tmp / "perf-script.err")
    samples, complete = perf_complete(script)
    if samples == 0:
        fail(f"perf recorded no samples at {hz} Hz: {tail(err)}")
    row = {"calls": n, "samples": samples, "cpu": cpu, "bytes": data.stat().st_size,
           "post": post, "complete": complete / samples}
    data.unlink()
    script.unlink()
    return row


def on_cpu_sample(text):
    """(runs, ns per run) of `on_cpu_sample` in a recorder summary (kernel BPF stats)."""
    runs = benchmd.bpf_runs(text, "on_cpu_sample")
    if runs[0] == 0:
        fail(f"no on_cpu_sample run time in stacks-record's summary: {text.strip()[-400:]}")
    return runs


def describe(cfg, r):
    if cfg == "alone":
        return f"calls {r['calls']}"
    return (f"calls {r['calls']}, {r['samples']} samples, {r['cpu']:.2f} s CPU, "
            f"post {r['post']:.2f} s, {r['bytes'] / r['samples']:.0f} B/sample, "
            f"complete {100 * r['complete']:.1f}%")


def measure(chain, tmp):
    res = {hz: {k: [] for k in ("alone", "stacks", "perf", "bpf_ns", "bpf_sample_ns")}
           for hz in RATES}
    configs = ["alone", "stacks", "perf"]
    runs = {"alone": run_alone, "stacks": run_stacks, "perf": run_perf}
    for hz in RATES:
        for rep in range(REPS):
            # Rotated, so no configuration always goes first; drift weighs on all alike.
            for cfg in configs[rep % 3:] + configs[:rep % 3]:
                r = runs[cfg](chain, tmp) if cfg == "alone" else runs[cfg](chain, tmp, hz)
                res[hz][cfg].append(r)
                log(f"{hz} Hz, run {rep + 1}/{REPS}, {cfg}: {describe(cfg, r)}")
    # The BPF program's own time per sample, from the kernel's counters (which cost a little
    # themselves: measured in separate runs).
    before = STATS.read_text()
    STATS.write_text("1")
    try:
        for hz in RATES:
            for rep in range(REPS):
                r = run_stacks(chain, tmp, hz, post=False)
                runs, ns = on_cpu_sample(r["text"])
                # The program also runs at ticks that take no sample (other processes'): per
                # sample, its time over all runs.
                res[hz]["bpf_ns"].append(ns)
                res[hz]["bpf_sample_ns"].append(runs * ns / r["samples"])
                log(f"{hz} Hz, run {rep + 1}/{REPS}, stacks-record with BPF stats: "
                    f"on_cpu_sample {runs} runs, {ns:.0f} ns each, "
                    f"{runs * ns / r['samples']:.0f} ns per sample")
    finally:
        STATS.write_text(before)
    return res


def summarize(res):
    """Per rate: medians over the runs of each figure."""
    med = statistics.median
    out = {}
    for hz, r in res.items():
        alone = med(x["calls"] for x in r["alone"])
        s = {"alone": alone, "alone_min": min(x["calls"] for x in r["alone"]),
             "alone_max": max(x["calls"] for x in r["alone"]), "bpf_ns": med(r["bpf_ns"]),
             "bpf_sample_ns": med(r["bpf_sample_ns"])}
        for tool in ("stacks", "perf"):
            rows = r[tool]
            calls = med(x["calls"] for x in rows)
            s[tool] = {
                "samples": med(x["samples"] for x in rows),
                "calls": calls,
                "slowdown": 1 - calls / alone,
                "cpu": med(x["cpu"] / x["samples"] for x in rows),
                "post": med(x["post"] / x["samples"] for x in rows),
                "sum": med((x["cpu"] + x["post"]) / x["samples"] for x in rows),
                "bytes": med(x["bytes"] / x["samples"] for x in rows),
                "complete": med(x["complete"] for x in rows),
            }
        s["stacks"]["cfi_root"] = med(x["cfi_root"] for x in r["stacks"])
        out[hz] = s
    return out


def us(sec):
    return f"{sec * 1e6:,.0f} µs" if sec * 1e6 >= 10 else f"{sec * 1e6:.1f} µs"


def ratio(a, b):
    if b <= 0:
        return "–"
    return f"{a / b:.2f}×" if a / b >= 0.1 else f"{a / b:.3f}×"


def write(s, sw):
    when = time.strftime("%Y-%m-%d")
    runs = f"{REPS} run{'s' if REPS != 1 else ''}"
    about = (
        f"Measured {when} on {os.cpu_count()} CPUs (kernel {os.uname().release}), {runs} of "
        "each (medians), the tools and the workload alone in turn. The workload is the "
        "`chain-nofp` fixture (`tests/fixtures/unwind`, clang -O2 -fomit-frame-pointer): "
        f"main → a_fn → b_fn → c_fn → leaf burning one CPU for {SECONDS:g} s, counting its "
        "calls. It is started held, the tool attaches with `-p PID` — `stacks-record -e "
        f"profile:d:HZ` (CFI unwinding of a {USTACK // 1024} KiB copy of the user stack, in "
        f"the recorder) or `perf record --call-graph dwarf,{USTACK} -e cpu-clock -F HZ` (the "
        "same copy written to perf.data, unwound by `perf script`) — and the workload is "
        "released once the tool records. *Slowdown*: 1 − calls traced / calls alone; the "
        "sampling work in the workload's context (BPF program, the kernel's stack copy) shows "
        "there, not in the tool's CPU. *Record*: the tool's user+sys CPU (wait4) over its "
        "samples, start-up and exit included (fixed costs, which weigh most at 99 Hz); *post*: "
        "`perf script -F comm,tid,ip,sym` (perf's unwinding and symbols) or `stacks-symbolize` "
        "(symbols only) on that recording, likewise. *on_cpu_sample*: the BPF program per run "
        "and, over all its runs (ticks that take no sample included), per sample "
        "(`kernel.bpf_stats_enabled`, separate runs). *Bytes*: the raw Arrow stream or "
        "perf.data per sample. *Complete*: samples whose symbolized stack holds all of main, "
        "a_fn, b_fn, c_fn and leaf (samples in main's own loop or after leaf returned hold "
        "less; stacks-record's own count of stacks unwound by CFI to the root in brackets). "
        "Ratios are stacks-record ÷ perf."
    )
    lines = [
        BEGIN,
        "## User stacks without frame pointers: stacks-record d vs perf --call-graph dwarf "
        "(`scripts/bench_unwind.py`)",
        "",
        textwrap.fill(about, width=96, break_long_words=False, break_on_hyphens=False),
    ]
    for hz, r in s.items():
        st, pf = r["stacks"], r["perf"]
        spread = (r["alone_max"] - r["alone_min"]) / r["alone"] * 100
        lines += [
            "",
            f"**{hz} Hz** (workload alone: {r['alone']:,.0f} calls, runs within {spread:.1f}%)",
            "",
            "| tool | samples | slowdown | record CPU / sample | post CPU / sample | "
            "record + post / sample | on_cpu_sample / run (/ sample) | bytes / sample | "
            "complete |",
            "|---|---|---|---|---|---|---|---|---|",
            f"| `perf record --call-graph dwarf,{USTACK}` | {pf['samples']:,.0f} | "
            f"{100 * pf['slowdown']:.1f}% | {us(pf['cpu'])} | {us(pf['post'])} (perf script) | "
            f"{us(pf['sum'])} | – | {pf['bytes']:,.0f} | {100 * pf['complete']:.1f}% |",
            f"| `stacks-record -e profile:d:{hz}` | {st['samples']:,.0f} | "
            f"{100 * st['slowdown']:.1f}% | {us(st['cpu'])} | {us(st['post'])} (stacks-symbolize) "
            f"| {us(st['sum'])} | {r['bpf_ns']:,.0f} ns ({r['bpf_sample_ns']:,.0f} ns) | "
            f"{st['bytes']:,.0f} | {100 * st['complete']:.1f}% ({100 * st['cfi_root']:.1f}%) |",
            f"| stacks-record ÷ perf | {ratio(st['samples'], pf['samples'])} | "
            f"{ratio(st['slowdown'], pf['slowdown']) if st['slowdown'] > 0 else '–'} | "
            f"{ratio(st['cpu'], pf['cpu'])} | {ratio(st['post'], pf['post'])} | "
            f"{ratio(st['sum'], pf['sum'])} | – | {ratio(st['bytes'], pf['bytes'])} | "
            f"{ratio(st['complete'], pf['complete'])} |",
        ]
    lines += write_switch(sw)
    lines.append(END)
    benchmd.replace_section(OUT, BEGIN, END, "\n".join(lines))


def naps():
    return [WORK, "sleep", "--count", str(NAPS), "--ms", "1"]


def switch_stacks(mode, tmp):
    """One run of the `sleep` workload under `stacks-record -e switch:MODE`: CPU (recorder and
    workload), switch rows, output bytes, summary text."""
    raw, err = tmp / "switch.arrow", tmp / "switch.err"
    cpu = timed([REC, "-e", f"switch:{mode}", "-o", str(raw), "--", *naps()], os.devnull, err)
    text = err.read_text(errors="replace")
    m = re.search(r"events: [^;]*?switch (\d+)", text)
    if not m:
        fail(f"no switch rows in stacks-record's summary: {tail(err)}")
    r = {"cpu": cpu, "rows": int(m.group(1)), "bytes": raw.stat().st_size, "text": text}
    raw.unlink()
    return r


def switch_perf(tmp):
    """One run of the `sleep` workload under `perf record -e sched:sched_switch --call-graph
    dwarf` (in a private mount namespace with tracefs, which its tracepoint needs): CPU (perf
    and workload), switches recorded, perf.data bytes, `perf script` CPU."""
    data, err = tmp / "switch.data", tmp / "switch-perf.err"
    script = ("mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing; "
              'exec "$@"')
    cpu = timed(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
                 "perf", "record", "-q", "--no-buildid-cache", "-e", "sched:sched_switch",
                 "--call-graph", f"dwarf,{USTACK}", "-o", str(data), "--", *naps()],
                os.devnull, err)
    out = tmp / "switch-script.txt"
    post = timed(["perf", "script", "-i", str(data), "-F", "comm,tid,ip,sym"], out,
                 tmp / "switch-script.err")
    rows = sum(1 for line in out.read_text(errors="replace").splitlines()
               if line and not line[0].isspace())
    r = {"cpu": cpu, "rows": rows, "bytes": data.stat().st_size, "post": post}
    data.unlink()
    out.unlink()
    return r


def measure_switch(tmp):
    """Off-CPU stacks: `switch:d` (the lazy copy at the return from the system call) against
    `switch:u` and perf's dwarf callchains on sched_switch, on NAPS 1 ms sleeps."""
    med = statistics.median
    alone = med(timed(naps(), os.devnull, tmp / "naps.err") for _ in range(REPS))
    res = {"u": [], "d": [], "perf": []}
    for rep in range(REPS):
        for mode in ("u", "d", "perf"):
            r = switch_perf(tmp) if mode == "perf" else switch_stacks(mode, tmp)
            res[mode].append(r)
            log(f"switch run {rep + 1}/{REPS}, {mode}: {r['rows']} rows, {r['cpu']:.2f} s CPU, "
                f"{r['bytes'] / max(r['rows'], 1):,.0f} B/row")
    before = STATS.read_text()
    STATS.write_text("1")
    progs = {"u": [], "d": []}
    try:
        for rep in range(REPS):
            for mode in ("u", "d"):
                text = switch_stacks(mode, tmp)["text"]
                progs[mode].append((benchmd.bpf_runs(text, "on_switch"),
                                    benchmd.bpf_runs(text, "on_sys_exit")))
    finally:
        STATS.write_text(before)
    out = {"alone": alone}
    for mode, rows in res.items():
        out[mode] = {
            "rows": med(x["rows"] for x in rows),
            "cpu": med((x["cpu"] - alone) / max(x["rows"], 1) for x in rows),
            "bytes": med(x["bytes"] / max(x["rows"], 1) for x in rows),
        }
    out["perf"]["post"] = med(x["post"] / max(x["rows"], 1) for x in res["perf"])
    for mode in ("u", "d"):
        out[mode]["switch_ns"] = med(p[0][1] for p in progs[mode])
    out["d"]["exit_runs"] = med(p[1][0] for p in progs["d"])
    out["d"]["exit_ns"] = med(p[1][1] for p in progs["d"])
    return out


def write_switch(sw):
    about = (
        f"Off-CPU stacks with `d`: `stacks-workload sleep --count {NAPS} --ms 1` (the Rust "
        "workload, which has frame pointers, so `u` is complete too: this measures the cost) "
        "recorded with `stacks-record -e switch:u`, `-e switch:d` and `perf record -e "
        f"sched:sched_switch --call-graph dwarf,{USTACK}` (in a private mount namespace with "
        f"tracefs), {REPS} runs each (medians). *CPU per row*: the tool's and the workload's "
        "user+sys CPU less the workload's alone "
        f"({sw['alone']:.2f} s), over the rows (perf: switches recorded). *on_switch*: the "
        "BPF program at every context switch; *on_sys_exit*: the program `switch:d` loads "
        "at the return of every system call on the machine (it takes the user stack of an "
        "interval that waits for it, a task-storage lookup otherwise), per run, with its runs "
        "during the recording (`kernel.bpf_stats_enabled`, separate runs). Ratios are against "
        "perf."
    )
    u, d, pf = sw["u"], sw["d"], sw["perf"]
    return [
        "",
        textwrap.fill(about, width=96, break_long_words=False, break_on_hyphens=False),
        "",
        "| recording | rows | CPU per row | post CPU / row | bytes / row | on_switch / run | "
        "on_sys_exit / run (runs) |",
        "|---|---|---|---|---|---|---|",
        f"| `perf record -e sched:sched_switch --call-graph dwarf,{USTACK}` | "
        f"{pf['rows']:,.0f} | {us(pf['cpu'])} | {us(pf['post'])} (perf script) | "
        f"{pf['bytes']:,.0f} | – | – |",
        f"| `stacks-record -e switch:u` | {u['rows']:,.0f} | {us(u['cpu'])} "
        f"({ratio(u['cpu'], pf['cpu'])}) | – | {u['bytes']:,.0f} ({ratio(u['bytes'], pf['bytes'])}) "
        f"| {u['switch_ns']:,.0f} ns | – |",
        f"| `stacks-record -e switch:d` | {d['rows']:,.0f} | {us(d['cpu'])} "
        f"({ratio(d['cpu'], pf['cpu'])}) | – | {d['bytes']:,.0f} ({ratio(d['bytes'], pf['bytes'])}) "
        f"| {d['switch_ns']:,.0f} ns | {d['exit_ns']:,.0f} ns ({d['exit_runs']:,.0f}) |",
    ]


def main():
    benchmd.preflight("bench_unwind", "BPF, perf events", [REC, SYM, WORK])
    for tool in ("perf", os.environ.get("CC") or "clang", "rustc"):
        if not shutil.which(tool):
            fail(f"{tool} is missing (perf records the peer; build.sh builds the fixtures)")
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        fail("pyarrow is missing (reads stacks-symbolize's output)")
    with tempfile.TemporaryDirectory(prefix="bench-unwind-") as t:
        tmp = Path(t)
        log(f"building the unwinding fixtures ({BUILD.relative_to(ROOT)})")
        b = subprocess.run(["bash", str(BUILD), str(tmp / "fixtures")], capture_output=True,
                           text=True)
        chain = tmp / "fixtures/chain-nofp"
        if b.returncode != 0 or not chain.exists():
            fail(f"{BUILD.relative_to(ROOT)} failed: {b.stderr.strip()[-400:]}")
        res = measure(str(chain), tmp)
        sw = measure_switch(tmp)
    s = summarize(res)
    for hz, r in s.items():
        for tool in ("perf", "stacks"):
            x = r[tool]
            log(f"{hz} Hz {tool:6}: slowdown {100 * x['slowdown']:.1f}%, record {us(x['cpu'])}, "
                f"post {us(x['post'])} per sample, {x['bytes']:,.0f} B/sample, "
                f"complete {100 * x['complete']:.1f}%")
    write(s, sw)
    log(f"wrote its section of {OUT}")


if __name__ == "__main__":
    main()
