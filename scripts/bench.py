#!/usr/bin/env python3
# scripts/bench.py — measures each stacks stage side by side with a peer (perf record, addr2line,
# perf script, pyarrow, perf report) on the same workload in one run; writes BENCHMARKS.md.
# Run through scripts/bench (installs, builds release, runs this as root). Stdlib + pyarrow only.
"""Benchmark of the stacks pipeline against its peers.

Every figure in the output is measured by this run; any failed step aborts with a non-zero
exit and a one-line message, and BENCHMARKS.md is not written.

Environment: CARGO_TARGET_DIR (binaries in $CARGO_TARGET_DIR/release), BENCH_SECONDS (workload
duration per recording, default 5), BENCH_REPS (repetitions, default 3), BENCH_OUT (output file,
default BENCHMARKS.md at the repository root), BENCH_KEEP=1 (keep the temporary directory),
BENCH_ONLY=symbolize (measure section 3 only and replace it in BENCH_OUT). The store (a real
multi-process recording, ten million samples) is measured by scripts/bench_store.py.
"""

import datetime
import gzip
import json
import math
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq
except ImportError as e:  # pragma: no cover - reported to the user
    sys.exit(f"bench: error: pyarrow is required ({e}); run scripts/setup")

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR") or Path.home() / ".cache/stacks-target")
BIN = TARGET / "release"
SECONDS = float(os.environ.get("BENCH_SECONDS") or 5)
REPS = int(os.environ.get("BENCH_REPS") or 3)
OUT = Path(os.environ.get("BENCH_OUT") or ROOT / "BENCHMARKS.md")
KEEP = os.environ.get("BENCH_KEEP") == "1"
RATES = (99, 999)
MIN_ROWS = 1_000_000
HIGH_RATE = 10_000  # perf record rate for a larger perf.data (perf report at scale)

REC, SYM, PACK, QUERY, PPROF, WORK = (
    str(BIN / f"stacks-{n}") for n in ("record", "symbolize", "pack", "query", "pprof", "workload")
)


class BenchError(Exception):
    pass


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def shown(argv):
    return " ".join(str(a) for a in argv)


class Tmp:
    dir: Path = None

    @classmethod
    def path(cls, name):
        return cls.dir / name


# ---------------------------------------------------------------------------------------------
# Running commands: wall time from spawn to reaping, CPU time (user + sys) from wait4's rusage,
# which covers the process and every descendant it reaped (a profiler reaps its workload).
# ---------------------------------------------------------------------------------------------


class Ran:
    def __init__(self, wall, cpu, err, cpus=None):
        self.wall, self.cpu, self.err, self.cpus = wall, cpu, err, cpus or [cpu]


def _reap(p):
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return ru.ru_utime + ru.ru_stime


def run(argv, stdin=None, stdout=None):
    """Run one command; stdin/stdout are paths (None: /dev/null). Fails on a non-zero exit."""
    return pipeline([argv], stdin, stdout)


def pipeline(cmds, stdin=None, stdout=None):
    """Run cmds connected by pipes; per-process CPU in .cpus, total in .cpu."""
    errs = [Tmp.path(f"stderr-{i}.txt") for i in range(len(cmds))]
    fin = open(stdin, "rb") if stdin else subprocess.DEVNULL
    fout = open(stdout, "wb") if stdout else subprocess.DEVNULL
    procs, efs = [], []
    try:
        t0 = time.perf_counter()
        prev = fin
        for i, argv in enumerate(cmds):
            last = i == len(cmds) - 1
            ef = open(errs[i], "wb")
            efs.append(ef)
            p = subprocess.Popen(
                [str(a) for a in argv],
                stdin=prev,
                stdout=fout if last else subprocess.PIPE,
                stderr=ef,
            )
            if i > 0:
                prev.close()  # our copy of the pipe: the reader must see EOF
            prev = p.stdout
            procs.append(p)
        cpus = [_reap(p) for p in procs]
        wall = time.perf_counter() - t0
    finally:
        for f in [fin, fout, *efs]:
            if hasattr(f, "close"):
                f.close()
    texts = [e.read_text(errors="replace") for e in errs]
    for p, argv, text in zip(procs, cmds, texts):
        if p.returncode != 0:
            tail = " | ".join(text.strip().splitlines()[-3:])
            raise BenchError(f"`{shown(argv)}` exited with {p.returncode}: {tail}")
    return Ran(wall, sum(cpus), "\n".join(texts), cpus)


def output(argv):
    """stdout of a quick command, as text."""
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True)
    if r.returncode != 0:
        raise BenchError(f"`{shown(argv)}` exited with {r.returncode}: {r.stderr.strip()[:300]}")
    return r.stdout


def med(xs):
    return statistics.median(xs)


# ---------------------------------------------------------------------------------------------
# Counting what a recording holds.
# ---------------------------------------------------------------------------------------------


def read_stream(path):
    with open(path, "rb") as f:
        r = ipc.open_stream(f)
        return r.schema, list(r)


def plain(col):
    """A column with its dictionary-encoded chunks (the streams' stack columns) decoded."""
    if not pa.types.is_dictionary(col.type):
        return col
    return pa.chunked_array([c.dictionary_decode() for c in col.chunks], col.type.value_type)


def stacks_counts(path):
    """(profile rows, sum of lost) in a raw stream."""
    _, batches = read_stream(path)
    t = pa.Table.from_batches(batches)
    kind = t.column("kind")
    samples = pc.sum(pc.equal(kind, "profile").cast(pa.int64())).as_py() or 0
    lost = pc.sum(pc.filter(t.column("value"), pc.equal(kind, "lost"))).as_py() or 0
    return samples, lost


SUMMARY = re.compile(r"stacks-record: \d+ rows: (\d+) samples from \d+ processes .*?; lost (\d+) events")


def perf_counts(path):
    """(samples, lost) in a perf.data: PERF_RECORD_SAMPLE records in `perf report -D`."""
    dump = Tmp.path("perf-dump.txt")
    run(["perf", "report", "-D", "-i", path], stdout=dump)
    samples = lost = 0
    with open(dump, errors="replace") as f:
        for line in f:
            if ": PERF_RECORD_SAMPLE(" in line:
                samples += 1
            elif "PERF_RECORD_LOST" in line:
                m = re.search(r"lost (\d+)", line)
                lost += int(m.group(1)) if m else 0
    dump.unlink()
    if samples == 0:
        raise BenchError(f"no PERF_RECORD_SAMPLE in `perf report -D -i {path}`")
    return samples, lost


def perf_frames(path):
    """Callchain entries of all samples (`perf script -F ip` prints one line per entry)."""
    out = Tmp.path("perf-ip.txt")
    run(["perf", "script", "-i", path, "-F", "ip"], stdout=out)
    with open(out) as f:
        n = sum(1 for line in f if line.strip())
    out.unlink()
    return n


# ---------------------------------------------------------------------------------------------
# Stage 1: recorder cost.
# ---------------------------------------------------------------------------------------------


def workload(report, seconds=None):
    return [WORK, "--report", report, "cpu", "--seconds", f"{seconds or SECONDS:g}"]


