"""Plot defaults and the notebooks' figures: stacked thread states, latency heatmaps, swimlanes, bars and lines.

Every figure has a title, axis labels with units and a legend or colour bar, and is sized to be
read at 100% (13 inches wide at 100 dpi). `save(fig, name)` also writes it as a PNG (and an SVG
with `$STACKS_EXPLORE_FORMATS=png,svg`) when `$STACKS_EXPLORE_IMG` names a directory.
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib as mpl
import matplotlib.dates as mdates
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm
from matplotlib.patches import Patch

# Thread states, bottom to top of a stack, with their colours: on CPU, waiting for a CPU,
# blocked in the kernel (usually IO), and the rest; sleeping last (usually the most, the least
# interesting).
STATE_COLOURS = {
    "running": "#2ca02c",
    "runnable": "#ffb000",
    "uninterruptible": "#d62728",
    "stopped": "#9467bd",
    "other": "#8c564b",
    "idle": "#c7c7c7",
    "sleeping": "#9ecae1",
}
STATE_LABELS = {
    "running": "running (on CPU)",
    "runnable": "runnable (waiting for a CPU)",
    "uninterruptible": "uninterruptible (D, usually IO)",
    "sleeping": "sleeping (S)",
}


def style() -> None:
    """Matplotlib defaults for the notebooks: readable fonts, constrained layout, light grids, PNG output."""
    mpl.rcParams.update(
        {
            "figure.figsize": (13, 4.5),
            "figure.dpi": 100,
            "savefig.dpi": 110,
            "savefig.bbox": "tight",
            "font.size": 10,
            "axes.titlesize": 12,
            "axes.titleweight": "bold",
            "axes.labelsize": 10,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "legend.fontsize": 9,
            "legend.frameon": False,
            "figure.constrained_layout.use": True,
        }
    )
    pd.set_option("display.max_colwidth", 90)
    pd.set_option("display.width", 160)
    pd.set_option("display.max_columns", 30)
    pd.set_option("display.max_rows", 60)
    try:
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("png")
    except ImportError:
        pass


def format_ns(ns: float) -> str:
    """`1.5 s`, `20 ms`, `3 µs`, `512 ns`."""
    ns = float(ns)
    for div, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if abs(ns) >= div:
            return f"{ns / div:.3g} {unit}"
    return f"{ns:.0f} ns"


def format_bytes(n: float) -> str:
    """`4 MiB`, `12.5 KiB`, `100 B`."""
    n = float(n)
    for div, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if abs(n) >= div:
            return f"{n / div:.3g} {unit}"
    return f"{n:.0f} B"


def format_value(v: float, unit: str) -> str:
    """A value in its unit (`ns`, `bytes`, or a count)."""
    if unit == "ns":
        return format_ns(v)
    if unit == "bytes":
        return format_bytes(v)
    return f"{v:,.0f} {unit}"


def time_axis(ax, label: str = "time (UTC)") -> None:
    """Concise date ticks on the x axis (sub-second where the range is short)."""
    locator = mdates.AutoDateLocator(minticks=4, maxticks=10)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, show_offset=True))
    ax.set_xlabel(label)


def _naive(times: pd.Series) -> pd.Series:
    # Matplotlib's date conversion of tz-aware pandas values is fine, but pcolormesh needs numbers.
    return times.dt.tz_convert("UTC").dt.tz_localize(None)


def _empty(title: str, why: str, width: float):
    fig, ax = plt.subplots(figsize=(width, 1.6))
    ax.set_axis_off()
    ax.set_title(title, loc="left")
    ax.text(0.5, 0.4, why, ha="center", va="center", transform=ax.transAxes)
    return fig


def save(fig, name: str) -> None:
    """Write `fig` as NAME.png into `$STACKS_EXPLORE_IMG` when it is set (and NAME.svg too with
    `$STACKS_EXPLORE_FORMATS=png,svg`)."""
    where = os.environ.get("STACKS_EXPLORE_IMG")
    if not where:
        return
    for fmt in os.environ.get("STACKS_EXPLORE_FORMATS", "png").split(","):
        path = Path(where) / f"{name}.{fmt.strip()}"
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)


def _state_order(states) -> list[str]:
    known = [s for s in STATE_COLOURS if s in set(states)]
    return known + sorted(set(states) - set(known))


def _state_legend(states) -> list[Patch]:
    return [Patch(color=STATE_COLOURS.get(s, "#444444"), label=STATE_LABELS.get(s, s)) for s in states]


def active_threads(df: pd.DataFrame, names: dict[int, str], interval_s: float, width: float = 13.0):
    """Stacked areas of average threads per state over time, one panel per process (`Store.active_threads`)."""
    pids = list(dict.fromkeys(df["pid"]))
    if not pids:
        return _empty("Average threads by state", "no state rows in this store: record with -e state:uk:HZ", width)
    states = _state_order(df["state"].unique())
    fig, axes = plt.subplots(len(pids), 1, figsize=(width, 2.9 * len(pids) + 0.6), squeeze=False)
    for ax, pid in zip(axes[:, 0], pids):
        p = df[df["pid"] == pid].pivot_table(index="time", columns="state", values="threads", aggfunc="sum")
        p = p.reindex(columns=[s for s in states if s in p.columns]).fillna(0.0)
        # Every bucket of the process's life, empty ones included, so areas do not interpolate over gaps.
        # (and one more past the end, so the last bucket is drawn its full width).
        full = pd.date_range(
            p.index.min(), p.index.max() + pd.Timedelta(seconds=interval_s), freq=pd.Timedelta(seconds=interval_s)
        )
        p = p.reindex(full, fill_value=0.0)
        x = _naive(pd.Series(p.index))
        ax.stackplot(
            x,
            [p[s].to_numpy() for s in p.columns],
            colors=[STATE_COLOURS.get(s, "#444444") for s in p.columns],
            step="post",
            linewidth=0,
        )
        ax.set_xlim(x.iloc[0], x.iloc[-1])
        ax.set_title(f"{names.get(pid, pid)}: average threads by state, per {interval_s:g} s", loc="left")
        ax.set_ylabel("threads")
        ax.set_ylim(0, max(1.0, float(p.sum(axis=1).max()) * 1.1))
        time_axis(ax)
    fig.legend(handles=_state_legend(states), loc="outside upper center", ncols=len(states))
    return fig


def _bucket_label(k: int) -> str:
    return format_ns(2.0**k)


def latency_heatmaps(frames: dict[str, pd.DataFrame], interval_s: float, titles: dict[str, str], width: float = 13.0):
    """Heatmaps of time × log2 latency bucket, coloured by events (left) and by time (right), one row per source."""
    fig, axes = plt.subplots(len(frames), 2, figsize=(width, 3.3 * len(frames) + 0.3), squeeze=False)
    for row, (name, df) in zip(axes, frames.items()):
        for ax, (col, what) in zip(row, (("events", "events"), ("time_ns", "time (s)"))):
            ax.grid(False)
            ax.set_title(f"{titles.get(name, name)} — coloured by {what}", loc="left", fontsize=11)
            if df.empty:
                ax.text(0.5, 0.5, f"no {name} rows in this store", ha="center", va="center", transform=ax.transAxes)
                ax.set_xticks([])
                ax.set_yticks([])
                continue
            times = sorted(df["time"].unique())
            t0 = pd.Timestamp(times[0])
            steps = int(round((pd.Timestamp(times[-1]) - t0) / pd.Timedelta(seconds=interval_s))) + 1
            lo, hi = int(df["bucket"].min()), int(df["bucket"].max())
            grid = np.full((hi - lo + 1, steps), np.nan)
            ti = ((df["time"] - t0) / pd.Timedelta(seconds=interval_s)).round().astype(int).to_numpy()
            values = df[col].to_numpy(dtype=float) / (1e9 if col == "time_ns" else 1.0)
            for i, b, v in zip(ti, df["bucket"].to_numpy() - lo, values):
                grid[b, i] = (0.0 if np.isnan(grid[b, i]) else grid[b, i]) + v
            grid[grid <= 0] = np.nan
            xedges = _naive(pd.Series(pd.date_range(t0, periods=steps + 1, freq=pd.Timedelta(seconds=interval_s))))
            yedges = np.arange(lo, hi + 2)
            finite = grid[np.isfinite(grid)]
            norm = LogNorm(vmin=max(finite.min(), 1e-9), vmax=max(finite.max(), finite.min() * 10))
            mesh = ax.pcolormesh(xedges, yedges, grid, cmap="viridis" if col == "events" else "magma_r", norm=norm)
            bar = fig.colorbar(mesh, ax=ax, pad=0.01)
            bar.set_label(what)
            step = max(1, (hi - lo + 1) // 6)
            ticks = list(range(lo, hi + 2, step))
            ax.set_yticks(ticks)
            ax.set_yticklabels([_bucket_label(k) for k in ticks])
            ax.set_ylabel("latency (log2 buckets)")
            time_axis(ax)
    return fig


def swimlane(df: pd.DataFrame, title: str, width: float = 13.0, max_threads: int = 40):
    """Thread × time, coloured by state, from `state` samples (`Store.state_samples`): consecutive samples in one state are one bar."""
    if df.empty:
        return _empty(title, "no state rows for this process: record with -e state:uk:HZ", width)
    threads = df.groupby("tid")["thread"].last()
    tids = list(threads.index[:max_threads])
    fig, ax = plt.subplots(figsize=(width, 0.42 * len(tids) + 1.6))
    states = _state_order(df["state"].unique())
    t0 = df["time"].min()
    span = max((df["time"].max() - t0).total_seconds(), 1e-9)
    for y, tid in enumerate(tids):
        rows = df[df["tid"] == tid]
        start = ((rows["time"] - t0).dt.total_seconds()).to_numpy()
        length = rows["ns"].to_numpy() / 1e9
        state = rows["state"].to_numpy()
        call = rows["syscall"].fillna("").to_numpy()
        runs = []  # [start, length, state, syscall]: samples merged while both hold and no pass is missing
        for s, l, st, c in zip(start, length, state, call):
            last = runs[-1] if runs else None
            if last and last[2] == st and last[3] == c and s <= last[0] + last[1] + 1.5 * l:
                last[1] = s + l - last[0]
            else:
                runs.append([s, l, st, c])
        for st in set(state):
            bars = [(r[0], r[1]) for r in runs if r[2] == st]
            ax.broken_barh(bars, (y - 0.4, 0.8), color=STATE_COLOURS.get(st, "#444444"))
        for s, l, st, c in runs:
            if c and l >= 0.12 * span:
                ax.text(s + l / 2, y, c, ha="center", va="center", fontsize=8, color="#222222", clip_on=True)
    ax.set_yticks(range(len(tids)))
    ax.set_yticklabels([f"{threads[t]} ({t})" for t in tids])
    ax.invert_yaxis()
    ax.set_ylim(len(tids) - 0.5, -0.5)
    ax.set_xlabel(f"seconds since {pd.Timestamp(t0).strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]} UTC")
    ax.set_ylabel("thread (tid)")
    ax.set_title(title, loc="left")
    ax.grid(axis="y", visible=False)
    ax.legend(handles=_state_legend(states), loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def breakdowns(df: pd.DataFrame, value: str, columns: list[str], title: str, unit: str = "ns", top: int = 12, width: float = 13.0):
    """One panel per column of `columns`: the `top` values of that column by summed `value`, as horizontal bars."""
    fig, axes = plt.subplots(1, len(columns), figsize=(width, 0.36 * top + 1.8), squeeze=False)
    scale, label = _scale(unit)
    label = {"s": "seconds"}.get(label, label)
    for ax, col in zip(axes[0], columns):
        d = df.groupby(col)[value].sum().sort_values(ascending=False).head(top).iloc[::-1] / scale
        ax.barh([str(i)[:40] for i in d.index], d.to_numpy(), color="#4c72b0")
        ax.set_title(f"by {col}", loc="left", fontsize=11)
        ax.set_xlabel(label)
        ax.grid(axis="y", visible=False)
        ax.tick_params(axis="y", labelsize=8)
    fig.suptitle(title, x=0.01, ha="left", fontweight="bold")
    return fig


def _scale(unit: str) -> tuple[float, str]:
    """Divisor and axis unit for values in `unit`: ns → seconds, bytes → MiB."""
    return {"ns": (1e9, "s"), "bytes": (float(1 << 20), "MiB"), "s": (1.0, "s")}.get(unit, (1.0, unit))


def lines(
    df: pd.DataFrame,
    key: list[str],
    value: str,
    title: str,
    ylabel: str,
    unit: str = "bytes",
    cumulative: bool = False,
    logy: bool = False,
    legend: str = "last",
    width: float = 13.0,
):
    """One step line per `key` of `value` over `time` (a running total with `cumulative`).

    The legend gives each line's `last` value, or its `max`, biggest first.
    """
    scale, suffix = _scale(unit)
    if df.empty:
        return _empty(title, "no rows of this kind in the store", width)
    fig, ax = plt.subplots(figsize=(width, 4.8))
    series = []
    for k, g in df.sort_values("time").groupby(key, sort=False):
        # Rows without a value (an `rss` row at a process's exit, its resident bytes unknown)
        # are not points of the line.
        g = g.dropna(subset=[value])
        if g.empty:
            continue
        name = " ".join(str(x) for x in (k if isinstance(k, tuple) else (k,)))
        t, y = g["time"], (g[value].cumsum() if cumulative else g[value]) / scale
        if cumulative:  # from zero at the first point
            t, y = pd.concat([t.iloc[:1], t], ignore_index=True), pd.concat([pd.Series([0.0]), y], ignore_index=True)
        shown = y.iloc[-1] if legend == "last" else y.max()
        series.append((shown, name, t, y))
    for shown, name, t, y in sorted(series, key=lambda s: -s[0]):
        ax.step(_naive(t), y, where="post", label=f"{name}: {shown:,.4g} {suffix}")
    ax.set_title(title, loc="left")
    ax.set_ylabel(f"{ylabel} ({suffix})")
    if logy:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    time_axis(ax)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, title=f"{legend} value")
    return fig


def hbar(
    df: pd.DataFrame,
    label: str,
    columns: list[str],
    title: str,
    unit: str = "s",
    names: list[str] | None = None,
    width: float = 13.0,
    top: int = 15,
):
    """Horizontal bars of `columns` (stacked, legend `names`) per `label`, in the order of `df`, first on top; `unit` of the columns: ns, bytes, s."""
    scale, suffix = _scale(unit)
    d = df.head(top).iloc[::-1]
    fig, ax = plt.subplots(figsize=(width, 0.38 * len(d) + 1.5))
    left = np.zeros(len(d))
    cmap = plt.get_cmap("tab10")
    for i, c in enumerate(columns):
        v = d[c].to_numpy(dtype=float) / scale
        ax.barh(d[label].astype(str), v, left=left, label=(names or columns)[i], color=cmap(i))
        left += v
    ax.set_title(title, loc="left")
    ax.set_xlabel({"s": "seconds"}.get(suffix, suffix))
    ax.grid(axis="y", visible=False)
    if len(columns) > 1:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig
