#!/usr/bin/env python3
"""bench_top_flame — stacks-top's flame graph, sandwich and diff on the 10M-row store, next to
DuckDB computing the same folded profile over the same files; writes its section of
BENCHMARKS.md (issue #46: flame ≤ 0.5 s, sandwich ≤ 0.3 s, diff of two windows ≤ 1 s).

1. The store of bench_top: a real recording (`state:uk:20` of `stacks-workload states --idle
   100`, 105 threads, 10 s) replicated in time to at least BENCH_TOP_ROWS (10M) state rows.
2. In tmux, as a person sees it, from the key to the screen it draws (polled every 5 ms):
   `F` (the flame graph of the first screen's view: state rows of the last 5 minutes), `↓`
   then `s` (the sandwich of the hottest frame under the root, from the flame in memory), Esc;
   the diff of two windows: `[` then `b` (the earlier window's stacks as the baseline), `]`,
   then `d` (the later window's stacks against it).
3. `stacks-top --once --flame` of the same view, command to exit (output to /dev/null).
4. DuckDB (in-process, Python) computing the same folded profile over the same files: the
   window's samples summed by stack, their stacks assembled from the frames files root first,
   summed by folded stack; and twice that (two windows) for the diff. Its lines equal
   `stacks-top --where 'stack_id IS NOT NULL' --once --flame`'s (checked on a small
   recording; the rows without a stack, which stacks-top counts under `[no stack]`, fall out
   of its join).

Every timing is the median of REPS runs. Needs root (BPF), the release build and DuckDB.
Run with `BENCH_ONLY=top-flame scripts/bench`.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchmd
import bench_top
from bench_top import OUT, REPS, ROWS, Tmux, med, ratio_rows, record, replicate, tool, window_of

BEGIN = "<!-- BEGIN bench_top_flame -->"
END = "<!-- END bench_top_flame -->"


def log(msg):
    print(f"bench_top_flame: {msg}", file=sys.stderr, flush=True)


def settled(s):
    """Nothing is being computed: no query job's mark on the title line."""
    return "computing" not in s and "updating" not in s


def key(t, k, ok, what):
    """Seconds from sending `k` to a settled screen satisfying `ok`."""
    t.wait(settled, "a settled screen")
    time.sleep(0.2)
    t0 = time.monotonic()
    t.run("send-keys", "-t", "t", k)
    t.wait(lambda s: ok(s) and settled(s), what)
    return time.monotonic() - t0


def screen_times(store):
    """Per-key seconds of the flame graph, the sandwich and the diff, one run."""
    t = Tmux("flame", f"{tool('stacks-top')} -d {store}")
    t.wait(lambda s: "rows ·" in bench_top.status(s) and settled(s), "the first screen")
    out = {}
    out["F (flame graph)"] = key(t, "F", lambda s: "Flame graph:" in s, "the flame graph")
    t.run("send-keys", "-t", "t", "Down")
    time.sleep(0.3)
    out["s (sandwich of a frame)"] = key(t, "s", lambda s: "callers (who calls it" in s, "the sandwich")
    key(t, "Escape", lambda s: "Flame graph:" in s, "the flame graph again")
    key(t, "Escape", lambda s: "GroupBy" in s and "Flame graph:" not in s, "the table")
    before = t.screen()
    key(t, "[", lambda s: s != before and "rows ·" in bench_top.status(s), "the previous window")
    out["b (baseline: a window's stacks)"] = key(t, "b", lambda s: "baseline: " in s, "the baseline")
    before = t.screen()
    key(t, "]", lambda s: s != before and "rows ·" in bench_top.status(s), "the next window")
    out["d (diff of two windows)"] = key(t, "d", lambda s: "Diff against the baseline" in s, "the diff")
    t.run("send-keys", "-t", "t", "q")
    time.sleep(0.5)
    t.close()
    return out


