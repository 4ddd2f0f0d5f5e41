"""stacks_explore: the helpers of the explore/ notebooks — open a stacks store in DuckDB, fold stacks, draw flame graphs and plots.

    import stacks_explore as sx
    store = sx.open_store()            # $STACKS_STORE (a directory or s3:// URL), else out/
    store.kinds()                      # rows, events and totals per kind
    sx.flamegraph(store.folded("profile"), "CPU")

`store.sql(...)` runs any DuckDB SQL over the views `samples`, `stack_table`, `stacks` and
`recordings` (see views.py); the other methods of `Store` return pandas DataFrames.
"""

from .flame import RUNTIME_FRAMES, Node, diff_flamegraph, diff_table, flamegraph, function_values, short_name, tree
from .heap import heap_and_rss, stack_label
from .plots import (
    STATE_COLOURS,
    active_threads,
    breakdowns,
    format_bytes,
    format_ns,
    format_value,
    hbar,
    latency_heatmaps,
    lines,
    save,
    style,
    swimlane,
    time_axis,
)
from .store import NO_SPAN, NO_STACK, SHORT_OFFCPU, Store, StoreError, Window, default_location, open_store

__all__ = [
    "NO_SPAN",
    "NO_STACK",
    "SHORT_OFFCPU",
    "RUNTIME_FRAMES",
    "STATE_COLOURS",
    "Node",
    "Store",
    "StoreError",
    "Window",
    "active_threads",
    "breakdowns",
    "default_location",
    "diff_flamegraph",
    "diff_table",
    "flamegraph",
    "format_bytes",
    "format_ns",
    "format_value",
    "function_values",
    "hbar",
    "heap_and_rss",
    "latency_heatmaps",
    "lines",
    "open_store",
    "save",
    "short_name",
    "stack_label",
    "style",
    "swimlane",
    "time_axis",
    "tree",
]
