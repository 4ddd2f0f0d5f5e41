#!/usr/bin/env python3
# scripts/bench_store.py — the store, measured on a real multi-process recording: symbolize,
# pack and query a ten-million-sample store, each next to its peer (perf report, pyarrow) and,
# given BENCH_BEFORE (a directory of an earlier build's binaries), next to that build on the
# same rows. Writes its section of BENCHMARKS.md (between markers). Run through scripts/bench.
"""Store benchmark: a real recording (`go build -a net/http`, every compiler process, kernel
and user stacks at 999 Hz) and perf record of the same build; the recording symbolized,
replicated in time to BENCH_STORE_ROWS rows (default 10M), packed, and queried with every
bundled query. Environment: CARGO_TARGET_DIR, BENCH_OUT, BENCH_REPS (default 3), BENCH_KEEP
(keep the scratch directory), BENCH_BEFORE, BENCH_STORE_ROWS, BENCH_PEER_ROWS (default 1M:
rows for the pyarrow writer comparison, held in memory), BENCH_REUSE (with BENCH_KEEP: reuse
its recordings)."""

import json
import os
import re
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
ROWS = int(os.environ.get("BENCH_STORE_ROWS") or 10_000_000)
PEER_ROWS = int(os.environ.get("BENCH_PEER_ROWS") or 1_000_000)
BEFORE = Path(os.environ["BENCH_BEFORE"]) if os.environ.get("BENCH_BEFORE") else None
BEGIN, END = "<!-- bench-store:begin -->", "<!-- bench-store:end -->"
BUILD = ["go", "build", "-a", "-o", "/dev/null", "net/http"]


class BenchError(Exception):
    pass


def log(msg):
    print(f"bench-store: {msg}", file=sys.stderr, flush=True)


def tool(name, before=False):
    return str((BEFORE if before else BIN) / name)


# Generators run in their own Python process, so that every measured process is a small
# parent's child (a child forked from a big process inherits its RSS high-water mark).

# argv: IN OUT N [plain] — the stream IN written again and again, each copy shifted in time to
# follow the previous one, to N rows on OUT (`-`: stdout; N 0: one copy); `plain`: dictionaries decoded and
# the schema version set to 1 (what builds before version 2 read).
GEN = r"""
import sys
import pyarrow as pa, pyarrow.compute as pc, pyarrow.ipc as ipc
src, dst, total, plain = sys.argv[1], sys.argv[2], int(sys.argv[3]), "plain" in sys.argv[4:]
t = ipc.open_stream(src).read_all()
md = dict(t.schema.metadata or {})

def one_dictionary(c):
    # Stack dictionaries grow by deltas and start over when full: within a generation the
    # last batch's dictionary holds every earlier key's entry. The generations' last
    # dictionaries, one after the other, make one dictionary every batch is re-keyed against
    # (its keys shifted by where its generation starts), so the copies share it.
    gens, chunk_gen = [], []
    for ch in c.chunks:
        d = ch.dictionary
        if gens and len(d) >= len(gens[-1]) and d.slice(0, len(gens[-1])).equals(gens[-1]):
            gens[-1] = d
        else:
            gens.append(d)
        chunk_gen.append(len(gens) - 1)
    starts = [0]
    for d in gens:
        starts.append(starts[-1] + len(d))
    whole = pa.concat_arrays(gens)
    return pa.chunked_array(
        [pa.DictionaryArray.from_arrays(pc.add(ch.indices, pa.scalar(starts[g], ch.indices.type)), whole)
         for ch, g in zip(c.chunks, chunk_gen)], c.type)

def decoded(c):
    return pa.chunked_array([ch.dictionary_decode() for ch in c.chunks], c.type.value_type)

dicts = [pa.types.is_dictionary(f.type) for f in t.schema]
if plain:
    cols = [decoded(c) if d else c for c, d in zip(t.columns, dicts)]
    md[b"stacks.schema_version"] = b"1"
else:
    cols = [one_dictionary(c) if d else c for c, d in zip(t.columns, dicts)]
fields = [pa.field(f.name, c.type, f.nullable, f.metadata) for f, c in zip(t.schema, cols)]
t = pa.Table.from_arrays(cols, schema=pa.schema(fields, metadata=md))
total = total or t.num_rows
i = t.schema.get_field_index("time")
typ = t.schema.field(i).type
times = t.column(i).cast(pa.int64())
span = pc.max(times).as_py() - pc.min(times).as_py() + 10_000_000
out = sys.stdout.buffer if dst == "-" else pa.OSFile(dst, "wb")
with ipc.new_stream(out, t.schema) as w:
    done = k = 0
    while done < total:
        n = min(t.num_rows, total - done)
        part = t.slice(0, n).set_column(i, t.schema.field(i), pc.add(times.slice(0, n), k * span).cast(typ))
        for b in part.to_batches(max_chunksize=65536):
            w.write_batch(b)
        done, k = done + n, k + 1
out.flush() if dst == "-" else out.close()
"""

