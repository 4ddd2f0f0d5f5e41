"""The pure helpers of stacks_explore, without root or a recording: units of the kinds, value
formatting, frame names, stack trees, and the DuckDB views over tiny stores written here with
pyarrow in the layout stacks-pack writes (docs/format.md, "The store")."""

import json
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

EXPLORE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(EXPLORE))

import stacks_explore as sx  # noqa: E402
from stacks_explore import store as store_module  # noqa: E402

MS = 1_000_000


def test_every_kind_of_the_registry_has_a_unit():
    kinds = json.loads((EXPLORE / "stacks_explore" / "kinds.json").read_text())["kinds"]
    names = [k["name"] for k in kinds]
    assert set(store_module.VALUE_UNITS) == set(names)
    assert {"profile", "switch", "state", "vfs", "probe", "lost"} <= set(names)
    assert store_module.VALUE_UNITS["profile"] == "ns"
    assert store_module.VALUE_UNITS["vfs"] == "bytes"
    assert store_module.VALUE_UNITS["probe"] == "hits"
    assert store_module.VALUE_UNITS["exec"] == "events"
    assert store_module.VALUE_UNITS["lost"] == "events"


def test_latency_sources_are_the_registrys_latency_kinds():
    kinds = json.loads((EXPLORE / "stacks_explore" / "kinds.json").read_text())["kinds"]
    latency = {
        k["name"]
        for k in kinds
        if k["top"] and k["top"]["latency"] and k["sampling"] in ("event", "one_in", "kept_one_in")
        and "duration" in k["columns"]
    }
    assert {"vfs", "block", "uring", "switch"} <= latency
    # A kept row sampled 1 in N has its own duration and stands for `count` events.
    assert sx.Store.LATENCY_SOURCES["switch"][1:4] == ("duration", "coalesce(count, 1)", "value")
    assert sx.Store.LATENCY_SOURCES["vfs"][1] == "duration / coalesce(count, 1)"
    assert set(sx.Store.LATENCY_SOURCES) == latency | {"syscall"}


def test_values_are_written_in_their_unit():
    assert sx.format_ns(1.5e9) == "1.5 s"
    assert sx.format_ns(20e6) == "20 ms"
    assert sx.format_ns(512) == "512 ns"
    assert sx.format_bytes(4 << 20) == "4 MiB"
    assert sx.format_bytes(100) == "100 B"
    assert sx.format_value(2e6, "ns") == "2 ms"
    assert sx.format_value(12345, "hits") == "12,345 hits"


def test_frame_names_are_shortened():
    assert sx.short_name("core::ptr::drop_in_place<alloc::vec::Vec<u8>>") == "ptr::drop_in_place"
    assert sx.short_name("<std::fs::File as std::io::Read>::read") == "File::read"
    assert sx.short_name("[libc.so.6+0x1a2b]") == "[libc.so.6+0x1a2b]"
    assert sx.short_name("main") == "main"


def test_allocating_stacks_are_named_past_the_allocator():
    """The live heap's stack labels skip the allocator's, the samplers' and Rust's allocation frames (C and Rust)."""
    rust = (
        "main;stacks_workload::heap::run;stacks_workload::heap::site_leak;stacks_workload::heap::block;"
        "alloc::alloc::alloc;__rustc::__rust_alloc;<tracing_stacks::alloc::SampledAlloc<std::alloc::System> as "
        "core::alloc::global::GlobalAlloc>::alloc;tracing_stacks::alloc::allocated;stacks_alloc_sampler::sampled"
    )
    assert sx.stack_label(rust) == "heap::block ← heap::site_leak ← heap::run"
    c = "main;site_leak;malloc;crossed_malloc;stacks_alloc_sampler::sampled"
    assert sx.stack_label(c, frames=2) == "site_leak ← main"
    assert sx.stack_label("malloc;otel_malloc") == "[allocator only]"
    assert sx.stack_label(None) == "[no stack]"


def test_trees_merge_stacks_and_hide_frames():
    folded = pd.DataFrame(
        {
            "folded": ["app;main;work;read", "app;main;work", "app;main;idle"],
            "kernel_frames": [1, 0, 0],
            "value": [3.0, 2.0, 5.0],
        }
    )
    root = sx.tree(folded, groups=1)
    assert root.value == 10.0
    app = root.children["app"]
    assert app.role == "group"
    assert app.children["main"].value == 10.0
    work = app.children["main"].children["work"]
    assert work.value == 5.0 and work.children["read"].role == "kernel"
    hidden = sx.tree(folded, groups=1, hide="^main$")
    assert "main" not in hidden.children["app"].children
    assert hidden.children["app"].children["work"].value == 5.0


