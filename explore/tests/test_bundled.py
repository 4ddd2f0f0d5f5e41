"""explore runs the bundled queries of stacks-query as they are (stacks_explore/bundled.py), and
the views they build on: on a store written here, each question both tools ask gets the same
numbers from explore (DuckDB) as from `stacks-query` (DataFusion). Needs the stacks-query binary
($STACKS_BIN, else $CARGO_TARGET_DIR/debug), not BPF."""

import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

EXPLORE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(EXPLORE))

import stacks_explore as sx  # noqa: E402
from agree import assert_same, stacks_query  # noqa: E402

T = 1_700_000_000_000_000_000
MS = 1_000_000

# The columns of the rows written here, with their types in the stream (docs/format.md).
COLUMNS = {
    "time": pa.timestamp("ns", tz="UTC"),
    "host": pa.string(),
    "kind": pa.string(),
    "pid": pa.int32(),
    "tid": pa.int32(),
    "comm": pa.string(),
    "thread": pa.string(),
    "span_id": pa.uint64(),
    "span_name": pa.string(),
    "cpu": pa.int32(),
    "value": pa.int64(),
    "duration": pa.int64(),
    "count": pa.int64(),
    "state": pa.string(),
    "waker": pa.int32(),
    "wakee": pa.int32(),
    "offcpu_since": pa.timestamp("ns", tz="UTC"),
    "op": pa.string(),
    "syscall": pa.string(),
}


def write_store(root: Path, rows: list[dict]) -> None:
    """One file set of the frames layout holding `rows` (no stacks)."""
    root.mkdir(parents=True, exist_ok=True)
    table = {c: pa.array([r.get(c) for r in rows], t) for c, t in COLUMNS.items()}
    table["stack_id"] = pa.array([None] * len(rows), pa.binary(16))
    pq.write_table(pa.table(table), root / "a.samples.parquet")
    pq.write_table(
        pa.table(
            {
                "stack_id": pa.array([], pa.binary(16)),
                "frame_ids": pa.array([], pa.list_(pa.field("frame_id", pa.uint32()))),
                "set_id": pa.array([], pa.uint64()),
            }
        ),
        root / "a.stacks.parquet",
    )
    frames = {"frame_id": pa.uint32(), "function": pa.string(), "file": pa.string(), "line": pa.uint32(),
              "column": pa.uint32(), "inlined": pa.bool_(), "kernel": pa.bool_(), "module": pa.string(),
              "build_id": pa.string(), "offset": pa.uint64(), "addr": pa.uint64(), "error": pa.string(),
              "symbol": pa.string(), "reason": pa.string(), "name": pa.string(), "set_id": pa.uint64()}
    pq.write_table(pa.table({c: pa.array([], t) for c, t in frames.items()}), root / "a.frames.parquet")


