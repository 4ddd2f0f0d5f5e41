#!/usr/bin/env python3
# scripts/bench_python.py — Python frames: `stacks-record -e profile:u:HZ` next to `py-spy
# record -r HZ` on the same CPU-bound CPython script (outer → middle → leaf) at 99 and 999 Hz:
# the script's slowdown, the profiler's CPU per sample, and the share of samples naming
# outer;middle;leaf in order; then the BPF program's time per sample with and without Python
# frames. Writes its section of BENCHMARKS.md (between markers). Run through scripts/bench
# (BENCH_ONLY=python; release build, root).
"""Python frames: stacks-record against py-spy.

The script (below) starts, says `ready`, and blocks reading stdin; the profiler attaches with
`-p PID` (`stacks-record -e profile:u:HZ -p PID -o FILE`, `py-spy record -r HZ -f raw -p PID
-o FILE`), and once it samples (stacks-record's `recording` line, py-spy's `Sampling process`)
the script is released: it calls outer() for BENCH_SECONDS and prints `calls N`. Both tools
stop when it exits (SIGINT otherwise). Each rep runs the script alone and under each tool at
each rate, in turn (the order rotating). CPU is each process's user+sys from wait4; the
script is not the tools' child, so theirs is their own. stacks-symbolize is timed on each
recording (py-spy names frames while it samples). The BPF program's time per run comes from
the kernel's counters (kernel.bpf_stats_enabled) in separate runs, with and without
`--no-python`. Environment: CARGO_TARGET_DIR, BENCH_OUT, BENCH_REPS (default 3; medians),
BENCH_SECONDS (default 5), BENCH_PYTHON (default /usr/bin/python3.11; another minor's results,
e.g. ~/.cache/stacks-pythons/3.14/usr/bin/python3.14, go to a section of their own).
"""

import os
import re
import shutil
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
PYTHON = os.environ.get("BENCH_PYTHON") or "/usr/bin/python3.11"
REC, SYM = str(BIN / "stacks-record"), str(BIN / "stacks-symbolize")
# Debian's 3.11 keeps the first section; another minor (BENCH_PYTHON=…/python3.14) has its own.
MINOR = re.search(r"python(3\.\d+)$", PYTHON)
MINOR = MINOR.group(1) if MINOR and MINOR.group(1) != "3.11" else ""
TAG = f"bench-python-{MINOR}" if MINOR else "bench-python"
BEGIN, END = f"<!-- {TAG}:begin -->", f"<!-- {TAG}:end -->"
RATES = [99, 999]
CHAIN = ["outer", "middle", "leaf"]
STATS = Path("/proc/sys/kernel/bpf_stats_enabled")
READY_TIMEOUT = 60  # seconds for a tool to start sampling
GRACE = 5  # seconds for a tool to stop by itself after the script exits, before SIGINT

SCRIPT = """import sys, time

def leaf(n):
    s = 0
    for i in range(n):
        s += i * i
    return s

def middle(n):
    return leaf(n)

def outer(n):
    return middle(n)

print("ready", flush=True)
sys.stdin.readline()
end = time.monotonic() + float(sys.argv[1])
calls = 0
while time.monotonic() < end:
    outer(2000)
    calls += 1
print("calls", calls, flush=True)
"""

SAMPLES = re.compile(r"stacks-record: \d+ rows: (\d+) samples from")


def log(msg):
    print(f"bench_python: {msg}", file=sys.stderr, flush=True)


def fail(msg):
    sys.exit(f"bench_python: error: {msg}")


def tail(path, n=400):
    return Path(path).read_text(errors="replace")[-n:].strip() if Path(path).exists() else ""


def wait_exit(p, grace):
    """Reap the Popen `p` (CPU seconds): `grace` seconds to exit by itself, then SIGINT."""
    deadline = time.time() + grace
    while time.time() < deadline:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            return ru.ru_utime + ru.ru_stime
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    return benchmd.reap(p, 120)


