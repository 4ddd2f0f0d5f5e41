"""Flame graphs drawn with matplotlib from folded stacks (`Store.folded`), and differential flame graphs.

A frame's width is its share of the total value; the root is at the bottom. Frames narrower
than `min_share` of the total are not drawn (their value stays in their parent's width).
Labels are shortened for display (generic arguments and leading module paths dropped) and cut
to fit their frame; the data keep the full names.
"""

from __future__ import annotations

import colorsys
import hashlib
import re
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.collections import PatchCollection
from matplotlib.colors import TwoSlopeNorm
from matplotlib.patches import Patch, Rectangle

from .plots import format_value


@dataclass
class Node:
    """A frame in the merged tree of stacks: its inclusive value and its callees."""

    name: str
    value: float = 0.0
    role: str = "user"  # "user", "kernel" or "group" (a synthetic root frame: process, state…)
    children: dict[str, "Node"] = field(default_factory=dict)

    def child(self, name: str, role: str) -> "Node":
        node = self.children.get(name)
        if node is None:
            node = self.children[name] = Node(name, 0.0, role)
        return node

    def find(self, pattern: str) -> float:
        """The value of the stacks through a frame whose name matches regex `pattern` (each stack counted once)."""
        rx = re.compile(pattern)

        def walk(node: Node) -> float:
            if rx.search(node.name):
                return node.value
            return sum(walk(c) for c in node.children.values())

        return sum(walk(c) for c in self.children.values())

    def depth(self) -> int:
        return 1 + max((c.depth() for c in self.children.values()), default=0)


# Frames of the Rust standard library's thread start and panic plumbing: a dozen levels under
# every thread's own code. `hide=RUNTIME_FRAMES` leaves them out of a flame graph.
RUNTIME_FRAMES = (
    r"^(start_thread|clone3?|__clone3?|__libc_start_call_main|__libc_start_main.*"
    r"|std::rt::lang_start.*|std::(panic|panicking)::catch_unwind.*|std::sys::backtrace::__rust_begin_short_backtrace"
    r"|std::thread::lifecycle::spawn_unchecked::.*|<std::sys::thread::unix::Thread>::new::thread_start"
    r"|core::ops::function::FnOnce::call_once.*|<.* as core::ops::function::FnOnce<.*>>::call_once)$"
)


def tree(folded: pd.DataFrame, groups: int = 1, value: str = "value", hide: str | None = None) -> Node:
    """Merge the rows of `folded` (columns `folded`, `kernel_frames`, `value`) into a tree.

    The first `groups` frames of each stack are grouping frames (process, state…); frames whose
    name matches regex `hide` are left out (their callees move up), values unchanged.
    """
    rx = re.compile(hide) if hide else None
    root = Node("all", 0.0, "group")
    for stack, nk, v in zip(folded["folded"], folded["kernel_frames"], folded[value]):
        if not v:
            continue
        frames = stack.split(";")
        first_kernel = len(frames) - int(nk)
        root.value += v
        node = root
        for i, name in enumerate(frames):
            role = "group" if i < groups else ("kernel" if i >= first_kernel else "user")
            if rx is not None and role != "group" and rx.search(name):
                continue
            node = node.child(name, role)
            node.value += v
    return root


def _matching(text: str, i: int) -> int:
    """The index of the `>` closing the `<` at `i` (`->` is not one), or len(text)."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "<":
            depth += 1
        elif text[j] == ">" and text[j - 1] != "-":
            depth -= 1
            if depth == 0:
                return j
    return len(text)


def _strip(text: str) -> str:
    """`text` without generic arguments; a qualified `<T as Trait>` or `<impl Trait for T>` becomes `T`."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c != "<":
            out.append(c)
            i += 1
            continue
        end = _matching(text, i)
        before = "".join(out)
        if before == "" or before.endswith("::") and not before.endswith(">::"):
            inner = text[i + 1 : end]
            if before.endswith("::") and (i + 1 < len(text)) and not inner.startswith("impl "):
                # A turbofish (`f::<T>`): generic arguments.
                out[-2:] = []
            else:
                if inner.startswith("impl "):
                    inner = inner.split(" for ", 1)[1] if " for " in inner else inner[5:]
                inner = inner.split(" as ", 1)[0].lstrip("&*").removeprefix("dyn ").removeprefix("mut ")
                out.append(_strip(inner).split("::")[-1])
        i = end + 1
    return "".join(out)