def perf_record(hz, data, argv):
    # --user-callchains: user stacks only, as profile:u; --no-buildid-cache: build ids are still
    # written into perf.data, but binaries are not copied into ~/.debug.
    return ["perf", "record", "-e", "cpu-clock", "-F", hz, "-g", "--user-callchains",
            "--no-buildid-cache", "-o", data, "--", *argv]


def bench_recorder():
    res = {hz: {"bare": [], "stacks": [], "perf": []} for hz in RATES}
    configs = ["bare", "stacks", "perf"]
    for hz in RATES:
        for rep in range(REPS):
            order = configs[rep % 3:] + configs[:rep % 3]  # rotate, so no config always goes first
            for cfg in order:
                report = Tmp.path(f"report-{hz}-{cfg}-{rep}.json")
                raw = Tmp.path(f"raw-{hz}-{rep}.arrow")
                data = Tmp.path(f"perf-{hz}-{rep}.data")
                wl = workload(report)
                if cfg == "bare":
                    argv = wl
                elif cfg == "stacks":
                    argv = [REC, "-e", f"profile:u:{hz}", "-o", raw, "--", *wl]
                else:
                    argv = perf_record(hz, data, wl)
                log(f"recorder {hz} Hz, run {rep + 1}/{REPS}: {cfg}")
                r = run(argv)
                rep_json = json.loads(report.read_text())
                if rep_json.get("cpu_ns") is None:
                    raise BenchError("the workload report has no cpu_ns (/proc/self/schedstat missing?)")
                units = rep_json["heavy_units"] + rep_json["light_units"]
                row = {
                    "throughput": units / (rep_json["wall_ns"] / 1e9),
                    "wall": r.wall,
                    "cpu": r.cpu,
                    "work_cpu": rep_json["cpu_ns"] / 1e9,
                    "work_wall": rep_json["wall_ns"] / 1e9,
                }
                if cfg == "stacks":
                    samples, lost = stacks_counts(raw)
                    m = SUMMARY.search(r.err)
                    if not m:
                        raise BenchError(f"no summary line from stacks-record: {r.err[-300:]}")
                    if (int(m.group(1)), int(m.group(2))) != (samples, lost):
                        raise BenchError(
                            f"stacks-record reported {m.group(1)} samples / {m.group(2)} lost, "
                            f"the stream holds {samples} / {lost}")
                    row.update(samples=samples, lost=lost, bytes=raw.stat().st_size, file=raw)
                elif cfg == "perf":
                    samples, lost = perf_counts(data)
                    row.update(samples=samples, lost=lost, bytes=data.stat().st_size, file=data)
                if cfg != "bare" and row["samples"] == 0:
                    raise BenchError(f"{cfg} recorded no samples at {hz} Hz")
                res[hz][cfg].append(row)
    # What the workload's own schedstat figure does not cover (exec, loading, exit): measured
    # on the bare runs, subtracted from the profilers' figures.
    residual = med([r["cpu"] - r["work_cpu"] for hz in RATES for r in res[hz]["bare"]])
    for hz in RATES:
        for cfg in ("stacks", "perf"):
            for r in res[hz][cfg]:
                r["own_cpu"] = r["cpu"] - r["work_cpu"] - residual
    return res, residual


# ---------------------------------------------------------------------------------------------
# Stage 2: storage.
# ---------------------------------------------------------------------------------------------


def dir_bytes(d, suffix=".parquet"):
    return sum(p.stat().st_size for p in Path(d).rglob(f"*{suffix}"))


def bench_storage(rec):
    out = {}
    for hz in RATES:
        s, p = rec[hz]["stacks"][0], rec[hz]["perf"][0]
        store = Tmp.path(f"store-{hz}")
        log(f"storage {hz} Hz: stacks-symbolize | stacks-pack")
        pipeline([[SYM], [PACK, store]], stdin=s["file"])
        pbytes = dir_bytes(store)
        if pbytes == 0:
            raise BenchError(f"stacks-pack wrote no Parquet file in {store}")
        gz = Tmp.path(f"perf-{hz}.data.gz")
        with open(p["file"], "rb") as fi, gzip.open(gz, "wb", compresslevel=6) as fo:
            shutil.copyfileobj(fi, fo)
        out[hz] = {
            "store": store,
            "samples": s["samples"],
            "raw": s["bytes"],
            "parquet": pbytes,
            "perf_samples": p["samples"],
            "perf": p["bytes"],
            "perf_gz": gz.stat().st_size,
        }
        gz.unlink()
    return out


# ---------------------------------------------------------------------------------------------
# Stage 3: symbolization.
# ---------------------------------------------------------------------------------------------


def load_segments(module):
    """LOAD program headers of an ELF file: (p_offset, p_vaddr, p_filesz)."""
    segs = []
    for line in output(["readelf", "-lW", module]).splitlines():
        f = line.split()
        if f and f[0] == "LOAD":
            segs.append((int(f[1], 16), int(f[2], 16), int(f[4], 16)))
    if not segs:
        raise BenchError(f"no LOAD segment in `readelf -lW {module}`")
    return segs


def to_vaddr(segs, off):
    for p_off, p_vaddr, p_filesz in segs:
        if p_off <= off < p_off + p_filesz:
            return off - p_off + p_vaddr
    return None


def user_lookups(batches, missing_ok=False):
    """Every user frame of every row as (module, ELF virtual address to look up), leaf first:
    the recorded file offset mapped through the module's LOAD headers, return addresses (every
    frame but the leaf) at offset - 1, as stacks-symbolize does. Frames that cannot be looked
    up are counted by reason."""
    looks, skipped, segments = [], {}, {}

    def skip(why):
        skipped[why] = skipped.get(why, 0) + 1

    for b in batches:
        for stack in b.column(b.schema.get_field_index("ustack")).to_pylist():
            for i, fr in enumerate(stack or []):
                mod = fr["module"]
                if mod is None or fr["offset"] is None or not mod.startswith("/"):
                    skip(f"not normalized by the recorder: {fr['error'] or f'module {mod}'}")
                    continue
                if mod not in segments:
                    if not os.path.exists(mod):
                        if not missing_ok:
                            raise BenchError(f"{mod} (recorded module) no longer exists")
                        skip("module no longer exists")
                        continue
                    try:
                        segments[mod] = load_segments(mod)
                    except BenchError:
                        if not missing_ok:
                            raise
                        segments[mod] = []
                if not segments[mod]:
                    skip("module is not an ELF file with LOAD segments")
                    continue
                vaddr = to_vaddr(segments[mod], fr["offset"] - (1 if i > 0 else 0))
                if vaddr is None:
                    skip(f"file offset outside the file part of {os.path.basename(mod)}'s LOAD "
                         "segments")
                    continue
                looks.append((mod, vaddr))
    return looks, skipped


def addr2line_all(looks, name):
    """addr2line -f -i -C (and -a, to split the answers) per module over `looks`, in order.
    Returns (wall, cpu, lookups, resolved to a function, all output text)."""
    by_mod = {}
    for mod, addr in looks:
        by_mod.setdefault(mod, []).append(addr)
    wall = cpu = 0.0
    n = resolved = 0
    texts = []
    for i, (mod, addrs) in enumerate(sorted(by_mod.items())):
        inp = Tmp.path(f"a2l-{name}-{i}.in")
        out = Tmp.path(f"a2l-{name}-{i}.out")
        inp.write_text("".join(f"{a:#x}\n" for a in addrs))
        r = run(["addr2line", "-a", "-f", "-i", "-C", "-e", mod], stdin=inp, stdout=out)
        wall += r.wall
        cpu += r.cpu
        text = out.read_text(errors="replace")
        texts.append(text)
        # Output per address: "0xADDR", then (function, file:line) pairs, innermost first.
        lines = text.splitlines()
        for j, line in enumerate(lines):
            if line.startswith("0x"):
                n += 1
                if j + 1 < len(lines) and lines[j + 1] != "??":
                    resolved += 1
    if n != len(looks):
        raise BenchError(f"addr2line answered {n} addresses of {len(looks)}")
    return wall, cpu, n, resolved, "".join(texts)