# argv: IN N — pyarrow's Parquet writer over the first N rows of IN (decoded), with
# stacks-pack's settings; prints rows, CPU s of the write, bytes.
PEER = r"""
import os, resource, sys, tempfile
import pyarrow as pa, pyarrow.ipc as ipc, pyarrow.parquet as pq
t = ipc.open_stream(sys.argv[1]).read_all()
cols = [pa.chunked_array([ch.dictionary_decode() for ch in c.chunks], c.type.value_type)
        if pa.types.is_dictionary(c.type) else c for c in t.columns]
t = pa.Table.from_arrays(cols, names=t.column_names)
n = int(sys.argv[2])
reps = (n + t.num_rows - 1) // t.num_rows
t = pa.concat_tables([t] * reps).slice(0, n)
path = tempfile.mktemp(suffix=".parquet")
r0 = resource.getrusage(resource.RUSAGE_SELF)
pq.write_table(t, path, compression="zstd", compression_level=3, use_dictionary=True,
               write_statistics=True, row_group_size=128 * 1024)
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(t.num_rows, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), os.path.getsize(path))
os.unlink(path)
"""


class Ran:
    """A pipeline's wall time and, per process, CPU seconds and peak RSS bytes."""

    def __init__(self, wall, cpus, rss, err):
        self.wall, self.cpus, self.rss, self.err = wall, cpus, rss, err


def pipeline(cmds, stdin=None, stdout=None, env=None):
    """Run cmds connected by pipes; CPU and peak RSS of each from wait4. Fails on non-zero."""
    fin = open(stdin, "rb") if stdin else subprocess.DEVNULL
    fout = open(stdout, "wb") if stdout else subprocess.DEVNULL
    errs = [tempfile.TemporaryFile() for _ in cmds]
    procs = []
    t0 = time.perf_counter()
    prev = fin
    for i, argv in enumerate(cmds):
        last = i == len(cmds) - 1
        p = subprocess.Popen([str(a) for a in argv], stdin=prev, env=env, stderr=errs[i],
                             stdout=fout if last else subprocess.PIPE)
        if i > 0:
            prev.close()
        prev = p.stdout
        procs.append(p)
    cpus, rss = [], []
    for p in procs:
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        cpus.append(ru.ru_utime + ru.ru_stime)
        rss.append(ru.ru_maxrss * 1024)
    wall = time.perf_counter() - t0
    for f in (fin, fout):
        if hasattr(f, "close"):
            f.close()
    texts = []
    for e in errs:
        e.seek(0)
        texts.append(e.read().decode(errors="replace"))
    for p, argv, text in zip(procs, cmds, texts):
        if p.returncode != 0:
            tail = " | ".join(text.strip().splitlines()[-3:])
            raise BenchError(f"`{' '.join(map(str, argv))}` exited with {p.returncode}: {tail}")
    return Ran(wall, cpus, rss, "\n".join(texts))


def med_of(runs, f):
    return statistics.median(f(r) for r in runs)


def repeat(n, f):
    return [f(i) for i in range(n)]


def size(path):
    p = Path(path)
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size


