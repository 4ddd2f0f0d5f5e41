#!/usr/bin/env python3
"""bench_top — stacks-top's speed next to DuckDB (xtop's engine) on the same Parquet, and the
cost of its live mode; writes its section of BENCHMARKS.md.

1. A real recording: `state:uk:20` of `stacks-workload states --idle 100` (105 threads) for
   10 s, symbolized and packed. It is then replicated in time (every copy shifted by the
   recording's length) into a store of at least 10M state rows, one samples/stacks pair per
   copy group, as stacks-pack writes them.
2. In tmux, as a person sees it: the time from starting `stacks-top -d STORE` to its first
   table on the screen, then from each key to the screen it changes (Enter: drill down, p: the
   stack tree, Esc, l: latency columns, [: previous window, g…Enter: regroup by ufunc).
3. DuckDB (in-process, Python) answering the same questions over the same files: the first
   table's GROUP BY in the same window, the drill-down's, the stack tree's (samples joined to
   their stacks).
4. Live: `stacks-record -e state:u:20` of 1,000 idle threads piped through stacks-symbolize
   into stacks-top for 30 s: stacks-top's CPU per second and RSS (stacks-symbolize's beside it).

Every timing is the median of REPS runs. Needs root (BPF) and the release build.
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
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", Path.home() / ".cache/stacks-target"))
BIN = Path(os.environ.get("BENCH_BIN", TARGET / "release"))
OUT = Path(os.environ.get("BENCH_OUT", ROOT / "BENCHMARKS.md"))
REPS = int(os.environ.get("BENCH_REPS", "3"))
ROWS = int(os.environ.get("BENCH_TOP_ROWS", "10000000"))
BEGIN = "<!-- BEGIN bench_top -->"
END = "<!-- END bench_top -->"


def log(msg):
    print(f"bench_top: {msg}", file=sys.stderr, flush=True)


def tool(name):
    return str(BIN / name)


def record(store):
    """The real recording, packed into `store`."""
    cmd = (
        f"{tool('stacks-record')} -e state:uk:20 -- {tool('stacks-workload')} states --idle 100 "
        f"--seconds 10 --dir {store.parent} | {tool('stacks-symbolize')} | {tool('stacks-pack')} {store}"
    )
    subprocess.run(["bash", "-o", "pipefail", "-c", cmd], check=True, stderr=subprocess.DEVNULL)


def fnv1a(name):
    """A file set's `set_id`: FNV-1a (64-bit) of its base name, as stacks-pack computes it."""
    h = 0xcbf29ce484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def replicate(src, dst, rows):
    """`src`'s one file set copied in time until `rows` samples rows, 25 copies per set."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    samples = next(src.glob("*.samples.parquet"))
    stacks = Path(str(samples).replace(".samples.parquet", ".stacks.parquet"))
    frames = Path(str(samples).replace(".samples.parquet", ".frames.parquet"))
    table = pq.read_table(samples)
    times = table.column("time")
    t0, t1 = pc.min(times).value, pc.max(times).value
    shift = (t1 - t0) + 50_000_000
    copies = -(-rows // table.num_rows)
    dst.mkdir(parents=True)
    per = 25
    for first in range(0, copies, per):
        parts = []
        for k in range(first, min(first + per, copies)):
            t = pc.add(times.cast(pa.int64()), k * shift).cast(times.type)
            parts.append(table.set_column(table.schema.get_field_index("time"), "time", t))
        base = dst / f"stacks-bench-{first // per:06d}"
        pq.write_table(pa.concat_tables(parts), f"{base}.samples.parquet", compression="zstd",
                       row_group_size=128 * 1024)
        # Each copy is its own file set: its `set_id` is the one stacks-pack gives its base name,
        # so readers joining every frames file on (set_id, frame_id) match each frame once.
        set_id = fnv1a(base.name)
        for src_file, suffix in [(stacks, "stacks"), (frames, "frames")]:
            level = pq.read_table(src_file)
            level = level.set_column(level.schema.get_field_index("set_id"), level.schema.field("set_id"),
                                     pa.array([set_id] * level.num_rows, pa.uint64()))
            pq.write_table(level, f"{base}.{suffix}.parquet", compression="zstd")
    return copies * table.num_rows, table.num_rows, copies


class Tmux:
    def __init__(self, name, command):
        self.socket = f"bench-top-{name}-{os.getpid()}"
        self.run("new-session", "-d", "-s", "t", "-x", "180", "-y", "50",
                 f"{command}; sleep 600")

    def run(self, *args):
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True)

    def screen(self):
        return self.run("capture-pane", "-p", "-t", "t").stdout

    def wait(self, ok, what, limit=120):
        t0 = time.monotonic()
        while True:
            s = self.screen()
            if ok(s):
                return s
            if time.monotonic() - t0 > limit:
                raise SystemExit(f"bench_top: error: waited {limit}s for {what}:\n{s}")
            time.sleep(0.005)

    def key(self, key, ok, what):
        """Seconds from sending `key` to a screen satisfying `ok`, sent once the screen is
        settled (the sparkline of the previous key drawn)."""
        self.wait(lambda s: "updating" not in s, "the sparkline")
        time.sleep(0.2)
        t0 = time.monotonic()
        self.run("send-keys", "-t", "t", key)
        self.wait(ok, what)
        return time.monotonic() - t0

    def close(self):
        self.run("kill-server")


def status(s):
    """The status line (the one before the keys line)."""
    lines = s.rstrip("\n").split("\n")
    return lines[-2] if len(lines) >= 2 else ""


def screen_times(store):
    """First screen and per-key seconds, one run."""
    t0 = time.monotonic()
    t = Tmux("screen", f"{tool('stacks-top')} -d {store}")
    first = t.wait(lambda s: "rows ·" in status(s), "the first screen")
    out = {"first screen": time.monotonic() - t0}
    t.wait(lambda s: "updating" not in s, "the first sparkline")
    out["first screen with its sparkline"] = time.monotonic() - t0
    out["Enter (drill down)"] = t.key("Enter", lambda s: "Filters    state =" in s and "rows ·" in status(s), "the drill-down")
    out["p (stack tree)"] = t.key("p", lambda s: "Stacks of" in s and "frames ·" in status(s), "the tree")
    t.key("Escape", lambda s: "Stacks of" not in s, "the table")
    t.key("BSpace", lambda s: "Filters    none" in s, "the filter removed")
    out["l (latency columns)"] = t.key("l", lambda s: "p50" in s and "rows ·" in status(s), "latency")
    before = t.screen()
    out["[ (previous window)"] = t.key("[", lambda s: s != before and "rows ·" in status(s), "the window")
    t.wait(lambda s: "updating" not in s, "the sparkline")
    t.run("send-keys", "-t", "t", "g")
    time.sleep(0.3)
    for c in "ufunc":
        t.run("send-keys", "-t", "t", c)
        time.sleep(0.1)
    time.sleep(0.3)
    out["g ufunc Enter (regroup by top frame)"] = t.key(
        "Enter", lambda s: "GroupBy    state, comm, syscall, path, ufunc" in s and "rows ·" in status(s), "regroup")
    t.close()
    return out, first


def duckdb_times(store, window):
    """DuckDB: the same questions over the same files, one run (connect included)."""
    import duckdb

    glob = f"{store}/*.samples.parquet"
    frm, to = window
    win = f"time >= make_timestamp({frm // 1000}) AND time < make_timestamp({to // 1000})"
    secs = (to - frm) / 1e9
    table = (f"SELECT state, comm, syscall, path, sum(coalesce(count, 1)) AS samples, "
             f"sum(value) / 1e9 / {secs} AS avg_thr FROM read_parquet('{glob}') "
             f"WHERE kind = 'state' AND {win} GROUP BY ALL ORDER BY samples DESC LIMIT 1000")
    drill = table.replace("WHERE kind = 'state'", "WHERE kind = 'state' AND state = 'sleeping'")
    # The stacks of the drilled-down rows, assembled from the frames files (docs/format.md).
    tree = (f"WITH q AS (SELECT stack_id, sum(value) AS w FROM read_parquet('{glob}') "
            f"WHERE kind = 'state' AND {win} AND state = 'sleeping' AND syscall = 'read' "
            f"GROUP BY stack_id), "
            f"refs AS (SELECT stack_id, set_id, unnest(frame_ids) AS frame_id, "
            f"generate_subscripts(frame_ids, 1) AS i FROM read_parquet('{store}/*.stacks.parquet') "
            f"WHERE stack_id IN (SELECT stack_id FROM q)), "
            f"t AS (SELECT r.stack_id, list(f.function ORDER BY r.i) AS stack FROM refs r JOIN "
            f"read_parquet('{store}/*.frames.parquet') f USING (set_id, frame_id) "
            f"GROUP BY r.stack_id, r.set_id) "
            f"SELECT DISTINCT ON (t.stack_id) t.stack, q.w FROM t JOIN q USING (stack_id)")
    out = {}
    for name, sql in [("first screen", table), ("Enter (drill down)", drill), ("p (stack tree)", tree)]:
        t0 = time.monotonic()
        con = duckdb.connect()
        con.execute(sql).fetchall()
        con.close()
        out[name] = time.monotonic() - t0
    return out


def window_of(store):
    """The first screen's window: the last 5 minutes of the state rows."""
    out = subprocess.run(
        [tool("stacks-query"), "-d", str(store), "-f", "csv", "-c",
         "SELECT CAST(max(time) AS BIGINT) AS z FROM samples WHERE kind = 'state'"],
        check=True, capture_output=True, text=True).stdout
    z = int(out.split()[1]) + 1
    return z - 300_000_000_000, z