def llvm_symbolizer():
    """llvm-symbolizer on PATH, or Debian's versioned one."""
    found = shutil.which("llvm-symbolizer")
    if found:
        return found
    versioned = sorted(Path("/usr/lib").glob("llvm-*/bin/llvm-symbolizer"))
    return str(versioned[-1]) if versioned else None


def llvm_all(looks, name):
    """llvm-symbolizer --inlining --demangle per module over `looks`, in order (as
    addr2line_all). Returns (wall, cpu, lookups, resolved to a function, output text)."""
    tool = llvm_symbolizer()
    by_mod = {}
    for mod, addr in looks:
        by_mod.setdefault(mod, []).append(addr)
    wall = cpu = 0.0
    n = resolved = 0
    texts = []
    for i, (mod, addrs) in enumerate(sorted(by_mod.items())):
        inp = Tmp.path(f"llvm-{name}-{i}.in")
        out = Tmp.path(f"llvm-{name}-{i}.out")
        inp.write_text("".join(f"{a:#x}\n" for a in addrs))
        r = run([tool, f"--obj={mod}", "--inlining", "--demangle", "--functions=linkage",
                 "--print-address"], stdin=inp, stdout=out)
        wall += r.wall
        cpu += r.cpu
        text = out.read_text(errors="replace")
        texts.append(text)
        # Output per address: "0xADDR", (function, file:line:col) pairs, a blank line.
        for block in text.split("\n\n"):
            lines = block.strip("\n").splitlines()
            if lines and lines[0].startswith("0x"):
                n += 1
                if len(lines) > 1 and lines[1] != "??":
                    resolved += 1
    if n != len(looks):
        raise BenchError(f"llvm-symbolizer answered {n} addresses of {len(looks)}")
    return wall, cpu, n, resolved, "".join(texts)


SYM_SUMMARY = re.compile(r"stacks-symbolize: (\d+) rows, (\d+) distinct frames resolved")


def bench_symbolize(rec):
    hz = max(RATES)
    base = rec[hz]["stacks"][0]["file"]
    schema, batches = read_stream(base)
    base_rows = sum(b.num_rows for b in batches)
    repeat = math.ceil(MIN_ROWS / base_rows)
    big = Tmp.path("big.arrow")
    log(f"symbolize: building {big.name} ({base_rows} rows x {repeat})")
    with open(big, "wb") as f, ipc.new_stream(f, schema) as w:
        for _ in range(repeat):
            for b in batches:
                w.write_batch(b)
    big_rows = base_rows * repeat
    lengths = pc.list_value_length(plain(pa.Table.from_batches(batches).column("ustack")))
    base_frames = pc.sum(lengths).as_py() or 0
    looks, skipped = user_lookups(batches)
    distinct = sorted(set(looks))

    log("symbolize: stacks-symbolize over the big stream")
    big_runs = []
    for _ in range(REPS):
        r = run([SYM], stdin=big)
        m = SYM_SUMMARY.search(r.err)
        if not m or int(m.group(1)) != big_rows:
            raise BenchError(f"stacks-symbolize did not report {big_rows} rows: {r.err[-300:]}")
        big_runs.append(r)
    sym_distinct = int(m.group(2))

    log("symbolize: stacks-symbolize -j 1 over the big stream")
    big_j1 = []
    for _ in range(REPS):
        r = run([SYM, "-j", "1"], stdin=big)
        if not SYM_SUMMARY.search(r.err):
            raise BenchError(f"stacks-symbolize -j 1 gave no summary: {r.err[-300:]}")
        big_j1.append(r)

    log("symbolize: stacks-symbolize over the original recording")
    base_sym = Tmp.path("base-sym.arrow")
    small_runs = [run([SYM], stdin=base, stdout=base_sym) for _ in range(REPS)]
    _, sym_batches = read_stream(base_sym)
    st = pa.Table.from_batches(sym_batches)
    flat = plain(st.column("stack")).combine_chunks().flatten()
    if not pc.any(pc.match_substring(flat.field("function"), "burn_heavy")).as_py():
        raise BenchError("stacks-symbolize did not resolve burn_heavy")
    # distinct user frames (module, offset as recorded) and those that got a function name
    frames = [f for f in flat.to_pylist() if not f["kernel"] and not f["inlined"]]
    sym_total = len({(f["module"], f["offset"]) for f in frames})
    sym_resolved = len({(f["module"], f["offset"]) for f in frames if f["function"] is not None})

    log("symbolize: addr2line over the distinct addresses, then over every frame")
    a2l_distinct = [addr2line_all(distinct, "distinct") for _ in range(REPS)]
    if "burn_heavy" not in a2l_distinct[0][4]:
        raise BenchError("addr2line did not resolve burn_heavy")
    # Every frame, in row order, repeated as the big stream repeats the rows, up to 1M lookups
    # (enough to measure addr2line's per-lookup rate rather than its start-up).
    every = looks * math.ceil(MIN_ROWS / len(looks))
    a2l_every = [addr2line_all(every, "every") for _ in range(REPS)]
    if not llvm_symbolizer():
        raise BenchError("llvm-symbolizer is missing (scripts/setup installs Debian's llvm)")
    log("symbolize: llvm-symbolizer over the distinct addresses, then over every frame")
    llvm_distinct = [llvm_all(distinct, "distinct") for _ in range(REPS)]
    if "burn_heavy" not in llvm_distinct[0][4]:
        raise BenchError("llvm-symbolizer did not resolve burn_heavy")
    llvm_every = [llvm_all(every, "every") for _ in range(REPS)]

    wide = bench_symbolize_wide()

    phz = min(RATES)
    pdata = rec[phz]["perf"][0]["file"]
    psamples = rec[phz]["perf"][0]["samples"]
    pframes = perf_frames(pdata)
    log(f"symbolize: perf script -F ip,sym,srcline over the {phz} Hz perf.data (one run)")
    srcline_out = Tmp.path("perf-srcline.txt")
    ps_src = run(["perf", "script", "-i", pdata, "-F", "ip,sym,srcline"], stdout=srcline_out)
    if "burn_heavy" not in srcline_out.read_text(errors="replace"):
        raise BenchError("perf script did not resolve burn_heavy")
    ps_sym = [run(["perf", "script", "-i", pdata, "-F", "ip,sym"]) for _ in range(REPS)]

    return {
        "hz": hz, "phz": phz, "base_rows": base_rows, "repeat": repeat, "big_rows": big_rows,
        "big_bytes": big.stat().st_size, "big": big,
        "base_frames": base_frames, "big_frames": base_frames * repeat, "skipped": skipped,
        "lookups": len(every), "distinct": len(distinct), "distinct_list": distinct, "sym_distinct": sym_distinct,
        "sym_resolved": sym_resolved, "sym_total": sym_total,
        "big_wall": med([r.wall for r in big_runs]), "big_cpu": med([r.cpu for r in big_runs]),
        "small_wall": med([r.wall for r in small_runs]),
        "small_cpu": med([r.cpu for r in small_runs]),
        "a2l_d_wall": med([x[0] for x in a2l_distinct]), "a2l_d_cpu": med([x[1] for x in a2l_distinct]),
        "a2l_d_resolved": a2l_distinct[0][3],
        "a2l_e_wall": med([x[0] for x in a2l_every]), "a2l_e_cpu": med([x[1] for x in a2l_every]),
        "psamples": psamples, "pframes": pframes,
        "ps_src_wall": ps_src.wall, "ps_src_cpu": ps_src.cpu,
        "ps_sym_wall": med([r.wall for r in ps_sym]), "ps_sym_cpu": med([r.cpu for r in ps_sym]),
        "base_sym": base_sym, "sym_batches": sym_batches,
        "j1_wall": med([r.wall for r in big_j1]), "j1_cpu": med([r.cpu for r in big_j1]),
        "llvm_d_wall": med([x[0] for x in llvm_distinct]),
        "llvm_d_cpu": med([x[1] for x in llvm_distinct]),
        "llvm_d_resolved": llvm_distinct[0][3],
        "llvm_e_wall": med([x[0] for x in llvm_every]), "llvm_e_cpu": med([x[1] for x in llvm_every]),
        "llvm_version": first_line([llvm_symbolizer(), "--version"]) + " " + (
            output([llvm_symbolizer(), "--version"]).splitlines()[1].strip()),
        "wide": wide,
    }