def short_name(name: str) -> str:
    """A frame name for display: generic arguments dropped, `<Foo as Bar>::f` → `Foo::f`, the last two path segments kept."""
    if name.startswith("["):
        return name
    segments = [s for s in _strip(name).split("::") if s]
    if not segments:
        return name
    last = max((i for i, s in enumerate(segments) if not s.startswith("{")), default=len(segments) - 1)
    return "::".join(segments[max(0, last - 1) :])


def _colour(node: Node) -> tuple[float, float, float]:
    if node.role == "group":
        return (0.78, 0.78, 0.80)
    h = int(hashlib.md5(node.name.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    if node.role == "kernel":
        return colorsys.hls_to_rgb(0.47 + 0.08 * h, 0.72, 0.45)
    return colorsys.hls_to_rgb(0.0 + 0.13 * h, 0.62, 0.85)


def _layout(root: Node, min_value: float, max_depth: int):
    """(x, depth, width, node) of every drawn frame, children ordered by value, biggest first."""
    out = []

    def walk(node: Node, x: float, depth: int):
        if depth >= max_depth:
            return
        for c in sorted(node.children.values(), key=lambda n: (-n.value, n.name)):
            if c.value >= min_value:
                out.append((x, depth, c.value, c))
                walk(c, x, depth + 1)
            x += c.value

    walk(root, 0.0, 0)
    return out


def _draw(ax, boxes, total: float, colours, fontsize: float, fig_width_in: float):
    rects = [Rectangle((x / total, d), w / total, 0.92) for x, d, w, _ in boxes]
    ax.add_collection(PatchCollection(rects, facecolors=colours, edgecolors="white", linewidths=0.4))
    # Characters that fit a frame: its width in points over an average glyph width.
    points_per_unit = fig_width_in * 72 * ax.get_position().width
    for (x, d, w, node), colour in zip(boxes, colours):
        chars = int(w / total * points_per_unit / (0.58 * fontsize)) - 1
        if chars < 3:
            continue
        label = short_name(node.name)
        if len(label) > chars:
            label = label[: chars - 1] + "…"
        ax.text(
            x / total + 0.002,
            d + 0.46,
            label,
            va="center",
            ha="left",
            fontsize=fontsize,
            color="black",
            clip_on=True,
        )


def _axes(levels: int, width: float, title: str):
    height = min(0.24 * levels + 1.4, 30)
    fig, ax = plt.subplots(figsize=(width, height), layout="constrained")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, max(levels, 1))
    ax.set_title(title, loc="left")
    ax.set_yticks([])
    ax.set_ylabel("stack depth (root at the bottom)")
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v * 100:.0f}%"))
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    return fig, ax


def flamegraph(
    folded: pd.DataFrame,
    title: str,
    unit: str = "ns",
    groups: int = 1,
    min_share: float = 0.002,
    max_depth: int = 60,
    width: float = 13.0,
    fontsize: float = 8.0,
    hide: str | None = None,
):
    """Draw a flame graph of `folded` (from `Store.folded`) and return the figure; `unit` is the unit of `value`.

    `groups`: how many leading frames are grouping frames (drawn grey); `hide`: a regex of
    frames to leave out (`RUNTIME_FRAMES`); `min_share`: the narrowest frame drawn.
    """
    root = tree(folded, groups, hide=hide)
    if root.value <= 0:
        fig, ax = plt.subplots(figsize=(width, 1.6), layout="constrained")
        ax.set_axis_off()
        ax.set_title(title, loc="left")
        ax.text(0.5, 0.5, "no samples in this selection", ha="center", va="center")
        return fig
    boxes = _layout(root, root.value * min_share, max_depth)
    levels = max(d for _, d, _, _ in boxes) + 1
    fig, ax = _axes(levels, width, f"{title} — total {format_value(root.value, unit)}")
    _draw(ax, boxes, root.value, [_colour(n) for *_, n in boxes], fontsize, width)
    ax.set_xlabel(f"share of the total ({format_value(root.value, unit)})")
    roles = {n.role for *_, n in boxes}
    labels = {"user": "user frame", "kernel": "kernel frame", "group": "grouping (process, state…)"}
    fig.legend(
        handles=[Patch(color=_colour(Node("a", role=r)), label=labels[r]) for r in labels if r in roles],
        loc="outside upper right",
        ncols=3,
    )
    return fig


def _shares(root: Node) -> dict[tuple[str, ...], float]:
    out = {}

    def walk(node: Node, path: tuple[str, ...]):
        for c in node.children.values():
            p = path + (c.name,)
            out[p] = c.value / root.value
            walk(c, p)

    if root.value > 0:
        walk(root, ())
    return out


