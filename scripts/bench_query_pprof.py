#!/usr/bin/env python3
# scripts/bench_query_pprof.py — query → pprof over a store replicated from a real recording,
# next to perf report on the same build's perf.data, in interleaved rounds (medians), and
# next to an earlier build of the tools on its own store of the same rows (BENCH_BEFORE).
# Writes its section of BENCHMARKS.md (between markers).
"""Query → pprof next to perf report: bench_store's recording of `go build -a net/http`
(stacks-record and perf record, 999 Hz, one after the other), the symbolized rows replicated in
time to BENCH_QP_ROWS rows (default 5M) and packed; then BENCH_REPS rounds (default 5), each
running in turn `stacks-query -d STORE cpu | stacks-pprof` of this build, of the earlier build
(BENCH_BEFORE: a directory holding its stacks-pack, stacks-query and stacks-pprof; its store
packed by its own stacks-pack) and `perf report --stdio --no-children -g folded` over the
perf.data. The ratio is bench_store's: rows per second of the pipeline (wall) over perf
report's samples per second (wall). Environment: CARGO_TARGET_DIR, BENCH_OUT, BENCH_REPS,
BENCH_KEEP (a scratch directory kept, whose recordings are reused with BENCH_REUSE),
BENCH_BEFORE, BENCH_BEFORE_NAME, BENCH_QP_ROWS."""

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import benchmd
import bench_store as store

ROWS = int(os.environ.get("BENCH_QP_ROWS") or 5_000_000)
REPS = int(os.environ.get("BENCH_REPS") or 5)
BEGIN, END = "<!-- bench-query-pprof:begin -->", "<!-- bench-query-pprof:end -->"


def log(msg):
    print(f"bench-query-pprof: {msg}", file=sys.stderr, flush=True)


def pack(work, before):
    """The replicated rows packed by this build's stacks-pack (or the earlier one's)."""
    d = work / ("qp-before" if before else "qp-now")
    if os.environ.get("BENCH_REUSE") and d.is_dir():
        return d
    shutil.rmtree(d, ignore_errors=True)
    gen = [sys.executable, "-c", store.GEN, work / "sym.arrow", "-", ROWS] + (["plain"] if before else [])
    log(f"packing {ROWS:,} rows with {'the earlier' if before else 'this'} stacks-pack")
    store.pipeline([gen, [store.tool("stacks-pack", before), d]])
    return d


def main():
    tools = ["stacks-record", "stacks-symbolize", "stacks-pack", "stacks-query", "stacks-pprof"]
    for t in tools:
        if not Path(store.tool(t)).exists():
            sys.exit(f"bench-query-pprof: error: {store.tool(t)} is missing: build with "
                     "`cargo build --release --workspace --bins`")
    if store.BEFORE:
        for t in tools[2:]:
            if not Path(store.tool(t, True)).exists():
                sys.exit(f"bench-query-pprof: error: BENCH_BEFORE has no {t}")
    keep = os.environ.get("BENCH_KEEP")
    work = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="bench-query-pprof-"))
    work.mkdir(parents=True, exist_ok=True)
    rec = store.record(work)
    if not (os.environ.get("BENCH_REUSE") and (work / "sym.arrow").exists()):
        store.symbolize(work, rec)
    stores = {"now": pack(work, False)}
    if store.BEFORE:
        stores["before"] = pack(work, True)
    load0 = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    runs = {label: [] for label in stores}
    runs["perf"] = []
    for i in range(REPS):
        for label, d in stores.items():
            before = label == "before"
            r = store.pipeline([[store.tool("stacks-query", before), "-d", d, "cpu"],
                                [store.tool("stacks-pprof", before)]], stdout=work / f"cpu-{label}.pb.gz")
            runs[label].append(r)
        r = store.pipeline([["perf", "report", "-i", work / "perf.data", "--stdio", "--no-children",
                             "-g", "folded"]], stdout=work / "perf.txt")
        runs["perf"].append(r)
        log(f"round {i + 1}: " + ", ".join(f"{k} {v[-1].wall:.2f} s" for k, v in runs.items()))
    load1 = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    med = {k: statistics.median(r.wall for r in v) for k, v in runs.items()}
    cpu = {k: [statistics.median(r.cpus[j] for r in v) for j in range(len(v[0].cpus))]
           for k, v in runs.items()}
    perf_rate = rec["perf_samples"] / med["perf"]
    n = store.n

    L = [BEGIN, "", "## Query → pprof next to perf report (`scripts/bench_query_pprof.py`)", ""]
    w = L.append
    w(f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `scripts/bench_query_pprof.py`, "
      f"{REPS} interleaved rounds (medians); load average {load0} before, {load1} after (2 cores "
      "shared with other work). Workload: bench_store's, `go build -a -o /dev/null net/http` with a "
      f"cold Go cache, recorded by `stacks-record -e profile:uk:999` ({n(rec['samples'])} samples) "
      f"and by `perf record -e cpu-clock -F 999 -g` ({n(rec['perf_samples'])} samples); the "
      f"symbolized rows replicated in time to {n(ROWS)} rows and packed. Each round runs "
      "`stacks-query -d STORE cpu | stacks-pprof > cpu.pb.gz`"
      + (f", the same with the binaries of `{os.environ.get('BENCH_BEFORE_NAME') or store.BEFORE}` "
         "on the store its stacks-pack made of the same rows" if store.BEFORE else "")
      + " and `perf report --stdio --no-children -g folded` on the perf.data, one after the other.")
    w("")
    w("| pipeline | wall s, each round | median wall s | CPU s (query + pprof) | samples/s | ÷ perf report |")
    w("|---|---|---:|---:|---:|---:|")
    for label in stores:
        rate = ROWS / med[label]
        name = "stacks-query cpu \\| stacks-pprof" + (" (before)" if label == "before" else "")
        w(f"| {name} | {', '.join(f'{r.wall:.2f}' for r in runs[label])} | {med[label]:.2f} | "
          f"{cpu[label][0]:.2f} + {cpu[label][1]:.2f} | {n(rate)} | **{rate / perf_rate:.1f}×** |")
    w(f"| perf report -g folded | {', '.join(f'{r.wall:.2f}' for r in runs['perf'])} | "
      f"{med['perf']:.2f} | {cpu['perf'][0]:.2f} | {n(perf_rate)} | 1.0× |")
    w("")
    w(END)
    section = "\n".join(L)
    benchmd.replace_section(store.OUT, BEGIN, END, section)
    print(section)
    if not keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    except store.BenchError as e:
        print(f"bench-query-pprof: error: {e}", file=sys.stderr)
        sys.exit(1)