def bench_symbolize_wide():
    """Many distinct frames: a system-wide recording (every process, user and kernel stacks)
    while the workload runs, symbolized from a cold start, against addr2line and
    llvm-symbolizer over its distinct user addresses."""
    raw = Tmp.path("wide.arrow")
    log(f"symbolize: system-wide recording, {SECONDS:g} s at 999 Hz, user and kernel stacks")
    wl = subprocess.Popen([str(a) for a in workload(Tmp.path("report-wide.json"))],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        run([REC, "-e", "profile:uk:999", "-a", "-d", f"{SECONDS:g}s", "-o", raw])
    finally:
        wl.wait()
    schema, batches = read_stream(raw)
    rows = sum(b.num_rows for b in batches)
    t = pa.Table.from_batches(batches)
    uframes = pc.sum(pc.list_value_length(plain(t.column("ustack")))).as_py() or 0
    kframes = pc.sum(pc.list_value_length(plain(t.column("kstack")))).as_py() or 0
    looks, skipped = user_lookups(batches, missing_ok=True)
    distinct = sorted(set(looks))
    runs = {}
    for jobs in ("1", "2"):
        log(f"symbolize: stacks-symbolize -j {jobs} over the system-wide recording (cold)")
        rs = []
        for _ in range(REPS):
            r = run([SYM, "-j", jobs], stdin=raw)
            m = SYM_SUMMARY.search(r.err)
            if not m or int(m.group(1)) != rows:
                raise BenchError(f"stacks-symbolize did not report {rows} rows: {r.err[-300:]}")
            rs.append(r)
        runs[jobs] = rs
    unique = int(m.group(2))
    log("symbolize: addr2line and llvm-symbolizer over its distinct user addresses")
    a2l = [addr2line_all(distinct, "wide") for _ in range(REPS)]
    llvm = [llvm_all(distinct, "wide") for _ in range(REPS)]
    return {
        "rows": rows, "uframes": uframes, "kframes": kframes, "unique": unique,
        "kernel_symbols": "kstack_symbols" in schema.names,
        "distinct": len(distinct), "modules": len({m for m, _ in distinct}),
        "skipped": sum(skipped.values()),
        "j1_wall": med([r.wall for r in runs["1"]]), "j1_cpu": med([r.cpu for r in runs["1"]]),
        "j2_wall": med([r.wall for r in runs["2"]]), "j2_cpu": med([r.cpu for r in runs["2"]]),
        "a2l_wall": med([x[0] for x in a2l]), "a2l_cpu": med([x[1] for x in a2l]),
        "a2l_resolved": a2l[0][3],
        "llvm_wall": med([x[0] for x in llvm]), "llvm_cpu": med([x[1] for x in llvm]),
        "llvm_resolved": llvm[0][3],
    }


# ---------------------------------------------------------------------------------------------
# Stage 4: pack, the big symbolized stream to Parquet; peer: pyarrow's Parquet writer.
# ---------------------------------------------------------------------------------------------


def bench_pack(sym):
    big_store = None
    runs = []
    for i in range(REPS):
        log(f"pack: stacks-symbolize | stacks-pack over {sym['big_rows']} rows, run {i + 1}/{REPS}")
        store = Tmp.path(f"big-store-{i}")
        r = pipeline([[SYM], [PACK, store]], stdin=sym["big"])
        m = re.search(r"stacks-pack: (\d+) rows in", r.err)
        if not m or int(m.group(1)) != sym["big_rows"]:
            raise BenchError(f"stacks-pack did not report {sym['big_rows']} rows: {r.err[-300:]}")
        runs.append((r, dir_bytes(store)))
        if big_store:
            shutil.rmtree(big_store)
        big_store = store
    # Peer: the same symbolized rows (the original recording's symbolized batches, repeated as
    # in the big stream), written by pyarrow with stacks-pack's settings.
    # (pyarrow cannot write dictionary-encoded nested columns: the stack columns are decoded.)
    table = pa.Table.from_batches(sym["sym_batches"] * sym["repeat"])
    table = pa.Table.from_arrays([plain(c) for c in table.columns], names=table.column_names,
                                 metadata=table.schema.metadata)
    peer = []
    for i in range(REPS):
        log(f"pack: pyarrow.parquet.write_table, run {i + 1}/{REPS}")
        path = Tmp.path("pyarrow.parquet")
        ru0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        pq.write_table(table, path, compression="zstd", compression_level=3, use_dictionary=True,
                       write_statistics=True, row_group_size=128 * 1024)
        wall = time.perf_counter() - t0
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        peer.append((wall, cpu, path.stat().st_size))
        path.unlink()
    if pq.ParquetFile(next(Path(big_store).rglob("*.parquet"))).metadata.num_rows == 0:
        raise BenchError("stacks-pack wrote an empty Parquet file")
    return {
        "store": big_store,
        "pipe_wall": med([r.wall for r, _ in runs]),
        "sym_cpu": med([r.cpus[0] for r, _ in runs]),
        "pack_cpu": med([r.cpus[1] for r, _ in runs]),
        "pack_bytes": runs[-1][1],
        "py_wall": med([p[0] for p in peer]),
        "py_cpu": med([p[1] for p in peer]),
        "py_bytes": peer[-1][2],
    }


# ---------------------------------------------------------------------------------------------
# Stage 5: query to profile; peer: perf report.
# ---------------------------------------------------------------------------------------------


def bench_query(rec, storage, sym, pack):
    def stacks_q(store, rows, name):
        runs = []
        for i in range(REPS):
            log(f"query: stacks-query cpu | stacks-pprof over {name}, run {i + 1}/{REPS}")
            pb = Tmp.path("cpu.pb.gz")
            r = pipeline([[QUERY, "-d", store, "cpu"], [PPROF]], stdout=pb)
            with open(pb, "rb") as f:
                if f.read(2) != b"\x1f\x8b":
                    raise BenchError("stacks-pprof did not write a gzip file")
            runs.append(r)
        top = output(["go", "tool", "pprof", "-top", "-symbolize=none", pb])
        if "burn_heavy" not in top:
            raise BenchError(f"go tool pprof -top of the {name} profile does not show burn_heavy")
        return {"rows": rows, "wall": med([r.wall for r in runs]), "cpu": med([r.cpu for r in runs]),
                "q_cpu": med([r.cpus[0] for r in runs]), "p_cpu": med([r.cpus[1] for r in runs])}

    def perf_rep(data, samples, mode):
        runs = []
        for _ in range(REPS):
            out = Tmp.path("perf-report.txt")
            runs.append(run(["perf", "report", "-i", data, "--stdio", "--no-children", "-g", mode],
                            stdout=out))
            if "burn_heavy" not in out.read_text(errors="replace"):
                raise BenchError(f"perf report -g {mode} does not show burn_heavy")
        return {"rows": samples, "wall": med([r.wall for r in runs]), "cpu": med([r.cpu for r in runs])}

    hz = max(RATES)
    res = {
        "big": stacks_q(pack["store"], sym["big_rows"], f"{sym['big_rows']} rows"),
        "small": stacks_q(storage[hz]["store"], storage[hz]["samples"], f"the {hz} Hz recording"),
    }
    p = rec[hz]["perf"][0]
    log(f"query: perf report over the {hz} Hz perf.data")
    res["perf_small_none"] = perf_rep(p["file"], p["samples"], "none")
    res["perf_small_folded"] = perf_rep(p["file"], p["samples"], "folded")

    rate = min(HIGH_RATE, int(Path("/proc/sys/kernel/perf_event_max_sample_rate").read_text()))
    hi = Tmp.path("perf-high.data")
    log(f"query: perf record at {rate} Hz for a larger perf.data")
    run(perf_record(rate, hi, workload(Tmp.path("report-high.json"), 2 * SECONDS)))
    hi_samples, _ = perf_counts(hi)
    res["hi_rate"], res["hi_bytes"] = rate, hi.stat().st_size
    res["perf_big_none"] = perf_rep(hi, hi_samples, "none")
    res["perf_big_folded"] = perf_rep(hi, hi_samples, "folded")
    return res


# ---------------------------------------------------------------------------------------------
# Report.
# ---------------------------------------------------------------------------------------------


def n(x, d=0):
    return f"{x:,.{d}f}"


def ratio(a, b):
    return f"{a / b:.2f}×" if b else "n/a"


def loadavg():
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def first_line(argv):
    try:
        return output(argv).splitlines()[0].strip()
    except (BenchError, OSError, IndexError):
        return "unknown"


def machine():
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = "unknown"
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem = f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
    try:
        commit = output(["git", "-C", ROOT, "describe", "--always", "--dirty"]).strip()
    except (BenchError, OSError):
        commit = "unknown"
    return {
        "nproc": os.cpu_count(), "cpu": cpu, "mem": mem, "kernel": os.uname().release,
        "perf": first_line(["perf", "--version"]),
        "addr2line": first_line(["addr2line", "--version"]),
        "rec": first_line([REC, "--version"]), "commit": commit,
        "pyarrow": pa.__version__, "python": sys.version.split()[0],
    }


def symbolize_section(s):
    """The lines of section 3 (symbolization)."""
    L = []
    w = L.append
    w("## 3. Symbolization")
    w("")
    w(f"Input: the {s['hz']} Hz stacks recording ({n(s['base_rows'])} rows, {n(s['base_frames'])} "
      f"user frames, {s['distinct']} distinct (module, lookup address)) and a big stream of its "
      f"batches repeated {s['repeat']}× ({n(s['big_rows'])} rows, {n(s['big_frames'])} user "
      f"frames, {n(s['big_bytes'])} bytes). What each tool does:")
    w("")
    w("- `stacks-symbolize < IN > OUT`: every row's stack, inlined frames, file:line, demangled "
      "and raw symbols, debug files found by build id; each distinct (build id, offset) is "
      f"resolved once per stream and kept ({s['sym_distinct']} distinct frames reported by the "
      f"tool; {s['sym_resolved']} of {s['sym_total']} distinct user (module, offset) got a "
      "function); a batch's `stack` column is copied group by group from a table of its distinct "
      "frames. Threads: decoding, symbolizing and encoding overlap; `-j` sets the symbolizer "
      "workers (default: the 2 cores). Output to /dev/null for the big stream.")
    mods = ", ".join(sorted({os.path.basename(m) for m, _ in s["distinct_list"]}))
    w(f"- `addr2line -a -f -i -C -e MODULE` ({s.get('a2l_version', 'binutils')}) and "
      f"`llvm-symbolizer --obj=MODULE --inlining --demangle --print-address` "
      f"({s['llvm_version']}), one process per module ({mods}), "
      "addresses on stdin: the file offset turned into the ELF address with the LOAD headers "
      "(`readelf -lW`), return addresses at −1 as stacks-symbolize does. Once over the distinct "
      f"addresses (addr2line: {s['a2l_d_resolved']}, llvm-symbolizer: {s['llvm_d_resolved']} of "
      f"{s['distinct']} got a function), once over every frame of the original recording in row "
      f"order, repeated to {n(s['lookups'])} lookups (neither caches across lookups: one lookup "
      "per frame, like a tool that does not deduplicate).")
    w(f"- `perf script -F ip,sym,srcline` over the {s['phz']} Hz perf.data of section 1 "
      f"({n(s['psamples'])} samples, {n(s['pframes'])} callchain entries; one run), and "
      "`-F ip,sym` (no file:line) for reference. perf asks an addr2line child process for "
      "each callchain entry's file:line and waits for the answer, so its wall time is mostly "
      "waiting (compare its CPU time); at 999 Hz this would take minutes.")
    if s["skipped"]:
        whys = "; ".join(f"{k} ({n(v)})" for k, v in sorted(s["skipped"].items(), key=lambda x: -x[1]))
        w(f"- {n(sum(s['skipped'].values()))} of the recording's {n(s['base_frames'])} user frames "
          f"are left out of the peers' input: {whys}. stacks-symbolize is given them all (it "
          "keeps frames it cannot resolve, with the reason).")
    w("")
    w("| tool | input | wall s | CPU s | rows (samples)/s | frames/s |")
    w("|---|---|---:|---:|---:|---:|")
    sym_fps = s["big_frames"] / s["big_wall"]
    a2l_e_fps = s["lookups"] / s["a2l_e_wall"]
    llvm_e_fps = s["lookups"] / s["llvm_e_wall"]
    ps_fps = s["pframes"] / s["ps_src_wall"]
    w(f"| stacks-symbolize | big stream, {n(s['big_rows'])} rows | {s['big_wall']:.2f} | "
      f"{s['big_cpu']:.2f} | {n(s['big_rows'] / s['big_wall'])} | {n(sym_fps)} |")
    w(f"| stacks-symbolize -j 1 | same | {s['j1_wall']:.2f} | {s['j1_cpu']:.2f} | "
      f"{n(s['big_rows'] / s['j1_wall'])} | {n(s['big_frames'] / s['j1_wall'])} |")
    w(f"| stacks-symbolize | original recording, {n(s['base_rows'])} rows | {s['small_wall']:.3f} | "
      f"{s['small_cpu']:.3f} | {n(s['base_rows'] / s['small_wall'])} | "
      f"{n(s['base_frames'] / s['small_wall'])} |")
    w(f"| addr2line | {s['distinct']} distinct addresses | {s['a2l_d_wall']:.3f} | "
      f"{s['a2l_d_cpu']:.3f} | | {n(s['distinct'] / s['a2l_d_wall'])} |")
    w(f"| addr2line | every frame, repeated: {n(s['lookups'])} lookups | "
      f"{s['a2l_e_wall']:.3f} | {s['a2l_e_cpu']:.3f} | | {n(a2l_e_fps)} |")
    w(f"| llvm-symbolizer | {s['distinct']} distinct addresses | {s['llvm_d_wall']:.3f} | "
      f"{s['llvm_d_cpu']:.3f} | | {n(s['distinct'] / s['llvm_d_wall'])} |")
    w(f"| llvm-symbolizer | every frame, repeated: {n(s['lookups'])} lookups | "
      f"{s['llvm_e_wall']:.3f} | {s['llvm_e_cpu']:.3f} | | {n(llvm_e_fps)} |")
    w(f"| perf script -F ip,sym,srcline | {s['phz']} Hz perf.data, {n(s['psamples'])} samples | "
      f"{s['ps_src_wall']:.2f} | {s['ps_src_cpu']:.2f} | {n(s['psamples'] / s['ps_src_wall'])} | "
      f"{n(ps_fps)} |")
    w(f"| perf script -F ip,sym | same | {s['ps_sym_wall']:.3f} | {s['ps_sym_cpu']:.3f} | "
      f"{n(s['psamples'] / s['ps_sym_wall'])} | {n(s['pframes'] / s['ps_sym_wall'])} |")
    w("")
    w(f"- Frames per second, stacks-symbolize (big stream, cached) ÷ addr2line (every frame, "
      f"uncached): **{ratio(sym_fps, a2l_e_fps)}**; ÷ llvm-symbolizer: "
      f"**{ratio(sym_fps, llvm_e_fps)}**; ÷ perf script with srcline: "
      f"**{ratio(sym_fps, ps_fps)}** by wall time, "
      f"{ratio(s['big_frames'] / s['big_cpu'], s['pframes'] / s['ps_src_cpu'])} by CPU time.")
    w(f"- Same distinct addresses from a cold start: stacks-symbolize over the whole original "
      f"recording took {ratio(s['small_wall'], s['a2l_d_wall'])} the wall time of addr2line and "
      f"{ratio(s['small_wall'], s['llvm_d_wall'])} that of llvm-symbolizer over just its "
      "distinct addresses (below 1: stacks faster).")
    w("")
    x = s["wide"]
    w("### Many distinct frames")
    w("")
    w(f"A system-wide recording (`stacks-record -e profile:uk:999 -a -d {SECONDS:g}s`, every "
      f"process on the machine while the workload runs): {n(x['rows'])} rows, {n(x['uframes'])} "
      f"user and {n(x['kframes'])} kernel frames; stacks-symbolize resolved {n(x['unique'])} "
      "distinct frames from a cold start (kernel frames from "
      + ("the symbols recorded with the stream" if x["kernel_symbols"] else
         "this boot's kallsyms") +
      f"). The peers get the {n(x['distinct'])} distinct user (module, address) lookups of "
      f"{x['modules']} modules still on disk ({n(x['skipped'])} frames left out: not normalized, "
      "or module gone), once each: they do no kernel frames and no deduplication of their own.")
    w("")
    w("| tool | wall s | CPU s | distinct frames/s | got a function |")
    w("|---|---:|---:|---:|---:|")
    w(f"| stacks-symbolize (-j 2) | {x['j2_wall']:.3f} | {x['j2_cpu']:.3f} | "
      f"{n(x['unique'] / x['j2_wall'])} | |")
    w(f"| stacks-symbolize -j 1 | {x['j1_wall']:.3f} | {x['j1_cpu']:.3f} | "
      f"{n(x['unique'] / x['j1_wall'])} | |")
    w(f"| addr2line | {x['a2l_wall']:.3f} | {x['a2l_cpu']:.3f} | "
      f"{n(x['distinct'] / x['a2l_wall'])} | {n(x['a2l_resolved'])} of {n(x['distinct'])} |")
    w(f"| llvm-symbolizer | {x['llvm_wall']:.3f} | {x['llvm_cpu']:.3f} | "
      f"{n(x['distinct'] / x['llvm_wall'])} | {n(x['llvm_resolved'])} of {n(x['distinct'])} |")
    w("")
    w("The criterion benchmark (`cargo bench -p stacks-symbolize`; `STACKS_BENCH_STREAM=FILE` "
      "for a recording instead of its synthetic 100,000 rows over its own functions) measures "
      "the same two figures in-process: cached rows/s and cold distinct frames/s.")
    w("")
    return L


def report(m, load0, load1, elapsed, rec, residual, storage, sym, pack, q):
    L = []
    w = L.append
    w("<!-- BENCHMARKS.md — written by scripts/bench (scripts/bench.py); do not edit by hand. -->")
    w("# Benchmarks")
    w("")
    w(f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC} in one run of "
      f"`scripts/bench` ({elapsed / 60:.1f} min), every stage next to its peer on the same "
      "workload, machine and moment.")
    w("")
    w(f"- Machine: {m['nproc']} CPUs ({m['cpu']}), {m['mem']} RAM, Linux {m['kernel']}; "
      f"load average {load0} at start, {load1} at the end")
    w(f"- Tools: {m['rec']} (tree `{m['commit']}`), {m['perf']}, {m['addr2line']}, "
      f"pyarrow {m['pyarrow']} (Python {m['python']})")
    w(f"- Workload: `stacks-workload cpu --seconds {SECONDS:g}` (release, frame pointers): "
      "single-threaded, `burn_heavy`/`burn_light` 3:1; throughput = work units per wall second, "
      "as the workload reports it")
    w(f"- Every configuration ran {REPS} times; figures are medians (throughput: median and "
      "min–max)")
    w("")
    w("Reproduce (as root, or with sudo; installs what is missing, builds release): "
      "`scripts/bench`. `BENCH_SECONDS` and `BENCH_REPS` change duration and repetitions.")
    w("")

    # Stage 1
    w("## 1. Recording: cost to the workload and to the machine")
    w("")
    w("`stacks-record -e profile:u:HZ -o raw.arrow -- WORKLOAD` against "
      "`perf record -e cpu-clock -F HZ -g --user-callchains --no-buildid-cache -o perf.data -- "
      "WORKLOAD` (both: user stacks only, frame pointers, cpu-clock at a fixed period), and the "
      "workload alone. Runs interleaved (bare, stacks, perf, rotated each repetition).")
    w("")
    w("*Profiler CPU* is the profiler's own user+sys time: `wait4` rusage of the profiler (which "
      "includes the workload it reaps) minus the workload's CPU time from its own report "
      "(`/proc/self/schedstat`), minus what that report misses on a bare run (exec, loading, exit: "
      f"median {residual * 1e3:.1f} ms). Work done in the kernel at sample time (BPF program, "
      "perf's callchain walk) runs in the workload's context: it shows as lost throughput, not "
      "here. *Elapsed beyond the workload* is profiler wall time minus workload wall time "
      "(start-up, BPF loading, draining, perf.data finishing). Per-sample CPU includes each "
      "profiler's fixed start-up cost, which dominates at 99 Hz. stacks-record opens cpu-clock "
      "on every CPU and keeps the target's samples in its BPF program; perf record opens "
      "per-task events: what the BPF program costs on the CPU the workload is not on is in "
      "none of these figures.")
    w("")
    w("In the ratio column, throughput: higher is better; everything else: lower is better.")
    w("")
    for hz in RATES:
        r = rec[hz]
        thr = {c: [x["throughput"] for x in r[c]] for c in r}
        bare = med(thr["bare"])

        def cell(c, key, d=0, scale=1.0):
            return n(med([x[key] * scale for x in r[c]]), d)

        def rat(key, scale=1.0):
            a, b = med([x[key] for x in r["stacks"]]), med([x[key] for x in r["perf"]])
            return ratio(a * scale, b * scale)

        w(f"### {hz} Hz")
        w("")
        w("| | bare | stacks-record | perf record | stacks ÷ perf |")
        w("|---|---:|---:|---:|---:|")
        w("| workload throughput, units/s | " + " | ".join(
            f"{n(med(thr[c]))} ({n(min(thr[c]))}–{n(max(thr[c]))})" for c in ("bare", "stacks", "perf"))
          + f" | {ratio(med(thr['stacks']), med(thr['perf']))} |")
        w("| throughput vs bare | 100% | " + " | ".join(
            f"{100 * med(thr[c]) / bare:.1f}%" for c in ("stacks", "perf")) + " | |")
        w(f"| samples | | {cell('stacks', 'samples')} | {cell('perf', 'samples')} | "
          f"{rat('samples')} |")
        w(f"| lost events (sum of runs) | | {n(sum(x['lost'] for x in r['stacks']))} | "
          f"{n(sum(x['lost'] for x in r['perf']))} | |")
        w(f"| profiler CPU, ms | | {cell('stacks', 'own_cpu', 1, 1e3)} | "
          f"{cell('perf', 'own_cpu', 1, 1e3)} | {rat('own_cpu')} |")
        spp = {c: med([x["own_cpu"] / x["samples"] * 1e6 for x in r[c]]) for c in ("stacks", "perf")}
        w(f"| profiler CPU per sample, µs | | {n(spp['stacks'], 1)} | {n(spp['perf'], 1)} | "
          f"{ratio(spp['stacks'], spp['perf'])} |")
        ext = {c: med([(x["wall"] - x["work_wall"]) * 1e3 for x in r[c]]) for c in r}
        w(f"| elapsed beyond the workload, ms | {n(ext['bare'], 1)} | {n(ext['stacks'], 1)} | "
          f"{n(ext['perf'], 1)} | {ratio(ext['stacks'], ext['perf'])} |")
        w(f"| output bytes | | {cell('stacks', 'bytes')} | {cell('perf', 'bytes')} | "
          f"{rat('bytes')} |")
        bps = {c: med([x["bytes"] / x["samples"] for x in r[c]]) for c in ("stacks", "perf")}
        w(f"| output bytes per sample | | {n(bps['stacks'], 1)} | {n(bps['perf'], 1)} | "
          f"{ratio(bps['stacks'], bps['perf'])} |")
        w("")
    w("Samples: rows of kind `profile` in the stream (checked against stacks-record's summary); "
      "`PERF_RECORD_SAMPLE` records in `perf report -D`. Lost: `lost` rows; `PERF_RECORD_LOST*`.")
    w("")

    # Stage 2
    w("## 2. Storage")
    w("")
    w("Run 1 of each rate from section 1: the raw stream through `stacks-symbolize | stacks-pack "
      "DIR` (zstd level 3, dictionaries, page statistics) against the perf.data of the perf run "
      "(uncompressed; gzip -6 of it shown for reference). Both hold user stacks only.")
    w("")
    w("| rate | file | bytes | samples | bytes/sample | ÷ perf.data |")
    w("|---|---|---:|---:|---:|---:|")
    for hz in RATES:
        s = storage[hz]
        pbs = s["perf"] / s["perf_samples"]
        for name, b, k in (("raw Arrow stream (stacks-record)", s["raw"], s["samples"]),
                           ("Parquet (symbolize + pack)", s["parquet"], s["samples"]),
                           ("perf.data", s["perf"], s["perf_samples"]),
                           ("perf.data, gzip -6", s["perf_gz"], s["perf_samples"])):
            w(f"| {hz} Hz | {name} | {n(b)} | {n(k)} | {n(b / k, 1)} | {ratio(b / k, pbs)} |")
    w("")

    # Stage 3
    s = sym
    s3 = symbolize_section(s)
    L.extend(s3)

    # Stage 4
    p = pack
    rows = s["big_rows"]
    w("## 4. Packing to Parquet")
    w("")
    w(f"The big symbolized stream ({n(rows)} rows) into Parquet. stacks-pack reads it from "
      "`stacks-symbolize < big.arrow |` (its CPU time is its own, from `wait4`); the peer is "
      "pyarrow's C++ writer (`pyarrow.parquet.write_table`, zstd 3, dictionaries, statistics, "
      "128 Ki-row groups: stacks-pack's settings) over the same rows held in memory, CPU from "
      "`getrusage`. The repeated rows compress far better than a real recording (section 2 has "
      "the real sizes).")
    w("")
    w("| writer | CPU s | rows/s of CPU | bytes | bytes/row |")
    w("|---|---:|---:|---:|---:|")
    w(f"| stacks-pack | {p['pack_cpu']:.2f} | {n(rows / p['pack_cpu'])} | {n(p['pack_bytes'])} | "
      f"{p['pack_bytes'] / rows:.2f} |")
    w(f"| pyarrow.parquet.write_table | {p['py_cpu']:.2f} | {n(rows / p['py_cpu'])} | "
      f"{n(p['py_bytes'])} | {p['py_bytes'] / rows:.2f} |")
    w("")
    w(f"stacks-pack ÷ pyarrow, rows per CPU second: **{ratio(p['py_cpu'], p['pack_cpu'])}**. "
      f"The whole `stacks-symbolize | stacks-pack` pipeline took {p['pipe_wall']:.2f} s wall "
      f"({n(rows / p['pipe_wall'])} rows/s; symbolize {p['sym_cpu']:.2f} s CPU, "
      f"pack {p['pack_cpu']:.2f} s CPU).")
    w("")

    # Stage 5
    w("## 5. Query to profile")
    w("")
    w("`stacks-query -d DIR cpu | stacks-pprof > cpu.pb.gz` (group by process, thread and whole "
      "symbolized stack; gzipped pprof) against `perf report --stdio --no-children -g none` "
      "(flat, per symbol) and `-g folded` (per symbol, with folded call chains). Small: the "
      f"{s['hz']} Hz recordings of section 1 (stacks store from section 2, perf.data from the perf "
      f"run). Large: the {n(rows)}-row store of section 4 against a perf.data recorded for this "
      f"at {n(q['hi_rate'])} Hz ({2 * SECONDS:g} s workload, {n(q['hi_bytes'])} bytes).")
    w("")
    w("| command | input rows (samples) | wall s | CPU s | rows/s |")
    w("|---|---:|---:|---:|---:|")
    for key, name in (("small", "stacks-query cpu \\| stacks-pprof"),
                      ("perf_small_none", "perf report -g none"),
                      ("perf_small_folded", "perf report -g folded"),
                      ("big", "stacks-query cpu \\| stacks-pprof"),
                      ("perf_big_none", "perf report -g none"),
                      ("perf_big_folded", "perf report -g folded")):
        x = q[key]
        w(f"| {name} | {n(x['rows'])} | {x['wall']:.3f} | {x['cpu']:.3f} | "
          f"{n(x['rows'] / x['wall'])} |")
    w("")
    big, small = q["big"], q["small"]
    w(f"- Large, rows/s, stacks ÷ perf report -g folded: **{ratio(big['rows'] / big['wall'], q['perf_big_folded']['rows'] / q['perf_big_folded']['wall'])}**; "
      f"÷ -g none: {ratio(big['rows'] / big['wall'], q['perf_big_none']['rows'] / q['perf_big_none']['wall'])} "
      f"(stacks-query {big['q_cpu']:.2f} s CPU, stacks-pprof {big['p_cpu']:.2f} s CPU).")
    w(f"- Small (same workload and rate), wall time, stacks ÷ perf report -g folded: "
      f"{ratio(small['wall'], q['perf_small_folded']['wall'])} (below 1: stacks faster; mostly "
      "start-up at this size).")
    w("")

    # Summary
    w("## What the numbers say")
    w("")
    for hz in RATES:
        r = rec[hz]
        thr = {c: [x["throughput"] for x in r[c]] for c in r}
        bare = med(thr["bare"])

        def change(c):
            d = 100 * (med(thr[c]) / bare - 1)
            return f"{abs(d):.1f}% {'lower' if d < 0 else 'higher'}"

        def overlaps(c):
            return min(thr[c]) <= max(thr["bare"]) and max(thr[c]) >= min(thr["bare"])

        noise = [c for c in ("stacks", "perf") if overlaps(c)]
        note = {2: "; both within run-to-run noise (their min–max ranges overlap the bare runs')",
                1: f"; the {'stacks-record' if noise == ['stacks'] else 'perf record'} figure is "
                   "within run-to-run noise (its min–max range overlaps the bare runs')",
                0: ""}[len(noise)]
        cs = med([x["own_cpu"] for x in r["stacks"]]) * 1e3
        cp = med([x["own_cpu"] for x in r["perf"]]) * 1e3
        w(f"- At {hz} Hz the workload's throughput was {change('stacks')} under stacks-record and "
          f"{change('perf')} under perf record{note}. The profiler processes themselves used "
          f"{cs:.0f} ms (stacks-record) and {cp:.0f} ms (perf record) of CPU for a {SECONDS:g} s "
          "recording.")
    st = storage[max(RATES)]
    w(f"- A raw stacks stream is {ratio(st['raw'] / st['samples'], st['perf'] / st['perf_samples'])} "
      f"the size of perf.data per sample (it carries module path and build id per frame); "
      f"after symbolize + pack the Parquet store is "
      f"{ratio(st['parquet'] / st['samples'], st['perf'] / st['perf_samples'])} of it, with "
      "functions, inlines and lines included.")
    w(f"- With its {s['sym_distinct']} distinct frames resolved once, stacks-symbolize "
      f"processed {n(s['big_rows'] / s['big_wall'])} rows/s. Querying a million rows into a pprof runs at "
      f"{n(big['rows'] / big['wall'])} rows/s against perf report's "
      f"{n(q['perf_big_folded']['rows'] / q['perf_big_folded']['wall'])} samples/s (-g folded).")
    w("")
    return "\n".join(L)