def once_flame(store):
    """`stacks-top --once --flame` of the first screen's view, seconds to exit."""
    t0 = time.monotonic()
    subprocess.run([tool("stacks-top"), "-d", str(store), "--kind", "state", "--once", "--flame"],
                   check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


def folded_sql(store, window):
    """DuckDB: the folded profile of the state rows of `window` (root first, as stacks-top
    and stacks-pprof fold them; `frame_ids` are kernel leaf → root, then user leaf → root)."""
    frm, to = window
    # In ns, as stacks-top binds the window (DuckDB's timestamps are µs).
    win = f"epoch_ns(time) >= {frm} AND epoch_ns(time) < {to}"
    return (f"WITH q AS (SELECT stack_id, sum(value) AS w FROM read_parquet('{store}/*.samples.parquet') "
            f"WHERE kind = 'state' AND {win} GROUP BY stack_id), "
            f"refs AS (SELECT stack_id, set_id, unnest(frame_ids) AS frame_id, "
            f"generate_subscripts(frame_ids, 1) AS i FROM read_parquet('{store}/*.stacks.parquet') "
            f"WHERE stack_id IN (SELECT stack_id FROM q)), "
            f"t AS (SELECT r.stack_id, string_agg(f.name, ';' ORDER BY r.i DESC) "
            f"AS folded FROM refs r JOIN read_parquet('{store}/*.frames.parquet') f "
            f"USING (set_id, frame_id) GROUP BY r.stack_id, r.set_id), "
            f"s AS (SELECT DISTINCT ON (t.stack_id) t.folded, q.w FROM t JOIN q USING (stack_id)) "
            f"SELECT folded, sum(w) AS value FROM s GROUP BY folded ORDER BY folded")


def duckdb_times(store, window, earlier):
    """DuckDB: the flame's folded profile, and both windows' for the diff, one run each
    (connection included)."""
    import duckdb

    out = {}
    for name, windows in [("F (flame graph)", [window]),
                          ("d (diff of two windows)", [earlier, window])]:
        t0 = time.monotonic()
        con = duckdb.connect()
        for w in windows:
            con.execute(folded_sql(store, w)).fetchall()
        con.close()
        out[name] = time.monotonic() - t0
    return out


def main():
    benchmd.preflight("bench_top_flame", "BPF", [tool(n) for n in (
        "stacks-record", "stacks-symbolize", "stacks-pack", "stacks-top", "stacks-query",
        "stacks-workload")])
    import duckdb
    scratch = Path(tempfile.mkdtemp(prefix="bench-top-flame-", dir="/var/tmp"))
    try:
        log("recording 105 threads at 20 Hz for 10 s")
        real = scratch / "real"
        record(real)
        store = scratch / "store"
        total, per_copy, copies = replicate(real, store, ROWS)
        log(f"store: {total:,} rows ({copies} copies of {per_copy:,})")
        window = window_of(store)
        length = window[1] - window[0]
        earlier = (window[0] - length, window[0])
        ours, theirs, once = {}, {}, []
        for i in range(REPS):
            log(f"run {i + 1}/{REPS}: stacks-top in tmux, --once --flame, then DuckDB")
            for k, v in screen_times(store).items():
                ours.setdefault(k, []).append(v)
            once.append(once_flame(store))
            for k, v in duckdb_times(store, window, earlier).items():
                theirs.setdefault(k, []).append(v)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    lines = [BEGIN, "## stacks-top: flame graph, sandwich and diff, next to DuckDB", "",
             f"Measured by `scripts/bench_top_flame.py` (`BENCH_ONLY=top-flame scripts/bench`) on "
             f"{time.strftime('%Y-%m-%d %H:%M')} UTC, {os.cpu_count()} cores, release build, "
             f"DuckDB {duckdb.__version__}.", "",
             f"The store of the stacks-top section above: **{total:,} state rows** ({copies} copies in time of "
             f"a {per_copy:,}-row recording of 105 threads). The view is the first screen's: the "
             "state rows of the last 5 minutes; the diff's baseline is the 5 minutes before. "
             "stacks-top is timed in tmux from the key to the screen it draws, once nothing is "
             "being computed; DuckDB computes the same folded profile (the window's samples summed "
             "by stack, their stacks assembled from the frames files root first, summed by folded "
             "stack), connection included, once for the flame and for each window of the diff. "
             f"Medians of {REPS} runs, seconds.", "",
             "| step | stacks-top | DuckDB, same profile | ratio |", "|---|---:|---:|---:|"]
    lines += ratio_rows(ours, theirs)
    lines.append(f"| `--once --flame`, command to exit | {med(once):.3f} | – | – |")
    lines += ["",
              "The sandwich is computed from the flame graph in memory (no query); `b` and `d` "
              "each query the stacks of one window (the diff then compares the two flames). "
              "DuckDB's profile leaves out the rows without a stack (stacks-top's `[no stack]`).",
              END]
    benchmd.replace_section(OUT, BEGIN, END, "\n".join(lines))
    log("wrote BENCHMARKS.md")
    print(json.dumps({"ours": ours, "duckdb": theirs, "once": once}, indent=1))


if __name__ == "__main__":
    main()