def _write_set(
    dirpath: Path,
    base: str,
    samples: list[dict],
    stacks: dict[bytes, list[int]],
    frames: list[dict],
    set_id: int,
    names: list[str] | None = None,
):
    """One file set of the frames layout: samples (with `stack_id`), stacks as frame ids, frames
    (with the `name` column stacks-pack writes when `names` is given, else as it wrote them before)."""
    pq.write_table(
        pa.table(
            {
                "time": pa.array([s["time"] for s in samples], pa.timestamp("ns", tz="UTC")),
                "host": pa.array([None] * len(samples), pa.string()),
                "kind": pa.array([s["kind"] for s in samples], pa.string()),
                "pid": pa.array([s["pid"] for s in samples], pa.int32()),
                "tid": pa.array([s["pid"] for s in samples], pa.int32()),
                "comm": pa.array(["app"] * len(samples), pa.string()),
                "thread": pa.array(["app"] * len(samples), pa.string()),
                "value": pa.array([s["value"] for s in samples], pa.int64()),
                "count": pa.array([None] * len(samples), pa.int64()),
                "state": pa.array([s.get("state") for s in samples], pa.string()),
                "stack_id": pa.array([s.get("stack_id") for s in samples], pa.binary(16)),
            }
        ),
        dirpath / f"{base}.samples.parquet",
    )
    pq.write_table(
        pa.table(
            {
                "stack_id": pa.array(list(stacks), pa.binary(16)),
                "frame_ids": pa.array(list(stacks.values()), pa.list_(pa.field("frame_id", pa.uint32()))),
                "set_id": pa.array([set_id] * len(stacks), pa.uint64()),
            }
        ),
        dirpath / f"{base}.stacks.parquet",
    )
    columns = {
        "frame_id": pa.array(range(len(frames)), pa.uint32()),
        "function": pa.array([f.get("function") for f in frames], pa.string()),
        "file": pa.array([None] * len(frames), pa.string()),
        "line": pa.array([None] * len(frames), pa.uint32()),
        "column": pa.array([None] * len(frames), pa.uint32()),
        "inlined": pa.array([False] * len(frames), pa.bool_()),
        "kernel": pa.array([f.get("kernel", False) for f in frames], pa.bool_()),
        "module": pa.array([f.get("module") for f in frames], pa.string()),
        "build_id": pa.array([None] * len(frames), pa.string()),
        "offset": pa.array([f.get("offset") for f in frames], pa.uint64()),
        "addr": pa.array([0] * len(frames), pa.uint64()),
        "error": pa.array([None] * len(frames), pa.string()),
        "symbol": pa.array([None] * len(frames), pa.string()),
        "reason": pa.array([None] * len(frames), pa.string()),
        "set_id": pa.array([set_id] * len(frames), pa.uint64()),
    }
    if names is not None:
        columns["name"] = pa.array(names, pa.string())
    pq.write_table(pa.table(columns), dirpath / f"{base}.frames.parquet")


@pytest.fixture()
def tiny_store(tmp_path: Path) -> Path:
    """Two file sets: CPU samples of one stack (a kernel frame under two user frames, one of them
    unresolved), `state` samples and a `probe` hit without a stack."""
    cpu = bytes(range(16))
    frames = [
        {"function": "do_syscall_64", "kernel": True},
        {"function": "work", "module": "/usr/bin/app", "offset": 0x10},
        {"module": "/usr/lib/libc.so.6", "offset": 0x1A2B},
    ]
    _write_set(
        tmp_path,
        "a",
        [
            {"time": 0, "kind": "profile", "pid": 7, "value": 10 * MS, "stack_id": cpu},
            {"time": 10 * MS, "kind": "profile", "pid": 7, "value": 10 * MS, "stack_id": cpu},
            {"time": 20 * MS, "kind": "probe", "pid": 7, "value": 3},
        ],
        {cpu: [0, 1, 2]},
        frames,
        set_id=1,
    )
    _write_set(
        tmp_path,
        "b",
        [
            {"time": 0, "kind": "state", "pid": 7, "value": 50 * MS, "state": "running"},
            {"time": 50 * MS, "kind": "state", "pid": 7, "value": 50 * MS, "state": "sleeping"},
        ],
        {},
        [],
        set_id=2,
    )
    return tmp_path


