"""The bundled queries of stacks-query (stacks-sql/queries/*.sql) and the views they build on
(stacks-sql/views/*.sql), run as they are through DuckDB.

explore asks no question a bundled query answers in SQL of its own: it runs that query's file,
with its `-- param:` defaults and the values given as DuckDB `$name` parameters, so both tools
give the same numbers (explore/tests test this). Timestamps are bound as text with their
nanoseconds (a Python datetime would be cut to microseconds).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

if TYPE_CHECKING:
    import pandas as pd

from .views import REPO

SQL = REPO / "stacks-sql"
QUERIES = SQL / "queries"
VIEWS = SQL / "views"

# `-- param: NAME TYPE = DEFAULT   what it is` (stacks-sql/src/params.rs reads the same lines).
_PARAM = re.compile(r"^--\s*param:\s*(\w+)\s+(\w+)\s*=\s*('(?:[^']|'')*'|\S+)")


def query_sql(name: str) -> str:
    """The text of the bundled query `name`."""
    path = QUERIES / f"{name}.sql"
    if not path.exists():
        raise KeyError(f"{name}: no bundled query of that name in {QUERIES}")
    return path.read_text()


def parameters(name: str) -> dict[str, tuple[str, object]]:
    """The parameters `name` declares: their type and default value (None for null)."""
    out = {}
    for line in query_sql(name).splitlines():
        m = _PARAM.match(line.strip())
        if not m:
            continue
        pname, ptype, default = m.group(1), m.group(2).lower(), m.group(3)
        if default.lower() == "null":
            value = None
        elif default.startswith("'"):
            value = default[1:-1].replace("''", "'")
        elif default.lower() in ("true", "false"):
            value = default.lower() == "true"
        elif re.fullmatch(r"-?\d+", default):
            value = int(default)
        else:
            value = default
        out[pname] = (ptype, value)
    return out


def _timestamp(value) -> str:
    """A time as DuckDB text with its nanoseconds, in UTC."""
    import pandas as pd  # here: views.py (its view definitions) needs DuckDB alone

    ts = pd.Timestamp(value)
    ts = ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
    return ts.strftime("%Y-%m-%d %H:%M:%S.") + f"{ts.value % 1_000_000_000:09d}+00"


def run(con: duckdb.DuckDBPyConnection, name: str, **given) -> pd.DataFrame:
    """Run bundled query `name` over the views of `con` with `given` parameters (the others
    take their declared defaults). `from_`/`to` name the window (`from` is a Python keyword)."""
    declared = parameters(name)
    if "from_" in given:
        given["from"] = given.pop("from_")
    unknown = set(given) - set(declared)
    if unknown:
        raise KeyError(f"{name}: no parameter {', '.join(sorted(unknown))} (it takes {', '.join(declared)})")
    values = {}
    for pname, (ptype, default) in declared.items():
        value = given.get(pname, default)
        if value is not None and ptype == "timestamp":
            value = _timestamp(value)
        values[pname] = value
    return con.execute(query_sql(name), values).df()


def create_views(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Define the views of stacks-sql/views/ over `samples` in `con`, as stacks-sql registers
    them; a view that does not bind, reading a column the store has not (one written before
    it), is left out, as there. Returns the names defined."""
    made = []
    for path in sorted(VIEWS.glob("*.sql")):
        try:
            con.execute(f"CREATE VIEW {path.stem} AS {path.read_text()}")
        except duckdb.BinderException:
            continue
        made.append(path.stem)
    return made