def symbolize_only():
    """BENCH_ONLY=symbolize: one stacks-record run at the high rate and one perf record run at
    the low rate (the inputs section 3 needs), then section 3 replaces the one in BENCH_OUT."""
    hi, lo = max(RATES), min(RATES)
    raw, data = Tmp.path(f"raw-{hi}.arrow"), Tmp.path(f"perf-{lo}.data")
    log(f"symbolize only: stacks-record at {hi} Hz, perf record at {lo} Hz")
    run([REC, "-e", f"profile:u:{hi}", "-o", raw, "--", *workload(Tmp.path("r1.json"))])
    run(perf_record(lo, data, workload(Tmp.path("r2.json"))))
    samples, _ = perf_counts(data)
    rec = {hi: {"stacks": [{"file": raw}]}, lo: {"perf": [{"file": data, "samples": samples}]}}
    sym = bench_symbolize(rec)
    text = OUT.read_text()
    start = text.index("## 3. Symbolization")
    end = text.index("\n## 4.", start) + 1
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    section = symbolize_section(sym)
    section.insert(1, "")
    section.insert(2, f"*This section was measured {when} on its own (`BENCH_ONLY=symbolize "
                      f"scripts/bench`; load average {loadavg()} at the end).*")
    OUT.write_text(text[:start] + "\n".join(section) + "\n" + text[end:])
    log(f"wrote section 3 of {OUT}")