def diff_flamegraph(
    before: pd.DataFrame,
    after: pd.DataFrame,
    title: str,
    unit: str = "ns",
    groups: int = 1,
    min_share: float = 0.002,
    max_depth: int = 60,
    width: float = 13.0,
    fontsize: float = 8.0,
    hide: str | None = None,
):
    """A differential flame graph: frames as in `after`, coloured by the change of their share of the total since `before`.

    Red: a larger share of the total after than before; blue: smaller. Each profile is
    normalized to its own total, so windows of different lengths compare. Frames gone in
    `after` are not drawn: `diff_table` lists them.
    """
    a, b = tree(after, groups, hide=hide), tree(before, groups, hide=hide)
    if a.value <= 0 or b.value <= 0:
        return flamegraph(after, title + " (nothing to compare: a window is empty)", unit, groups, hide=hide)
    sa, sb = _shares(a), _shares(b)
    boxes, paths = [], []

    def walk(node: Node, x: float, depth: int, path):
        if depth >= max_depth:
            return
        for c in sorted(node.children.values(), key=lambda n: (-n.value, n.name)):
            p = path + (c.name,)
            if c.value >= a.value * min_share:
                boxes.append((x, depth, c.value, c))
                paths.append(p)
                walk(c, x, depth + 1, p)
            x += c.value

    walk(a, 0.0, 0, ())
    deltas = np.array([(sa[p] - sb.get(p, 0.0)) * 100 for p in paths])
    limit = max(1.0, float(np.abs(deltas).max()) if len(deltas) else 1.0)
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-limit, vmax=limit)
    cmap = plt.get_cmap("RdBu_r")
    colours = [cmap(norm(d) * 0.8 + 0.1) for d in deltas]
    levels = max(d for _, d, _, _ in boxes) + 1
    fig, ax = _axes(levels, width, title)
    _draw(ax, boxes, a.value, colours, fontsize, width)
    ax.set_xlabel(
        f"share of the later window's total ({format_value(a.value, unit)}; earlier window: {format_value(b.value, unit)})"
    )
    sm = plt.cm.ScalarMappable(norm=norm, cmap=cmap)
    bar = fig.colorbar(sm, ax=ax, fraction=0.025, pad=0.01)
    bar.set_label("change of share (percentage points)\nred: grew, blue: shrank")
    return fig


def function_values(folded: pd.DataFrame, groups: int = 1, hide: str | None = None) -> pd.DataFrame:
    """Per function: its inclusive value (the stacks through it, each counted once) and exclusive value (the stacks ending in it).

    Frames matching regex `hide` are left out, as in `flamegraph`.
    """
    rx = re.compile(hide) if hide else None
    incl: dict[str, float] = {}
    self_: dict[str, float] = {}
    for stack, v in zip(folded["folded"], folded["value"]):
        frames = stack.split(";")[groups:]
        if rx is not None:
            frames = [f for f in frames if not rx.search(f)]
        for name in set(frames):
            incl[name] = incl.get(name, 0.0) + v
        if frames:
            self_[frames[-1]] = self_.get(frames[-1], 0.0) + v
    df = pd.DataFrame({"function": list(incl), "inclusive": list(incl.values())})
    df["exclusive"] = df["function"].map(self_).fillna(0.0)
    return df.sort_values(["inclusive", "exclusive", "function"], ascending=[False, False, True], ignore_index=True)


def diff_table(before: pd.DataFrame, after: pd.DataFrame, top: int = 15, groups: int = 1, hide: str | None = None) -> pd.DataFrame:
    """The functions whose inclusive share of the total changed most between `before` and `after` (percentage points)."""
    fb, fa = function_values(before, groups, hide), function_values(after, groups, hide)
    tb, ta = before["value"].sum(), after["value"].sum()
    df = pd.merge(
        fb[["function", "inclusive"]].rename(columns={"inclusive": "before"}),
        fa[["function", "inclusive"]].rename(columns={"inclusive": "after"}),
        on="function",
        how="outer",
    ).fillna(0.0)
    df["before %"] = df.pop("before") / max(tb, 1) * 100
    df["after %"] = df.pop("after") / max(ta, 1) * 100
    df["change (pp)"] = df["after %"] - df["before %"]
    df = df.reindex(df["change (pp)"].abs().sort_values(ascending=False).index)
    return df.head(top).round(2).reset_index(drop=True)