def record(work):
    """The build under stacks-record and under perf record, each with a cold Go cache."""
    env = dict(os.environ, GOPATH=str(work / "gopath"), GOFLAGS="-mod=mod")
    res = {}
    if os.environ.get("BENCH_REUSE") and (work / "record.json").exists():
        log(f"reusing the recordings in {work} (BENCH_REUSE)")
        return json.loads((work / "record.json").read_text())
    for name, argv in [
        ("stacks", [tool("stacks-record"), "-e", "profile:uk:999", "-o", work / "raw.arrow", "--", *BUILD]),
        ("perf", ["perf", "record", "-q", "-e", "cpu-clock", "-F", "999", "-g", "-o", work / "perf.data", "--", *BUILD]),
    ]:
        shutil.rmtree(work / "gocache", ignore_errors=True)
        env["GOCACHE"] = str(work / "gocache")
        log(f"recording `{' '.join(BUILD)}` under {name}")
        res[name] = pipeline([argv], env=env)
    m = re.search(r"(\d+) samples from (\d+) processes", res["stacks"].err)
    if not m:
        raise BenchError(f"no summary from stacks-record: {res['stacks'].err[-300:]}")
    dump = subprocess.run(["perf", "report", "-D", "-i", work / "perf.data"], capture_output=True, text=True)
    perf_samples = dump.stdout.count(": PERF_RECORD_SAMPLE(")
    out = {"samples": int(m.group(1)), "processes": int(m.group(2)),
           "raw_bytes": size(work / "raw.arrow"), "perf_samples": perf_samples,
           "perf_bytes": size(work / "perf.data")}
    (work / "record.json").write_text(json.dumps(out))
    return out


def symbolize(work, rec):
    """stacks-symbolize over the recording: rows/s, now and (BENCH_BEFORE) before."""
    raw = work / "raw.arrow"
    res = {}
    runs = repeat(REPS, lambda _: pipeline([[tool("stacks-symbolize")]], stdin=raw, stdout=work / "sym.arrow"))
    m = re.search(r"(\d+) rows, (\d+) distinct frames", runs[-1].err)
    res["rows"], res["frames"] = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    res["now"] = (med_of(runs, lambda r: r.wall), med_of(runs, lambda r: r.cpus[0]))
    res["sym_bytes"] = size(work / "sym.arrow")
    if BEFORE:
        pipeline([[sys.executable, "-c", GEN, raw, work / "raw-v1.arrow", 0, "plain"]])
        runs = repeat(REPS, lambda _: pipeline([[tool("stacks-symbolize", True)]],
                                                stdin=work / "raw-v1.arrow", stdout=work / "sym-v1.arrow"))
        res["before"] = (med_of(runs, lambda r: r.wall), med_of(runs, lambda r: r.cpus[0]))
        res["sym_v1_bytes"] = size(work / "sym-v1.arrow")
    return res


def real_store(work):
    """The recording itself, packed: bytes per sample, and per kind of file."""
    out = {}
    for before in ([False, True] if BEFORE else [False]):
        d = work / ("real-before" if before else "real")
        shutil.rmtree(d, ignore_errors=True)
        src = work / ("sym-v1.arrow" if before else "sym.arrow")
        pipeline([[tool("stacks-pack", before), d]], stdin=src)
        out["before" if before else "now"] = size(d)
        if not before:
            out["files"] = {kind: sum(f.stat().st_size for f in d.rglob(f"*.{kind}.parquet"))
                            for kind in ("samples", "stacks", "frames")}
            out["stacks"] = sum(pq_rows(f) for f in d.rglob("*.stacks.parquet"))
            out["frames"] = sum(pq_rows(f) for f in d.rglob("*.frames.parquet"))
    return out


def pq_rows(path):
    """Rows of a Parquet file, from its footer."""
    import pyarrow.parquet as pq
    return pq.ParquetFile(path).metadata.num_rows


def pack_big(work):
    """The replicated stream into stacks-pack: CPU, peak RSS, bytes; and pyarrow's writer."""
    res = {}
    for before in ([False, True] if BEFORE else [False]):
        d = work / ("big-before" if before else "big")
        shutil.rmtree(d, ignore_errors=True)
        src = work / ("sym-v1.arrow" if before else "sym.arrow")
        gen = [sys.executable, "-c", GEN, src, "-", ROWS] + (["plain"] if before else [])
        log(f"pack: {ROWS} rows into {'the earlier' if before else 'this'} stacks-pack")
        r = pipeline([gen, [tool("stacks-pack", before), d]])
        res["before" if before else "now"] = {"cpu": r.cpus[1], "rss": r.rss[1], "wall": r.wall,
                                              "bytes": size(d), "dir": d}
    log(f"pack: {PEER_ROWS} rows, stacks-pack and pyarrow.parquet.write_table")
    small = work / "peer-store"
    gen = [sys.executable, "-c", GEN, work / "sym.arrow", work / "peer.arrow", PEER_ROWS]
    pipeline([gen])
    runs = repeat(REPS, lambda _: (shutil.rmtree(small, ignore_errors=True),
                                   pipeline([[tool("stacks-pack"), small]], stdin=work / "peer.arrow"))[1])
    res["peer_stacks_cpu"] = med_of(runs, lambda r: r.cpus[0])
    peer = []
    for _ in range(REPS):
        r = subprocess.run([sys.executable, "-c", PEER, work / "peer.arrow", str(PEER_ROWS)],
                           capture_output=True, text=True, check=True)
        peer.append([float(x) for x in r.stdout.split()])
    res["peer_py_cpu"] = statistics.median(p[1] for p in peer)
    res["peer_rows"] = int(peer[0][0])
    return res