def cpu_of(pid):
    """User + system CPU seconds of `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_of(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def live_cost(threads=1000, seconds=30):
    """stacks-top's (and stacks-symbolize's) CPU per second and RSS over the steady part of a
    live recording of `threads` idle threads at 20 Hz."""
    cmd = (f"{tool('stacks-record')} -e state:u:20 -- {tool('stacks-workload')} states "
           f"--idle {threads} --seconds {seconds} 2>/dev/null | {tool('stacks-symbolize')} "
           f"2>/dev/null | {tool('stacks-top')} --group thread,state")
    t = Tmux("live", cmd)
    t.wait(lambda s: "stdin (live" in s and "rows ·" in status(s), "the live screen")
    pids = {}
    for name in ("stacks-top", "stacks-symbolize"):
        # comm is cut at 15 bytes.
        out = subprocess.run(["pgrep", "-n", "-x", name[:15]], capture_output=True, text=True).stdout.split()
        pids[name] = out[0]
    time.sleep(5)
    t0 = time.monotonic()
    c0 = {n: cpu_of(p) for n, p in pids.items()}
    time.sleep(seconds - 15)
    dt = time.monotonic() - t0
    res = {n: ((cpu_of(p) - c0[n]) / dt, rss_of(p)) for n, p in pids.items()}
    rows = int(t.screen().split("stdin (live, ")[1].split(" rows")[0])
    t.run("send-keys", "-t", "t", "q")
    time.sleep(1)
    t.close()
    return res, rows


def med(xs):
    return statistics.median(xs)


def ratio_rows(ours, theirs):
    """Table rows `| step | ours | theirs | ratio |` of medians, `–` where the peer has none."""
    return [f"| {k} | {med(v):.3f} | {med(theirs[k]):.3f} | {med(v) / med(theirs[k]):.2f}× |"
            if theirs.get(k) else f"| {k} | {med(v):.3f} | – | – |" for k, v in ours.items()]


def main():
    benchmd.preflight("bench_top", "BPF", [tool(n) for n in ("stacks-record", "stacks-symbolize",
                      "stacks-pack", "stacks-top", "stacks-query", "stacks-workload")])
    import duckdb
    scratch = Path(tempfile.mkdtemp(prefix="bench-top-", dir="/var/tmp"))
    try:
        log("recording 105 threads at 20 Hz for 10 s")
        real = scratch / "real"
        record(real)
        store = scratch / "store"
        total, per_copy, copies = replicate(real, store, ROWS)
        size = sum(f.stat().st_size for f in store.iterdir())
        log(f"store: {total:,} rows ({copies} copies of {per_copy:,}), {size / 1e6:.0f} MB")
        window = window_of(store)
        ours, theirs = {}, {}
        for i in range(REPS):
            log(f"run {i + 1}/{REPS}: stacks-top in tmux, then DuckDB")
            times, first = screen_times(store)
            for k, v in times.items():
                ours.setdefault(k, []).append(v)
            for k, v in duckdb_times(store, window).items():
                theirs.setdefault(k, []).append(v)
        log("live: 1,000 threads at 20 Hz for 30 s")
        live, live_rows = live_cost()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    lines = [BEGIN, "## stacks-top: time to the first screen and per key, next to DuckDB", "",
             f"Measured by `scripts/bench_top.py` (`BENCH_ONLY=top scripts/bench`) on "
             f"{time.strftime('%Y-%m-%d %H:%M')} UTC, {os.cpu_count()} cores, release build, "
             f"DuckDB {duckdb.__version__}.",
             "",
             f"The store is a real recording (`state:uk:20`, `stacks-workload states --idle 100`:"
             f" 105 threads, 10 s, {per_copy:,} rows) replicated {copies} times in time: "
             f"**{total:,} state rows**, {size / 1e6:.0f} MB of Parquet in {copies // 25 + (copies % 25 > 0)} pairs. "
             "stacks-top is timed in tmux, as a person sees it: from the command (or the key) to the "
             "screen it draws, polled every 5 ms. DuckDB (xtop's engine) answers the same questions "
             "over the same files in-process, connection included, without drawing anything. "
             f"Medians of {REPS} runs, seconds.", "",
             "| step | stacks-top | DuckDB, same query | ratio |", "|---|---:|---:|---:|"]
    lines += ratio_rows(ours, theirs)
    lines += ["",
              "The first screen runs two queries before the table is drawn (kinds and ranges, "
              "the table in the window); the sparkline over the whole range follows in the "
              "background (the second row). The DuckDB column is the table's query alone. Each "
              "key is sent once the screen has settled (its sparkline drawn), and timed to its "
              "table; Enter and Backspace start a new sparkline, the other keys do not. The "
              "stack tree joins the row's samples to their distinct stacks.",
              "",
              f"Live mode: 1,000 idle threads sampled at 20 Hz (`state:u:20`, 20,000 rows/s) through "
              f"stacks-symbolize into stacks-top for 30 s ({live_rows:,} rows read), measured over "
              "the last 25 s:", "",
              "| process | CPU per second | RSS at the end |", "|---|---:|---:|"]
    for name, (cpu, rss) in live.items():
        lines.append(f"| {name} | {cpu * 100:.1f} % of a core | {rss / 1e6:.0f} MB |")
    lines += ["", "xtop has no live mode to compare with.", END]
    benchmd.replace_section(OUT, BEGIN, END, "\n".join(lines))
    log("wrote BENCHMARKS.md")
    print(json.dumps({"ours": ours, "duckdb": theirs, "live": live}, indent=1))


if __name__ == "__main__":
    main()