def wait_for(path, needle, proc, what):
    """Until the file `path` holds `needle`; fails if `proc` exits first or it takes too long."""
    deadline = time.time() + READY_TIMEOUT
    while needle not in Path(path).read_text(errors="replace"):
        if proc.poll() is not None:
            fail(f"{what} exited before `{needle}`: {tail(path)}")
        if time.time() > deadline:
            proc.kill()
            fail(f"{what}: no `{needle}` in {READY_TIMEOUT} s: {tail(path)}")
        time.sleep(0.02)


def held_script(tmp):
    """The script, started and waiting on stdin; (Popen, its stdout file)."""
    out = tmp / "script.out"
    with open(out, "w") as f:
        p = subprocess.Popen([PYTHON, str(tmp / "bench.py"), f"{SECONDS:g}"],
                             stdin=subprocess.PIPE, stdout=f, stderr=subprocess.DEVNULL)
    wait_for(out, "ready", p, "the script")
    return p, out


def release(script, out):
    """Let the held script run to its end; (the calls it made, its CPU seconds)."""
    script.stdin.write(b"go\n")
    script.stdin.close()
    cpu = benchmd.reap(script, SECONDS + 120)
    m = re.search(r"calls (\d+)", out.read_text())
    if script.returncode != 0 or not m:
        fail(f"the script failed (status {script.returncode}): {tail(out)!r}")
    return int(m.group(1)), cpu


def in_order(names):
    """Whether root-first function `names` hold outer, middle, leaf in that order."""
    want = iter(CHAIN)
    nxt = next(want)
    for n in names:
        if n == nxt:
            nxt = next(want, None)
            if nxt is None:
                return True
    return False