def queries():
    text = subprocess.run([tool("stacks-query"), "--list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in text.splitlines()
            if line and not line.startswith(" ") and not line.startswith("Parameters")]


def query_all(work, stores):
    """Every bundled query over each store: wall and peak RSS of stacks-query; cpu | pprof.
    The earlier build runs each once (over ten million rows it takes minutes per query)."""
    res = {}
    for label, (before, d) in stores.items():
        per = {}
        reps = 1 if before else REPS
        for q in queries():
            log(f"query: {q} over the {label} store")
            runs = repeat(reps, lambda _: pipeline([[tool("stacks-query", before), "-d", d, q, "-f", "arrow"]],
                                                   stdout=work / "q.arrow"))
            per[q] = (med_of(runs, lambda r: r.wall), max(r.rss[0] for r in runs))
        runs = repeat(reps, lambda _: pipeline([[tool("stacks-query", before), "-d", d, "cpu"],
                                                [tool("stacks-pprof", before)]], stdout=work / "cpu.pb.gz"))
        per["cpu | stacks-pprof"] = (med_of(runs, lambda r: r.wall), max(max(r.rss) for r in runs))
        top = subprocess.run(["go", "tool", "pprof", "-top", "-symbolize=none", work / "cpu.pb.gz"],
                             capture_output=True, text=True)
        if top.returncode != 0 or "flat%" not in top.stdout:
            raise BenchError(f"go tool pprof cannot read the {label} profile: {top.stderr[-300:]}")
        res[label] = per
    runs = repeat(REPS, lambda _: pipeline([["perf", "report", "-i", work / "perf.data", "--stdio",
                                             "--no-children", "-g", "folded"]], stdout=work / "perf.txt"))
    res["perf"] = med_of(runs, lambda r: r.wall)
    return res


def n(x, d=0):
    return f"{x:,.{d}f}"


def report(m, rec, sym, real, pack, q):
    L = []
    w = L.append
    w(BEGIN)
    w("")
    w("## The store: a real recording, ten million samples")
    w("")
    w(f"Measured {m['date']} by `scripts/bench_store.py` (run by `scripts/bench`), {REPS} runs per figure "
      f"(medians; peak RSS: the largest; the earlier build's queries once each); load average {m['load0']} before, {m['load1']} after. "
      + (f"*Before*: the binaries of `{m['before']}` on the same rows, in the same run." if BEFORE else ""))
    w("")
    w("Packing and querying are measured here on a real recording; sections 4 and 5 measure them "
      "on a repeated small one, in the last full run of `scripts/bench` (see its date at the top).")
    w("")
    w(f"Workload: `{' '.join(BUILD)}` with a cold Go cache ({rec['processes']} processes), recorded by "
      f"`stacks-record -e profile:uk:999 -- …` ({n(rec['samples'])} samples) and by `perf record -e cpu-clock "
      f"-F 999 -g -- …` ({n(rec['perf_samples'])} samples), one after the other. The symbolized recording "
      f"({n(sym['rows'])} rows, {n(sym['frames'])} distinct frames) is replicated in time to {n(ROWS)} rows for "
      "the store.")
    w("")
    w("| | now | before | peer | now ÷ peer |")
    w("|---|---:|---:|---:|---:|")
    b = lambda k, f: f(k) if BEFORE and k is not None else ""
    w(f"| stacks-symbolize rows/s (wall) | {n(sym['rows'] / sym['now'][0])} | "
      f"{b(sym.get('before'), lambda v: n(sym['rows'] / v[0]))} | | |")
    per_rec = lambda x: x / rec["samples"]
    perf_bps = rec["perf_bytes"] / rec["perf_samples"]
    w(f"| store bytes per sample, the real recording | {n(per_rec(real['now']), 1)} | "
      f"{b(real.get('before'), lambda v: n(per_rec(v), 1))} | perf.data {n(perf_bps, 1)} | "
      f"{per_rec(real['now']) / perf_bps:.3f}× |")
    what = {"samples": "every row but its stack", "stacks": f"{n(real['stacks'])} distinct stacks",
            "frames": f"{n(real['frames'])} distinct frames"}
    for kind, bytes_ in real["files"].items():
        w(f"| … of which `*.{kind}.parquet` ({what[kind]}) | {n(per_rec(bytes_), 1)} | | | "
          f"{per_rec(bytes_) / perf_bps:.3f}× |")
    now = pack["now"]
    w(f"| store bytes per sample, {n(ROWS)} rows | {n(now['bytes'] / ROWS, 2)} | "
      f"{b(pack.get('before'), lambda v: n(v['bytes'] / ROWS, 2))} | perf.data {n(perf_bps, 1)} | "
      f"{now['bytes'] / ROWS / perf_bps:.3f}× |")
    w(f"| stacks-pack rows per CPU second, {n(ROWS)} rows | {n(ROWS / now['cpu'])} | "
      f"{b(pack.get('before'), lambda v: n(ROWS / v['cpu']))} | | |")
    w(f"| stacks-pack peak RSS MiB, {n(ROWS)} rows | {n(now['rss'] / 2**20)} | "
      f"{b(pack.get('before'), lambda v: n(v['rss'] / 2**20))} | | |")
    py = pack["peer_rows"] / pack["peer_py_cpu"]
    st = pack["peer_rows"] / pack["peer_stacks_cpu"]
    w(f"| rows per CPU second, {n(pack['peer_rows'])} rows: stacks-pack vs pyarrow `write_table` | {n(st)} | | "
      f"{n(py)} | {st / py:.2f}× |")
    cpu = q["now"]["cpu | stacks-pprof"]
    perf_rate = rec["perf_samples"] / q["perf"]
    w(f"| `stacks-query cpu \\| stacks-pprof` samples/s vs `perf report --no-children -g folded` | "
      f"{n(ROWS / cpu[0])} | {b(q.get('before'), lambda v: n(ROWS / v['cpu | stacks-pprof'][0]))} | "
      f"{n(perf_rate)} | {ROWS / cpu[0] / perf_rate:.1f}× |")
    w("")
    w(f"Every bundled query over the {n(ROWS)}-row store (`stacks-query -d STORE QUERY -f arrow`; the last "
      "row is the cpu query piped into stacks-pprof, RSS the larger of the two):")
    w("")
    w("| query | wall s | peak RSS MiB | " + ("wall s before | peak RSS MiB before |" if BEFORE else ""))
    w("|---|---:|---:|" + ("---:|---:|" if BEFORE else ""))
    for name, (wall, rss) in q["now"].items():
        shown = name.replace("|", "\\|")
        row = f"| `{shown}` | {wall:.2f} | {n(rss / 2**20)} |"
        if BEFORE:
            bw, br = q["before"][name]
            row += f" {bw:.2f} | {n(br / 2**20)} |"
        w(row)
    w("")
    w(END)
    return "\n".join(L)


def main():
    for b in ["stacks-record", "stacks-symbolize", "stacks-pack", "stacks-query", "stacks-pprof"]:
        if not Path(tool(b)).exists():
            raise BenchError(f"{tool(b)} is missing: build with `cargo build --release --workspace --bins`")
        if BEFORE and not Path(tool(b, True)).exists():
            raise BenchError(f"BENCH_BEFORE has no {b}")
    keep = os.environ.get("BENCH_KEEP")
    work = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="bench-store-"))
    work.mkdir(parents=True, exist_ok=True)
    load0 = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    rec = record(work)
    sym = symbolize(work, rec)
    real = real_store(work)
    pack = pack_big(work)
    stores = {"now": (False, pack["now"]["dir"])}
    if BEFORE:
        stores["before"] = (True, pack["before"]["dir"])
    q = query_all(work, stores)
    m = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
         "load0": load0, "load1": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
         "before": os.environ.get("BENCH_BEFORE_NAME") or str(BEFORE)}
    section = report(m, rec, sym, real, pack, q)
    benchmd.replace_section(OUT, BEGIN, END, section)
    print(section)
    if not keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        print(f"bench-store: error: {e}", file=sys.stderr)
        sys.exit(1)