def main():
    if os.environ.get("BENCH_ONLY") == "symbolize":
        if os.geteuid() != 0:
            raise BenchError("run as root (stacks-record loads BPF programs)")
        Tmp.dir = Path(tempfile.mkdtemp(prefix="stacks-bench-", dir="/tmp"))
        try:
            symbolize_only()
        finally:
            if not KEEP:
                shutil.rmtree(Tmp.dir, ignore_errors=True)
        return
    if os.geteuid() != 0:
        raise BenchError("run as root (stacks-record loads BPF programs); scripts/bench uses sudo")
    for b in (REC, SYM, PACK, QUERY, PPROF, WORK):
        if not os.access(b, os.X_OK):
            raise BenchError(f"{b} is missing: build with `cargo build --release --workspace --bins`")
    for tool in ("perf", "addr2line", "readelf", "go"):
        if not shutil.which(tool):
            raise BenchError(f"{tool} is missing (scripts/bench installs it)")
    load0 = loadavg()
    if float(load0.split()[0]) > 0.5:
        log(f"warning: load average is {load0}; figures will be noisy (the file records it)")
    Tmp.dir = Path(tempfile.mkdtemp(prefix="stacks-bench-", dir="/tmp"))
    t0 = time.time()
    try:
        m = machine()
        rec, residual = bench_recorder()
        storage = bench_storage(rec)
        sym = bench_symbolize(rec)
        pack = bench_pack(sym)
        q = bench_query(rec, storage, sym, pack)
        text = report(m, load0, loadavg(), time.time() - t0, rec, residual, storage, sym, pack, q)
    finally:
        if KEEP:
            log(f"kept {Tmp.dir}")
        else:
            shutil.rmtree(Tmp.dir, ignore_errors=True)
    OUT.write_text(text)
    print(text)
    log(f"wrote {OUT}")


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        print(f"bench: error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("bench: error: interrupted", file=sys.stderr)
        sys.exit(130)
