"""Live heap over time from `alloc` rows (`-e alloc`, docs/heap.md): each sampled block counts its weight from its allocation to its free (the first `free` row of the same process and address after it), by allocating stack; drawn above the process's resident memory (`rss` rows).

Stacks are labelled by their frames nearest the allocation that are not the allocator's or
the sampler's (`malloc`, `__rust_alloc`, `stacks_alloc_sampler::sampled`, …), leaf first.
"""

from __future__ import annotations

import re

import matplotlib.pyplot as plt
import pandas as pd

from .flame import short_name
from .plots import _empty, _naive, _scale, time_axis

# Frames of the allocators, the samplers and Rust's allocation plumbing: skipped when naming
# the allocating stack.
ALLOCATOR_FRAMES = re.compile(
    r"^(malloc|calloc|realloc|reallocarray|free|posix_memalign|aligned_alloc|memalign|valloc"
    r"|operator new.*|_Znw.*|_Zna.*|__rustc::.*|__rust_alloc.*|__rust_realloc|__rdl_.*|__rg_.*|crossed_(malloc|calloc)"
    r"|otel_malloc|.*stacks_alloc_sampler::.*|tracing_stacks::alloc::.*|.*SampledAlloc.*|.*GlobalAlloc.*|alloc::alloc::.*"
    r"|<?alloc::raw_vec::.*|std::alloc::.*|<std::alloc::System.*)$"
)


def stack_label(folded: str | None, frames: int = 3) -> str:
    """The `frames` frames nearest the leaf of a `;`-folded stack (root first) that are not the
    allocator's, leaf first, joined by ` ← `."""
    if not folded:
        return "[no stack]"
    names = [f for f in reversed(folded.split(";")) if not ALLOCATOR_FRAMES.match(f)]
    return " ← ".join(short_name(f) for f in names[:frames]) or "[allocator only]"


def live_heap_over_time(store, pid=None, host=None, top: int = 6) -> pd.DataFrame:
    """Live sampled bytes per (process, allocating stack) after each allocation and free: columns
    `pid`, `comm`, `stack` (its label; past the `top` stacks by peak, `other`), `time`, `live`.

    A block is live from its `alloc` row to the first `free` row of its process and address
    after it; blocks never freed stay live to the end, blocks allocated before the recording are
    not seen (as `heap-growth`).
    """
    cond, params = store._filter(pid=pid, host=host)
    events = store.sql(
        f"""WITH a AS (
                SELECT pid, time, stack_id, value AS weight, args[1] AS address
                FROM samples WHERE kind = 'alloc' AND op = 'alloc' AND {cond}),
            f AS (
                SELECT pid, time, args[1] AS address
                FROM samples WHERE kind = 'alloc' AND op = 'free' AND {cond}),
            paired AS (
                SELECT a.*, f.time AS freed FROM a
                ASOF LEFT JOIN f ON a.pid = f.pid AND a.address = f.address AND a.time <= f.time)
            SELECT p.pid, epoch_ns(p.time) AS t, p.weight::DOUBLE AS delta, t.folded
            FROM paired p LEFT JOIN stack_table t USING (stack_id)
            UNION ALL
            SELECT p.pid, epoch_ns(p.freed), -p.weight::DOUBLE, t.folded
            FROM paired p LEFT JOIN stack_table t USING (stack_id) WHERE p.freed IS NOT NULL""",
        **params,
    )
    if events.empty:
        return pd.DataFrame(columns=["pid", "comm", "stack", "time", "live"])
    events["stack"] = events.pop("folded").map(stack_label)
    events = events.sort_values(["t", "delta"], ascending=[True, False], kind="stable")
    peak = events.assign(live=events.groupby(["pid", "stack"]).delta.cumsum()).groupby(["pid", "stack"]).live.max()
    keep = set(peak.sort_values(ascending=False).head(top).index)
    events["stack"] = [s if (p, s) in keep else "other" for p, s in zip(events["pid"], events["stack"])]
    events["live"] = events.groupby(["pid", "stack"]).delta.cumsum()
    names = {int(p): store.process_name(p) for p in events.pid.unique()}
    events["comm"] = events.pid.map(names)
    events["time"] = pd.to_datetime(events.pop("t"), unit="ns", utc=True)
    return events[["pid", "comm", "stack", "time", "live"]].reset_index(drop=True)


def heap_and_rss(heap: pd.DataFrame, rss: pd.DataFrame, title: str, width: float = 13.0):
    """Two panels over one time axis: live heap bytes by allocating stack (step lines, the
    legend giving each stack's last and peak value) and resident memory of the same processes."""
    if heap.empty:
        return _empty(title, "no `alloc` rows in the store (record with -e alloc)", width)
    scale, suffix = _scale("bytes")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(width, 7.5), sharex=True, height_ratios=[3, 2])
    multi = heap.pid.nunique() > 1
    series = []
    for (pid, stack), g in heap.groupby(["pid", "stack"], sort=False):
        name = f"{g.comm.iloc[0]}: {stack}" if multi else stack
        y = g.live / scale
        series.append((y.iloc[-1], y.max(), name, g.time, y))
    for last, peak, name, t, y in sorted(series, key=lambda s: (-s[0], -s[1])):
        # Value first: matplotlib leaves out labels that start with "_".
        top.step(_naive(t), y, where="post", label=f"{last:,.4g} {suffix} (peak {peak:,.4g}): {name}")
    top.set_title(title, loc="left")
    top.set_ylabel(f"live heap ({suffix})")
    top.set_ylim(bottom=0)
    top.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, title="live at the end: allocating stack")
    rss = rss[rss.pid.isin(heap.pid.unique())]
    for (pid, comm), g in rss.groupby(["pid", "comm"], sort=False):
        g = g.dropna(subset=["rss"])
        bottom.step(_naive(g.time), g.rss / scale, where="post", label=f"{g.rss.max() / scale:,.4g} {suffix} at most: {comm} ({pid})")
    bottom.set_ylabel(f"resident ({suffix})")
    bottom.set_ylim(bottom=0)
    if rss.empty:
        bottom.text(0.5, 0.5, "no `rss` rows for these processes (record with -e rss)", ha="center", transform=bottom.transAxes)
    else:
        bottom.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, title="resident memory")
    time_axis(bottom)
    return fig