def rows() -> list[dict]:
    """Two processes: `app` (pid 10: threads 11 and 12, in spans) and `db` (pid 20: thread 22,
    which wakes 11); `state` passes every 50 ms, `switch` and `wake` rows linked by the rule of
    docs/format.md, CPU, file, block and network rows in and out of spans."""
    out = []

    def row(kind, at, tid, value, **more):
        pid, comm = (20, "db") if tid == 22 else (10, "app")
        thread = {11: "main", 12: "worker", 22: "db"}[tid]
        out.append({"time": T + at, "kind": kind, "pid": pid, "tid": tid, "comm": comm, "thread": thread,
                    "cpu": tid % 2, "value": value, **more})

    for i in range(8):
        at = i * 50 * MS
        row("state", at, 11, 50 * MS, state="sleeping", syscall="futex", duration=(i + 1) * MS,
            offcpu_since=T + 90 * MS if i == 2 else T + at - 10 * MS if i % 2 else None)
        row("state", at, 12, 50 * MS, state="running" if i < 5 else "runnable")
        if i != 3:  # a pass that missed db
            row("state", at, 22, 50 * MS, state="sleeping", syscall="read" if i % 3 else None, duration=None)
    # 11's intervals: two ended by 22, one by an interrupt, one folded.
    row("switch", 5 * MS, 11, 30 * MS, duration=30 * MS, count=1, state="sleeping", span_name="query", span_id=1)
    row("wake", 30 * MS, 22, 25 * MS, duration=25 * MS, wakee=11)
    row("switch", 90 * MS, 11, 20 * MS, duration=20 * MS, count=1, state="sleeping")
    row("wake", 100 * MS, 22, 10 * MS, duration=10 * MS, wakee=11)
    row("switch", 140 * MS, 11, 3 * MS, duration=3 * MS, count=1, state="uninterruptible", span_name="query", span_id=2)
    row("switch", 200 * MS, 11, 700_000, count=4, state="sleeping", span_name="query", span_id=2)
    for i in range(20):
        span = ("query", 1 + i // 10) if i % 4 else (None, None)
        row("profile", i * 10 * MS, 11 if i % 3 else 12, 10_101_010, span_name=span[0], span_id=span[1])
    row("vfs", 7 * MS, 11, 4096, op="read", syscall="read", duration=1000, span_name="query", span_id=1)
    row("vfs", 8 * MS, 12, 512, op="write", syscall="write", duration=800)
    row("block", 9 * MS, 11, 8192, op="read", duration=90_000, span_name="query", span_id=1)
    row("block", 9 * MS, 11, 0, op="flush", duration=5000, span_name="query", span_id=1)
    row("net", 11 * MS, 12, 1500, op="send", count=3)
    row("span", 60 * MS, 11, 1, duration=55 * MS, span_name="query", span_id=1)
    return out


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    root = tmp_path_factory.mktemp("bundled") / "store"
    write_store(root, rows())
    return root, sx.Store(str(root))


def test_bundled_parameters_are_read_from_the_files():
    assert sx.bundled.parameters("thread-states") == {
        "comm": ("text", "%"), "pid": ("int", None), "from": ("timestamp", None), "to": ("timestamp", None),
    }
    assert sx.bundled.parameters("stuck")["min_ms"] == ("int", 1000)
    with pytest.raises(KeyError, match="no parameter tid"):
        sx.bundled.run(None, "thread-states", tid=3)


def test_thread_states_are_stacks_querys(shared):
    root, store = shared
    for pid in (None, 10, 20):
        got = store.thread_states(pid=pid).drop(columns="seconds")
        want = stacks_query(root, "thread-states", *(["-p", f"pid={pid}"] if pid else []))
        assert assert_same(got, want, f"thread-states pid={pid}") > 0
    # A window bound to the nanosecond: [100 ms, 250 ms + 1 ns) holds the passes at 100, 150,
    # 200 and 250 ms.
    window = sx.Window(pd.Timestamp(T + 100 * MS, unit="ns", tz="UTC"), pd.Timestamp(T + 250 * MS + 1, unit="ns", tz="UTC"))
    got = store.thread_states(window=window).drop(columns="seconds")
    want = stacks_query(root, "thread-states", "-p", f"from={T + 100 * MS}", "-p", f"to={T + 250 * MS + 1}")
    assert assert_same(got, want, "thread-states in a window") > 0
    assert got[got.tid == 12].samples.sum() == 4


def test_span_costs_are_stacks_querys_spans(shared):
    root, store = shared
    assert assert_same(store.bundled("spans"), stacks_query(root, "spans"), "spans") > 0
    for pid, tid in ((10, None), (10, 11)):
        args = ["-p", f"pid={pid}"] + (["-p", f"tid={tid}"] if tid else [])
        want = stacks_query(root, "spans", *args)
        want["span"] = want.span_name.fillna(sx.NO_SPAN)
        want = want.groupby("span")[["cpu_ns", "offcpu_ns", "block_bytes", "read_bytes", "spans"]].sum()
        costs = store.span_costs(pid=pid, tid=tid).set_index("span")
        assert sorted(costs.index) == sorted(want.index)
        for span, w in want.iterrows():
            c = costs.loc[span]
            assert (round(c.cpu_s * 1e9), round(c.offcpu_s * 1e9), c.block_bytes, c.read_bytes, c.span_ids) == (
                w.cpu_ns, w.offcpu_ns, w.block_bytes, w.read_bytes, w.spans
            ), span
    # block bytes are reads and writes only (the flush's 0 bytes would not show; spans.sql's rule).
    assert store.span_costs(pid=10).set_index("span").loc["query", "block_bytes"] == 8192
    assert store.span_costs(pid=10).set_index("span").loc["query", "stays"] == 1


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT kind, pid, tid, epoch_ns(time) AS t, wake_tid, wake_thread, wake_value FROM waits",
        "SELECT host, pid, epoch_ns(time) AS t, period FROM observed",
    ],
)
def test_the_views_are_one_text_in_both_engines(shared, sql):
    root, store = shared
    n = assert_same(store.sql(sql), stacks_query(root, "-c", sql), sql)
    assert n > 0
    if "waits" in sql:
        linked = store.sql("SELECT count(*) AS n FROM waits WHERE wake_tid = 22").n[0]
        # The two switch rows 22 ended, and the state row sampled in the second (at 100 ms).
        assert linked == 3, store.sql(sql)
