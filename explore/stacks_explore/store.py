"""The questions the notebooks ask of a stacks store, over the DuckDB views of views.py.

`Store` opens a store (a directory or an s3:// URL) with `views.create_views` and reads only
its views (`samples`, `stack_table`, `stacks`, `recordings`, stacks-sql's `waits` and
`observed`), so the store's layout is no concern of this file. A question a bundled query of
stacks-query answers is that query's file, run by `bundled.run` (`Store.bundled`); what is
written here in SQL asks what no bundled query does.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd

from . import bundled
from .views import StoreError, create_views, default_location, hint

NO_STACK = "[no stack]"
SHORT_OFFCPU = "[folded short off-CPU intervals]"
UNSYMBOLIZED = "[not symbolized: pack the output of stacks-symbolize]"
NO_SPAN = "[no span]"

# Kernel frames that only say "the thread left the CPU", not why: skipped when naming the
# reason of an off-CPU interval by its innermost kernel frame.
SCHEDULER_FRAMES = r"schedule|^__switch_to|^finish_task_switch|^context_switch"

# The registry of event kinds (stacks_stream::kinds), as kinds.json: generated from it, and
# kept up to date by a test of stacks-stream.
KINDS = {k["name"]: k for k in json.loads((Path(__file__).parent / "kinds.json").read_text())["kinds"]}


def value_unit(kind: dict) -> str:
    """How the notebooks name the unit of a kind's `value`: `ns`, `bytes`, or what it counts
    (`hits` of probes, `events` of the others)."""
    if kind["unit"] != "count":
        return kind["unit"]
    return "hits" if kind["value"] == "hits" else "events"


# The unit of `value` per kind (docs/format.md, "Kinds").
VALUE_UNITS = {name: value_unit(k) for name, k in KINDS.items()}


@dataclass(frozen=True)
class Window:
    """A time window, [start, end), as anything pandas.Timestamp takes; None: unbounded."""

    start: object = None
    end: object = None

    def __str__(self) -> str:
        def t(x):
            return "…" if x is None else pd.Timestamp(x).strftime("%H:%M:%S.%f")[:-3]

        return f"{t(self.start)}–{t(self.end)}"


def _ns(t) -> int | None:
    if t is None:
        return None
    ts = pd.Timestamp(t)
    if ts.tzinfo is None:
        ts = ts.tz_localize("UTC")
    return int(ts.value)


def _to_time(ns: pd.Series) -> pd.Series:
    return pd.to_datetime(ns.astype("int64"), unit="ns", utc=True)


# The time `state` sampling observed each process (`pid`) per bucket `t` (`0`: one bucket) of
# its rows `r`: stacks-sql's view `observed` (stacks-sql/views/observed.sql, the one rule, which
# stacks-top's average active threads read too), the periods of the passes that ran and saw it.
# docs/top.md, "Average active threads".
_OBSERVED = """p AS (SELECT pid, {bucket} AS t, time, max(period) AS period FROM observed
                       WHERE {cond} GROUP BY 1, 2, 3),
                o AS (SELECT pid, t, sum(period) AS observed, count(*) AS passes FROM p GROUP BY 1, 2)"""


class Store:
    """A stacks store opened in DuckDB. `sql()` runs any SQL over its views; the methods answer the notebooks' questions."""

    def __init__(self, location: str):
        self.location = location
        self.con = duckdb.connect()
        self.con.execute("SET TimeZone = 'UTC'")
        create_views(self.con, location)
        rows = self.con.execute("SELECT count(*) FROM samples").fetchone()[0]
        if rows == 0:
            raise StoreError(f"{location}: the store holds no rows: {hint()}.")
        self.rows = rows

    def __repr__(self) -> str:
        return f"Store({self.location!r}, {self.rows} rows)"

    # -- plumbing --------------------------------------------------------------------------

    def sql(self, query: str, **params) -> pd.DataFrame:
        """Run `query` (DuckDB SQL over `samples`, `stack_table`, `stacks`, `recordings`, `waits`, `observed`) with `$name` parameters."""
        return self.con.execute(query, params).df()

    def bundled(self, name: str, window: Window | None = None, **params) -> pd.DataFrame:
        """The bundled query `name` of stacks-query (stacks-sql/queries/NAME.sql) as it is, with
        its parameters (`pid=…`, `comm=…`) and `window` as its `from`/`to`: the same rows
        `stacks-query NAME` gives."""
        if window is not None:
            params["from_"], params["to"] = window.start, window.end
        return bundled.run(self.con, name, **params)

    @staticmethod
    def _filter(pid=None, tid=None, host=None, window: Window | None = None, alias: str = "") -> tuple[str, dict]:
        """An SQL condition and its parameters keeping one process, thread, host and time window."""
        a = f"{alias}." if alias else ""
        conds, params = [], {}
        if pid is not None:
            conds.append(f"{a}pid = $pid")
            params["pid"] = int(pid)
        if tid is not None:
            conds.append(f"{a}tid = $tid")
            params["tid"] = int(tid)
        if host is not None:
            conds.append(f"{a}host = $host")
            params["host"] = host
        # Compared as timestamps, so the Parquet readers skip row groups outside the window.
        if window is not None and window.start is not None:
            conds.append(f"{a}time >= make_timestamp_ns($start_ns)::TIMESTAMPTZ_NS")
            params["start_ns"] = _ns(window.start)
        if window is not None and window.end is not None:
            conds.append(f"{a}time < make_timestamp_ns($end_ns)::TIMESTAMPTZ_NS")
            params["end_ns"] = _ns(window.end)
        return (" AND ".join(conds) or "true"), params

    # -- overview --------------------------------------------------------------------------

    def summary(self) -> pd.Series:
        """Hosts, first and last event, rows, processes and threads of the whole store."""
        row = self.sql(
            """SELECT string_agg(DISTINCT coalesce(host, '?'), ', ' ORDER BY coalesce(host, '?')) AS hosts,
                min(epoch_ns(time)) AS first_ns, max(epoch_ns(time)) AS last_ns,
                count(*) AS rows,
                count(DISTINCT (host, pid)) FILTER (WHERE pid > 0) AS processes,
                count(DISTINCT (host, tid)) FILTER (WHERE tid > 0) AS threads
            FROM samples"""
        ).iloc[0]
        first, last = _to_time(pd.Series([row.first_ns]))[0], _to_time(pd.Series([row.last_ns]))[0]
        return pd.Series(
            {
                "hosts": row.hosts,
                "first event": first,
                "last event": last,
                "span (s)": round((row.last_ns - row.first_ns) / 1e9, 3),
                "rows": int(row.rows),
                "processes": int(row.processes),
                "threads": int(row.threads),
                "recordings (samples files)": len(self.recordings()),
            }
        )

    def recordings(self) -> pd.DataFrame:
        """One row per samples file: its host, event specification, kernel and tools."""
        return self.sql("SELECT * FROM recordings")

    def kinds(self) -> pd.DataFrame:
        """Per event kind: rows, events (`count` summed: aggregated rows stand for many) and the total `value` with its unit."""
        df = self.sql(
            """SELECT kind, count(*) AS rows, sum(coalesce(count, 1))::BIGINT AS events,
                sum(value)::BIGINT AS total
            FROM samples GROUP BY kind ORDER BY rows DESC, kind"""
        )
        df["unit"] = df["kind"].map(VALUE_UNITS).fillna("")
        return df

    def processes(self) -> pd.DataFrame:
        """One row per process: host, pid, name, threads, first and last event, CPU seconds (profile), rows."""
        df = self.sql(
            """SELECT host, pid, arg_max(comm, time) AS comm, count(DISTINCT tid) AS threads,
                min(epoch_ns(time)) AS first_ns, max(epoch_ns(time)) AS last_ns,
                coalesce(sum(value) FILTER (WHERE kind = 'profile'), 0) / 1e9 AS cpu_s,
                count(*) AS rows
            FROM samples WHERE pid > 0 GROUP BY host, pid ORDER BY cpu_s DESC, rows DESC, host, pid"""
        )
        df["first"], df["last"] = _to_time(df.pop("first_ns")), _to_time(df.pop("last_ns"))
        return df

    def threads(self, pid=None, host=None) -> pd.DataFrame:
        """One row per thread: CPU seconds (profile), off-CPU seconds (switch), sampled wall seconds (state), rows."""
        cond, params = self._filter(pid=pid, host=host)
        return self.sql(
            f"""SELECT host, pid, arg_max(comm, time) AS comm, tid, arg_max(thread, time) AS thread,
                coalesce(sum(value) FILTER (WHERE kind = 'profile'), 0) / 1e9 AS cpu_s,
                coalesce(sum(value) FILTER (WHERE kind = 'switch'), 0) / 1e9 AS offcpu_s,
                coalesce(sum(value) FILTER (WHERE kind = 'state'), 0) / 1e9 AS state_s,
                count(*) AS rows
            FROM samples WHERE tid > 0 AND {cond}
            GROUP BY host, pid, tid ORDER BY pid, tid""",
            **params,
        )

    def events_over_time(self, interval_s: float = 1.0) -> pd.DataFrame:
        """Events (`count` summed) per kind and time bucket of `interval_s` seconds."""
        df = self.sql(
            """SELECT (epoch_ns(time) // $iv) * $iv AS t, kind, sum(coalesce(count, 1))::BIGINT AS events
            FROM samples GROUP BY ALL ORDER BY t, kind""",
            iv=int(interval_s * 1e9),
        )
        df["time"] = _to_time(df.pop("t"))
        return df

    def time_range(self, kind: str | None = None, pid=None) -> tuple[pd.Timestamp, pd.Timestamp]:
        """First and last event time (of `kind`, of process `pid`)."""
        cond, params = self._filter(pid=pid)
        if kind:
            cond += " AND kind = $kind"
            params["kind"] = kind
        lo, hi = self.con.execute(
            f"SELECT min(epoch_ns(time)), max(epoch_ns(time)) FROM samples WHERE {cond}", params
        ).fetchone()
        if lo is None:
            raise StoreError(f"{self.location}: no {kind or ''} rows for this selection.")
        return _to_time(pd.Series([lo]))[0], _to_time(pd.Series([hi]))[0]

    def pick_process(self, kind: str = "state", by: str = "rows") -> int:
        """The pid with the most rows (`by='rows'`), threads (`by='threads'`) or value of `kind`; `$STACKS_PID` wins."""
        if os.environ.get("STACKS_PID"):
            return int(os.environ["STACKS_PID"])
        measure = {"rows": "count(*)", "threads": "count(DISTINCT tid)", "value": "sum(value)"}[by]
        row = self.con.execute(
            f"SELECT pid FROM samples WHERE kind = $kind AND pid > 0 GROUP BY pid "
            f"ORDER BY {measure} DESC, pid LIMIT 1",
            {"kind": kind},
        ).fetchone()
        if row is None:
            raise StoreError(f"{self.location}: no {kind} rows: record with -e {kind} to see this.")
        return int(row[0])

    def busiest(self, kind: str = "state", top: int = 4) -> list[int]:
        """The `top` pids with the most `value` of `kind` (thread-seconds for `state`); StoreError when there is none."""
        pids = self.con.execute(
            "SELECT pid FROM samples WHERE kind = $kind AND pid > 0 GROUP BY pid ORDER BY sum(value) DESC, pid LIMIT $top",
            {"kind": kind, "top": int(top)},
        ).fetchall()
        if not pids:
            raise StoreError(f"{self.location}: no {kind} rows: record with -e {kind} to see this.")
        return [int(p[0]) for p in pids]

    def process_name(self, pid: int) -> str:
        """`comm (pid)` of process `pid`."""
        row = self.con.execute("SELECT arg_max(comm, time) FROM samples WHERE pid = $pid", {"pid": int(pid)}).fetchone()
        return f"{row[0]} ({pid})"

    # -- stacks ----------------------------------------------------------------------------

    def folded(
        self,
        kind: str = "profile",
        pid=None,
        tid=None,
        host=None,
        window: Window | None = None,
        group: tuple[str, ...] = ("comm",),
        where: str | None = None,
        value: str = "value",
        span: str | None = None,
        **params,
    ) -> pd.DataFrame:
        """Folded stacks of `kind`: one row per (group columns, stack), `folded` root first with the group values as root frames.

        Columns: `folded` (`;`-separated frames, root first), `kernel_frames` (how many of the
        last frames are kernel frames), `value` (the sum of `value`, or of the SQL expression
        `value`), `events` (`count` summed). Rows without a stack count under `[no stack]`, the
        recorder's folded short off-CPU intervals under `[folded short off-CPU intervals]`, so
        totals are exact. `span` keeps the rows of one `tracing` span name (`[no span]`: rows in
        none); `where` is more SQL (over `samples`) with `**params`.
        """
        cond, p = self._filter(pid=pid, tid=tid, host=host, window=window)
        p.update(params)
        if span == NO_SPAN:
            cond += " AND span_name IS NULL"
        elif span is not None:
            cond += " AND span_name = $span_name"
            p["span_name"] = span
        p["kind"] = kind
        extra = f" AND ({where})" if where else ""
        cols = "".join(f"coalesce(CAST({g} AS VARCHAR), '?') AS g{i}, " for i, g in enumerate(group))
        gcols = "".join(f"g{i}, " for i in range(len(group)))
        df = self.sql(
            f"""SELECT {gcols}
                coalesce(t.folded, CASE WHEN a.short THEN '{SHORT_OFFCPU}' WHEN a.stack_id IS NULL THEN '{NO_STACK}'
                    ELSE '{UNSYMBOLIZED}' END) AS folded,
                coalesce(t.kernel_frames, 0) AS kernel_frames, a.value, a.events
            FROM (SELECT {cols} stack_id, stack_id IS NULL AND coalesce(count, 1) > 1 AS short,
                    sum({value})::DOUBLE AS value, sum(coalesce(count, 1))::BIGINT AS events
                  FROM samples WHERE kind = $kind AND {cond}{extra}
                  GROUP BY ALL) a
            LEFT JOIN stack_table t USING (stack_id)
            ORDER BY a.value DESC, folded""",
            **p,
        )
        for i in reversed(range(len(group))):
            df["folded"] = df.pop(f"g{i}") + ";" + df["folded"]
        return df[["folded", "kernel_frames", "value", "events"]]

    # -- thread states ---------------------------------------------------------------------

    def thread_states(self, pid=None, window: Window | None = None) -> pd.DataFrame:
        """Sampled wall time per (thread, state, system call): the bundled `thread-states` (its
        `samples`, `thread_ns` and `mean_in_syscall_ns` per process, thread, state and call),
        with `seconds` = `thread_ns` in seconds."""
        df = self.bundled("thread-states", window=window, pid=None if pid is None else int(pid))
        df["seconds"] = df["thread_ns"] / 1e9
        return df

    def state_period(self, pid=None) -> float:
        """Seconds between two `state` sampling passes (the median `value` of `state` rows: 1/HZ)."""
        cond, params = self._filter(pid=pid)
        ns = self.con.execute(f"SELECT median(value) FROM samples WHERE kind = 'state' AND {cond}", params).fetchone()[0]
        return (ns or 5e7) / 1e9

    def state_summary(self, pid=None, host=None) -> pd.DataFrame:
        """Average threads in each state per process over its life: stacks-top's `avg_thr` of the
        process's `state` rows grouped by state, the window its life.

        Average active threads (docs/top.md) are the thread-seconds of the rows (`sum(value)`)
        over the time the window observed: for `state`, the periods of the sampling passes that
        ran in it, here the passes that saw the process. A pass the recorder could not run on
        time is skipped, not made up, so this is its rows in a state per pass. `passes`: the
        passes that saw it; `thread_s` sums `value`.
        """
        cond, params = self._filter(pid=pid, host=host)
        return self.sql(
            f"""WITH r AS (SELECT pid, comm, tid, time, state, value FROM samples WHERE kind = 'state' AND {cond}),
                {_OBSERVED.format(bucket="0", cond=cond)}
            SELECT r.pid, arg_max(r.comm, r.time) AS comm, r.state, count(DISTINCT r.tid) AS threads_seen,
                sum(r.value) / 1e9 AS thread_s, any_value(o.passes) AS passes,
                sum(r.value) / any_value(o.observed) AS avg_threads
            FROM r JOIN o ON r.pid = o.pid AND o.t = 0
            GROUP BY r.pid, r.state ORDER BY r.pid, avg_threads DESC, r.state""",
            **params,
        )

    def active_threads(self, interval_s: float = 0.1, pids=None, host=None) -> pd.DataFrame:
        """Average threads in each state per time bucket and process, as `state_summary` computes
        them over each bucket: its `state` rows' thread-seconds in the bucket over the periods of
        the passes that saw it there."""
        iv = int(interval_s * 1e9)
        cond, params = self._filter(host=host)
        if pids is not None:
            cond += " AND list_contains($pids, pid)"
            params["pids"] = [int(p) for p in pids]
        df = self.sql(
            f"""WITH r AS (SELECT pid, (epoch_ns(time) // $iv) * $iv AS t, time, state, value
                       FROM samples WHERE kind = 'state' AND {cond}),
                {_OBSERVED.format(bucket="(epoch_ns(time) // $iv) * $iv", cond=cond)}
            SELECT r.pid, r.t, r.state, sum(r.value) / any_value(o.observed) AS threads
            FROM r JOIN o USING (pid, t) GROUP BY r.pid, r.t, r.state ORDER BY r.pid, r.t, r.state""",
            iv=iv,
            **params,
        )
        df["time"] = _to_time(df.pop("t"))
        return df

    def state_samples(self, pid, host=None, window: Window | None = None) -> pd.DataFrame:
        """Every `state` row of process `pid`: time, length (ns), thread, state, system call."""
        cond, params = self._filter(pid=pid, host=host, window=window)
        df = self.sql(
            f"""SELECT epoch_ns(time) AS t, value AS ns, tid, thread, state, syscall
            FROM samples WHERE kind = 'state' AND {cond} ORDER BY tid, t""",
            **params,
        )
        df["time"] = _to_time(df.pop("t"))
        return df

    # -- off-CPU ---------------------------------------------------------------------------

    def offcpu_reasons(self, pid=None, host=None, window: Window | None = None) -> pd.DataFrame:
        """Off-CPU time (`switch` rows) per (thread, state, waker, reason frame, user stack).

        `reason` is the innermost kernel frame that is not the scheduler itself (`do_nanosleep`,
        `pipe_read`, `futex_wait_queue`…); `waker` names the thread that woke it (`comm/thread`
        for another process), `[no wakeup seen]` when none was (preemption, a wakeup from an
        untraced context); `user` is the user part of the stack, root first.
        """
        cond, params = self._filter(pid=pid, host=host, window=window, alias="s")
        df = self.sql(
            f"""WITH names AS (
                    SELECT host, tid, arg_max(comm, time) AS comm, arg_max(thread, time) AS thread, arg_max(pid, time) AS pid
                    FROM samples WHERE tid > 0 GROUP BY host, tid),
                a AS (
                    SELECT s.host, s.pid, s.tid, s.thread, s.state, s.waker, s.stack_id,
                        s.stack_id IS NULL AND coalesce(s.count, 1) > 1 AS short,
                        sum(coalesce(s.count, 1))::BIGINT AS intervals, sum(s.value)::DOUBLE AS ns
                    FROM samples s WHERE s.kind = 'switch' AND {cond} GROUP BY ALL)
            SELECT a.pid, a.tid, a.thread, a.state,
                CASE WHEN a.waker IS NULL THEN '[no wakeup seen]'
                     WHEN w.tid IS NULL THEN 'tid ' || a.waker || ' (untraced)'
                     WHEN w.pid = a.pid THEN w.thread
                     ELSE w.comm || '/' || w.thread END AS waker,
                CASE WHEN a.short THEN '{SHORT_OFFCPU}'
                     WHEN a.stack_id IS NULL THEN '{NO_STACK}'
                     WHEN t.stack IS NULL THEN '{UNSYMBOLIZED}'
                     ELSE coalesce(list_filter(t.stack, lambda f: f.kernel
                         AND NOT regexp_matches(coalesce(f.function, ''), '{SCHEDULER_FRAMES}'))[1].function,
                         '[no kernel stack recorded]') END AS reason,
                CASE WHEN t.folded IS NULL THEN ''
                     ELSE array_to_string(string_split(t.folded, ';')[1:len(string_split(t.folded, ';')) - t.kernel_frames], ';')
                     END AS user,
                a.intervals, a.ns
            FROM a LEFT JOIN stack_table t USING (stack_id)
            LEFT JOIN names w ON w.host IS NOT DISTINCT FROM a.host AND w.tid = a.waker
            ORDER BY a.ns DESC, a.pid, a.tid, state, waker, reason, user""",
            **params,
        )
        df["user"] = df["user"].replace("", "[no user stack]")
        return df

    # -- latency ---------------------------------------------------------------------------

    # name: (kind, per-event latency, events, time, condition). Every kind of the registry whose
    # `duration` is a latency (kinds.json: top.latency) and whose rows are events (or events
    # sampled 1 in N), by its name (a row standing for `count` events by their mean; a kept
    # row of events sampled 1 in N at their start, `kept_one_in`, has its own `duration` and
    # stands for `count` such, their time its `value`); `syscall`: `state` samples by the time
    # in their system call so far.
    LATENCY_SOURCES = {
        **{
            name: (name, "duration / coalesce(count, 1)", "coalesce(count, 1)", "duration", "duration IS NOT NULL")
            for name, k in KINDS.items()
            if k["top"] and k["top"]["latency"] and k["sampling"] in ("event", "one_in") and "duration" in k["columns"]
        },
        **{
            name: (name, "duration", "coalesce(count, 1)", "value", "duration IS NOT NULL")
            for name, k in KINDS.items()
            if k["top"] and k["top"]["latency"] and k["sampling"] == "kept_one_in" and "duration" in k["columns"]
        },
        "syscall": ("state", "duration", "1", "value", "syscall IS NOT NULL AND duration IS NOT NULL"),
    }

    def latency_heatmap(self, source: str, interval_s: float = 0.25, pid=None, host=None) -> pd.DataFrame:
        """Events and time per (time bucket, log2 latency bucket) for `source`.

        A kind whose `duration` is a latency (`vfs`: file and socket reads and writes, `block`:
        block requests issue to completion, `uring`: io_uring requests submission to
        completion, `switch`, `wake`, `span`): `duration` per event (aggregated rows by their
        mean, which lies in the bucket of every event they sum); `syscall`: `state` samples of
        threads in a system call, by the time spent in the call so far (`time` is then the sampled thread time). `bucket` k holds
        latencies in [2^k, 2^(k+1)) ns; `events` counts, `time_ns` sums `duration` (or the
        sampled time for `syscall`).
        """
        kind, lat, events, time, extra = self.LATENCY_SOURCES[source]
        cond, params = self._filter(pid=pid, host=host)
        df = self.sql(
            f"""SELECT (epoch_ns(time) // $iv) * $iv AS t,
                floor(log2(greatest({lat}, 1)))::INT AS bucket,
                sum({events})::BIGINT AS events, sum({time})::DOUBLE AS time_ns
            FROM samples WHERE kind = '{kind}' AND {extra} AND {cond}
            GROUP BY ALL ORDER BY t, bucket""",
            iv=int(interval_s * 1e9),
            **params,
        )
        df["time"] = _to_time(df.pop("t"))
        return df

    # -- spans -----------------------------------------------------------------------------

    def span_costs(self, pid=None, tid=None) -> pd.DataFrame:
        """Per `tracing` span name: CPU and off-CPU seconds, file read/write, block and network bytes, stays and time in the span.

        The bundled `spans` per span name (its rows of one process summed over their `comm`),
        with the seconds of its `cpu_ns` and `offcpu_ns`; rows in no span count under
        `[no span]`. `span_ids` is its `spans` (distinct span ids seen); `stays` counts the span's
        `span` rows (one per enter and exit: none for a stay that began before the recorder
        attached), `span_s` their summed `duration`, which no bundled query asks.
        """
        params = {"pid": None if pid is None else int(pid), "tid": None if tid is None else int(tid)}
        costs = self.bundled("spans", **params)
        costs["span"] = costs.pop("span_name").fillna(NO_SPAN)
        sums = ["cpu_ns", "offcpu_ns", "read_bytes", "write_bytes", "block_bytes", "net_bytes", "spans"]
        costs = costs.groupby("span", as_index=False, dropna=False)[sums].sum()
        cond, p = self._filter(pid=pid, tid=tid)
        stays = self.sql(
            f"""SELECT coalesce(span_name, '{NO_SPAN}') AS span, count(*) AS stays,
                coalesce(sum(duration), 0) / 1e9 AS span_s
            FROM samples WHERE kind = 'span' AND {cond} GROUP BY ALL""",
            **p,
        )
        out = costs.merge(stays, on="span", how="outer")
        out["cpu_s"] = out.pop("cpu_ns").fillna(0) / 1e9
        out["offcpu_s"] = out.pop("offcpu_ns").fillna(0) / 1e9
        out["span_ids"] = out.pop("spans").fillna(0).astype("int64")
        for c in ("read_bytes", "write_bytes", "block_bytes", "net_bytes", "stays"):
            out[c] = out[c].fillna(0).astype("int64")
        out["span_s"] = out["span_s"].fillna(0.0)
        out = out.assign(_o=out.cpu_s + out.offcpu_s).sort_values(["_o", "span"], ascending=[False, True], kind="stable")
        columns = ["span", "cpu_s", "offcpu_s", "read_bytes", "write_bytes", "block_bytes", "net_bytes", "span_ids", "stays", "span_s"]
        return out[columns].reset_index(drop=True)

    def span_processes(self) -> pd.DataFrame:
        """Processes with `span` rows or span-labelled rows, most spans first."""
        return self.sql(
            """SELECT pid, arg_max(comm, time) AS comm, count(DISTINCT span_name) AS span_names,
                count(*) FILTER (WHERE kind = 'span') AS stays
            FROM samples WHERE span_name IS NOT NULL GROUP BY pid ORDER BY stays DESC, count(*) DESC, pid"""
        )

    def pick_span_process(self) -> int:
        """The pid with the most span-labelled rows (`$STACKS_PID` wins)."""
        if os.environ.get("STACKS_PID"):
            return int(os.environ["STACKS_PID"])
        procs = self.span_processes()
        if procs.empty:
            raise StoreError(
                f"{self.location}: no rows labelled with a tracing span: record a program using tracing-stacks (see docs/spans.md)."
            )
        return int(procs["pid"].iloc[0])

    # -- memory and network ----------------------------------------------------------------

    def rss_over_time(self, pid=None, host=None) -> pd.DataFrame:
        """The resident bytes of each process after each sampled growth (`rss` rows' `rss` column)."""
        cond, params = self._filter(pid=pid, host=host)
        df = self.sql(
            f"""SELECT pid, arg_max(comm, time) OVER (PARTITION BY pid) AS comm, epoch_ns(time) AS t, rss,
                sum(value) OVER (PARTITION BY pid ORDER BY time ROWS UNBOUNDED PRECEDING) AS growth
            FROM samples WHERE kind = 'rss' AND {cond} ORDER BY pid, t""",
            **params,
        )
        df["time"] = _to_time(df.pop("t"))
        return df

    def live_heap_over_time(self, pid=None, host=None, top: int = 6) -> pd.DataFrame:
        """Live sampled heap bytes per (process, allocating stack) over time (`alloc` rows; see heap.py)."""
        from .heap import live_heap_over_time

        return live_heap_over_time(self, pid=pid, host=host, top=top)

    def connections(self, pid=None, host=None) -> pd.DataFrame:
        """Bytes and calls per (process, thread, protocol, local, remote) and direction (`net` rows)."""
        cond, params = self._filter(pid=pid, host=host)
        return self.sql(
            f"""SELECT pid, arg_max(comm, time) AS comm, protocol, local, coalesce(remote, '-') AS remote,
                coalesce(sum(value) FILTER (WHERE op = 'send'), 0)::BIGINT AS sent_bytes,
                coalesce(sum(value) FILTER (WHERE op = 'recv'), 0)::BIGINT AS received_bytes,
                sum(coalesce(count, 1))::BIGINT AS calls,
                string_agg(DISTINCT thread, ', ' ORDER BY thread) AS threads
            FROM samples WHERE kind = 'net' AND {cond}
            GROUP BY pid, protocol, local, remote ORDER BY sent_bytes + received_bytes DESC, pid, protocol, local, remote""",
            **params,
        )

    def connection_bytes_over_time(self, interval_s: float | None = None, pid=None, host=None) -> pd.DataFrame:
        """Bytes per (connection, direction) and time bucket (`net` rows); buckets of `interval_s`, by default 1/400 of the rows' time span."""
        cond, params = self._filter(pid=pid, host=host)
        if interval_s is None:
            lo, hi = self.con.execute(
                f"SELECT min(epoch_ns(time)), max(epoch_ns(time)) FROM samples WHERE kind = 'net' AND {cond}", params
            ).fetchone()
            interval_s = max(((hi or 0) - (lo or 0)) / 400 / 1e9, 1e-6)
        df = self.sql(
            f"""SELECT pid, protocol || ' ' || local || ' → ' || coalesce(remote, '-') AS connection, op,
                (epoch_ns(time) // $iv) * $iv AS t, sum(value)::BIGINT AS bytes
            FROM samples WHERE kind = 'net' AND {cond} GROUP BY ALL ORDER BY t, connection, op""",
            iv=int(interval_s * 1e9),
            **params,
        )
        df["time"] = _to_time(df.pop("t"))
        return df


def open_store(location: str | None = None, default: str = "out") -> Store:
    """Open the store at `location` (a directory or an s3:// URL; default `$STACKS_STORE`, else `default` in the repository: the demo's `out/`).

    Raises StoreError with one sentence when it is missing or empty.
    """
    return Store(location or default_location(default))
