"""explore's answer to a question stacks-query shares against `stacks-query`'s on the same store:
the helpers of test_bundled.py and test_notebooks.py."""

import json
import math
import os
import subprocess
from pathlib import Path

import pandas as pd


def bin_dir() -> Path:
    """Where the workspace's binaries are: $STACKS_BIN, else $CARGO_TARGET_DIR/debug."""
    if os.environ.get("STACKS_BIN"):
        return Path(os.environ["STACKS_BIN"])
    target = os.environ.get("CARGO_TARGET_DIR") or str(Path.home() / ".cache/stacks-target")
    return Path(target) / "debug"


def stacks_query(store: Path, *args: str) -> pd.DataFrame:
    """`stacks-query -d STORE ARGS -f ndjson` as a frame (columns in the query's order)."""
    tool = bin_dir() / "stacks-query"
    assert tool.exists(), f"{tool} is missing: build the workspace binaries first (scripts/test does)"
    out = subprocess.run(
        [str(tool), "-d", str(store), *args, "-f", "ndjson"], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, f"stacks-query {' '.join(args)}: {out.stderr}"
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    return pd.DataFrame(rows)


def _cell(v):
    """A value as both tools' rows compare: nulls as None, whole numbers as ints, other numbers
    to 12 significant digits."""
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v) if v.is_integer() else float(f"{v:.12g}")
    if hasattr(v, "item"):  # numpy scalars
        return _cell(v.item())
    return v


def rows(df: pd.DataFrame, columns: list[str]) -> list[tuple]:
    """The rows of `df`'s `columns`, comparable and sorted."""
    out = [tuple(_cell(v) for v in r) for r in df[columns].itertuples(index=False, name=None)]
    return sorted(out, key=repr)


def assert_same(explore: pd.DataFrame, query: pd.DataFrame, what: str) -> int:
    """Both frames hold the same columns and the same rows; returns how many."""
    assert list(explore.columns) == list(query.columns) or query.empty, f"{what}: explore {list(explore.columns)}, stacks-query {list(query.columns)}"
    got, want = rows(explore, list(explore.columns)), rows(query, list(explore.columns)) if not query.empty else []
    assert got == want, f"{what}: explore and stacks-query differ:\nexplore {got[:5]}\nstacks-query {want[:5]}"
    return len(got)