def test_views_assemble_stacks_from_frames(tiny_store: Path):
    store = sx.Store(str(tiny_store))
    assert store.rows == 5
    st = store.sql("SELECT folded, leaf, depth, kernel_frames FROM stack_table")
    assert len(st) == 1
    row = st.iloc[0]
    # Root first: the unresolved libc frame, then `work`, then the kernel frame.
    assert row.folded == "[libc.so.6+0x1a2b];work;do_syscall_64"
    assert row.leaf == "do_syscall_64"
    assert row.depth == 3 and row.kernel_frames == 1
    joined = store.sql("SELECT kind, folded FROM stacks ORDER BY time, kind")
    assert joined.folded.isna().tolist() == [False, True, False, True, True]


def test_views_join_the_names_stacks_pack_wrote(tmp_path: Path):
    # Frames files with `name` are shown by it (stacks-pack's, the Rust rule), not named again;
    # a kernel frame without a function is `[kernel 0x…]` in either kind of frames file.
    cpu = bytes(range(16))
    frames = [{"kernel": True}, {"function": "work", "module": "/usr/bin/app", "offset": 0x10}]
    samples = [{"time": 0, "kind": "profile", "pid": 7, "value": MS, "stack_id": cpu}]
    _write_set(tmp_path, "a", samples, {cpu: [0, 1]}, frames, set_id=1, names=["[from pack]", "work"])
    store = sx.Store(str(tmp_path))
    assert store.sql("SELECT folded, leaf FROM stack_table").values.tolist() == [["work;[from pack]", "[from pack]"]]
    older = tmp_path / "older"
    older.mkdir()
    _write_set(older, "a", samples, {cpu: [0, 1]}, frames, set_id=1)
    folded = sx.Store(str(older)).sql("SELECT folded FROM stack_table").folded.tolist()
    assert folded == ["work;[kernel 0x0]"]


def test_kinds_count_rows_events_and_units(tiny_store: Path):
    kinds = sx.Store(str(tiny_store)).kinds().set_index("kind")
    assert kinds.loc["profile", "rows"] == 2 and kinds.loc["profile", "total"] == 20 * MS
    assert kinds.loc["profile", "unit"] == "ns"
    assert kinds.loc["probe", "unit"] == "hits" and kinds.loc["probe", "total"] == 3
    assert kinds.loc["state", "events"] == 2


def test_average_threads_count_the_passes_that_ran(tmp_path: Path):
    """docs/top.md, "Average active threads": thread-seconds over the periods of the passes that
    ran. Passes every 20 ms, the one at 40 ms skipped, each seeing one thread running and one
    sleeping: one thread in each state, over the process's life and in every bucket."""
    rows = [
        {"time": t * MS, "kind": "state", "pid": 7, "value": 20 * MS, "state": state}
        for t in (0, 20, 60, 80)
        for state in ("running", "sleeping")
    ]
    _write_set(tmp_path, "a", rows, {}, [], set_id=1)
    store = sx.Store(str(tmp_path))
    summary = store.state_summary(pid=7).set_index("state")
    assert summary.avg_threads.to_dict() == {"running": 1.0, "sleeping": 1.0}
    assert summary.passes.tolist() == [4, 4]
    series = store.active_threads(0.05, pids=[7])
    assert series.threads.tolist() == [1.0] * 4, series.to_string()


def test_stores_that_are_not_stores_are_refused(tmp_path: Path):
    with pytest.raises(sx.StoreError, match="no such store directory"):
        sx.Store(str(tmp_path / "nothing"))
    with pytest.raises(sx.StoreError, match="no stacks store here"):
        sx.Store(str(tmp_path))
    (tmp_path / "x.samples.parquet").write_bytes(b"PAR1")
    with pytest.raises(sx.StoreError, match="stacks file is missing"):
        sx.Store(str(tmp_path))


def test_windows_print_their_bounds():
    w = sx.Window(pd.Timestamp("2026-01-02T03:04:05.5Z"), None)
    assert str(w) == "03:04:05.500–…"