def stacks_share(path):
    """(profile rows, those naming the chain) of a symbolized stream."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    with open(path, "rb") as f:
        r = ipc.open_stream(f)
        t = pa.Table.from_batches(list(r), schema=r.schema)
    rows = hit = 0
    for kind, stack in zip(t.column("kind").to_pylist(), t.column("stack").to_pylist()):
        if kind != "profile":
            continue
        rows += 1
        # Frames are innermost first.
        if in_order([f["function"] for f in reversed(stack or [])]):
            hit += 1
    return rows, hit


def py_spy_share(path):
    """(samples, those naming the chain) of py-spy's raw output (`root;…;leaf count` lines,
    frames `name (file:line)`)."""
    samples = hit = 0
    for line in Path(path).read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        samples += n
        if in_order([f.split(" (")[0] for f in stack.split(";")]):
            hit += n
    return samples, hit


def run_alone(tmp):
    script, out = held_script(tmp)
    calls, cpu = release(script, out)
    return {"calls": calls, "script_cpu": cpu}


def run_stacks(tmp, rate, no_python=False):
    script, out = held_script(tmp)
    raw, err = tmp / "raw.arrow", tmp / "rec.err"
    argv = [REC, "-e", f"profile:u:{rate}", "-p", str(script.pid), "-o", str(raw)]
    if no_python:
        argv.append("--no-python")
    with open(err, "w") as e:
        tool = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=e)
    wait_for(err, "Ctrl-C stops", tool, "stacks-record")
    calls, script_cpu = release(script, out)
    cpu = wait_exit(tool, GRACE)
    text = err.read_text(errors="replace")
    if tool.returncode not in (0, 130, -2):
        fail(f"stacks-record failed (status {tool.returncode}): {tail(err)}")
    sym = tmp / "sym.arrow"
    with open(tmp / "sym.err", "w") as e:
        p = subprocess.Popen([SYM, "-o", str(sym), str(raw)], stdout=subprocess.DEVNULL, stderr=e)
        sym_cpu = benchmd.reap(p, 600)
    if p.returncode != 0:
        fail(f"stacks-symbolize failed: {tail(tmp / 'sym.err')}")
    rows, hit = stacks_share(sym)
    m = SAMPLES.search(text)
    return {"calls": calls, "script_cpu": script_cpu, "cpu": cpu, "post": sym_cpu,
            "samples": int(m.group(1)) if m else rows, "share": hit / max(rows, 1),
            "bpf": benchmd.bpf_runs(text, "on_cpu_sample")}


def run_py_spy(tmp, rate):
    script, out = held_script(tmp)
    raw, err = tmp / "py-spy.txt", tmp / "py-spy.err"
    with open(err, "w") as e:
        tool = subprocess.Popen(["py-spy", "record", "-r", str(rate), "-f", "raw", "-o", str(raw),
                                 "-p", str(script.pid)], stdout=e, stderr=subprocess.STDOUT)
    wait_for(err, "Sampling process", tool, "py-spy")
    calls, script_cpu = release(script, out)
    cpu = wait_exit(tool, GRACE)
    if not raw.exists():
        fail(f"py-spy wrote nothing: {tail(err)}")
    samples, hit = py_spy_share(raw)
    return {"calls": calls, "script_cpu": script_cpu, "cpu": cpu, "post": 0.0,
            "samples": samples, "share": hit / max(samples, 1)}


def med(runs, key):
    return statistics.median(r[key] for r in runs)


def fmt_us(seconds, samples):
    return f"{seconds / max(samples, 1) * 1e6:,.0f} µs"


def table(rate, alone, stacks, spy):
    base = med(alone, "calls")
    rows = []
    for name, runs in ((f"`py-spy record -r {rate}`", spy),
                       (f"`stacks-record -e profile:u:{rate}`", stacks)):
        samples = med(runs, "samples")
        slow = 1 - med(runs, "calls") / base
        rec = med(runs, "cpu") / samples
        post = med(runs, "post") / samples
        rows.append((name, samples, slow, rec, post, rec + post, med(runs, "share")))
    (_, s0, w0, r0, _, t0, a0), (_, s1, w1, r1, p1, t1, a1) = rows
    out = [f"**{rate} Hz** (script alone: {base:,.0f} calls of outer(), runs within "
           f"{(max(r['calls'] for r in alone) / min(r['calls'] for r in alone) - 1) * 100:.1f}%)",
           "",
           "| profiler | samples | script slowdown | profiler CPU / sample | stacks-symbolize CPU / sample | total / sample | outer;middle;leaf |",
           "|---|---|---|---|---|---|---|"]
    for name, samples, slow, rec, post, total, share in rows:
        out.append(f"| {name} | {samples:,.0f} | {slow * 100:.1f}% | {rec * 1e6:,.0f} µs | "
                   f"{'–' if post == 0 else f'{post * 1e6:,.0f} µs'} | {total * 1e6:,.0f} µs | "
                   f"{share * 100:.1f}% |")
    ratio = lambda a, b: f"{a / b:.2f}×" if b else "–"
    out.append(f"| stacks-record ÷ py-spy | {ratio(s1, s0)} | {ratio(w1, w0)} | {ratio(r1, r0)} | – | "
               f"{ratio(t1, t0)} | {ratio(a1, a0)} |")
    return "\n".join(out)


def main():
    benchmd.preflight("bench_python", "BPF, and py-spy attaching", [REC, SYM])
    if not shutil.which("py-spy"):
        fail("py-spy is not installed (scripts/setup installs it)")
    if not os.path.exists(PYTHON):
        fail(f"{PYTHON} is not installed (BENCH_PYTHON names another)")
    tmp = Path(tempfile.mkdtemp(prefix="bench-python-"))
    (tmp / "bench.py").write_text(SCRIPT)
    load = os.getloadavg()
    alone, stacks, spy = [], {r: [] for r in RATES}, {r: [] for r in RATES}
    jobs = [("alone", None)] + [(t, r) for r in RATES for t in ("stacks", "py-spy")]
    for rep in range(REPS):
        for i in range(len(jobs)):
            what, rate = jobs[(i + rep) % len(jobs)]
            log(f"rep {rep + 1}/{REPS}: {what} {rate or ''}")
            if what == "alone":
                alone.append(run_alone(tmp))
            elif what == "stacks":
                stacks[rate].append(run_stacks(tmp, rate))
            else:
                spy[rate].append(run_py_spy(tmp, rate))
    # The BPF program's time, in separate runs (the counters cost a little themselves).
    before = STATS.read_text()
    STATS.write_text("1")
    try:
        with_py = run_stacks(tmp, 999)
        without = run_stacks(tmp, 999, no_python=True)
    finally:
        STATS.write_text(before)
    load_after = os.getloadavg()
    shutil.rmtree(tmp, ignore_errors=True)
    version = subprocess.run([PYTHON, "--version"], capture_output=True, text=True).stdout.strip()
    spy_version = subprocess.run(["py-spy", "--version"], capture_output=True, text=True).stdout.strip()
    (runs_py, ns_py), (runs_no, ns_no) = with_py["bpf"], without["bpf"]
    per_sample = lambda runs, ns, r: runs * ns / max(r["samples"], 1)
    section = "\n".join([
        BEGIN,
        "## Python frames" + (f" of CPython {MINOR}" if MINOR else "")
        + ": stacks-record next to py-spy (`scripts/bench_python.py`)",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} CPUs (kernel "
        f"{os.uname().release}), {REPS} runs of each (medians), the script alone and under each "
        f"profiler in turn; load average {load[0]:.1f} before, {load_after[0]:.1f} after. The script "
        f"({version}, `{PYTHON}`): outer() → middle() → leaf(), a 2,000-step loop of integer "
        f"arithmetic, called for {SECONDS:g} s, counting its calls. It is started and waits on "
        "stdin; the profiler attaches with `-p PID` — `stacks-record -e profile:u:HZ -o FILE` "
        f"(BPF: native frames by frame pointers, Python frames from the thread state) or "
        f"`{spy_version} record -r HZ -f raw -o FILE` (default mode: it stops the process "
        "at each sample to read it with process_vm_readv) — and the script is released once the "
        "profiler samples. *Slowdown*: 1 − calls profiled / calls alone; the BPF program runs in "
        "the script's context and shows there, py-spy's pauses too. *Profiler CPU*: the "
        "profiler's user+sys (wait4) over its samples, start-up and exit included (fixed costs, "
        "which weigh most at 99 Hz); stacks-symbolize (symbols of native frames; Python frames "
        "are named by the recorder) on that recording, likewise. *outer;middle;leaf*: samples "
        "whose stack holds the three in call order (py-spy's idle samples are not written; the "
        "script never idles once released). *Samples*: stacks-record samples the script's CPU "
        "time (cpu-clock), py-spy wall-clock time, so stacks-record has fewer when the script "
        "waits for a CPU on the loaded machine. Ratios are stacks-record ÷ py-spy.",
        "",
        *[table(r, alone, stacks[r], spy[r]) + "\n" for r in RATES],
        f"The BPF program at 999 Hz (`kernel.bpf_stats_enabled`, one run each): `on_cpu_sample` "
        f"{ns_py:,.0f} ns per run, {per_sample(runs_py, ns_py, with_py):,.0f} ns per sample (it "
        "also runs at ticks of the other CPU, which take no sample) with Python frames; "
        f"{ns_no:,.0f} ns per run, {per_sample(runs_no, ns_no, without):,.0f} ns per sample with "
        "`--no-python` (native frames only). The Python walk (the thread state "
        + ("from the interpreter's thread list, cached per thread and checked by its native "
           "thread id" if MINOR and MINOR >= "3.13" else "through its pthread key")
        + ", then 5 reads per frame, here 4 frames) costs the difference, "
        f"{per_sample(runs_py, ns_py, with_py) - per_sample(runs_no, ns_no, without):,.0f} ns per "
        "sample, in the script's context (part of its slowdown). The alone runs' spread shows "
        "how much the shared machine moves the slowdowns: differences within it are noise.",
        END,
    ])
    benchmd.replace_section(OUT, BEGIN, END, section)
    log(f"wrote {OUT}")
    print(section)


if __name__ == "__main__":
    main()
