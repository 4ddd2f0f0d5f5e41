-- waits: every `switch` and `state` row with the `wake` row that ended the off-CPU interval it is in.
--
-- The one home of the rule linking a wakeup to the wait it ended (docs/format.md, `wake`): the
-- wake row's `wakee` is the row's thread and its `time` less its wait (`duration` / `count`: a
-- row of wakeups sampled 1 in N holds N times the one taken) is the interval's switch-out,
-- which is a `switch` row's own `time` (a folded row, null `duration`, is no one interval) and
-- a `state` row's `offcpu_since`. Every column of `samples`, then the wake row's `wake_tid`,
-- `wake_pid`, `wake_comm`, `wake_thread` (the waker: 0 and `[irq]`, `[softirq]` or `[timer]`
-- for no task), `wake_stack_id` (its stack), `wake_time` (the wakeup), `wake_duration` and
-- `wake_value` (this interval's time off CPU until the wakeup), `wake_count` (the wakeups the
-- wake row stands for: N when they were sampled 1 in N, so sums over linked intervals scale
-- by it); all null where no wake row explains the interval. The bundled queries, stacks-top and explore read it; stacks-sql
-- registers it in DataFusion and explore in DuckDB, from this text. A query reading it picks
-- its rows by `kind` itself and reads `wake` rows through it (its `-- kinds:` line says so).
-- kinds read through it: wake
SELECT s.*,
    w.tid AS wake_tid, w.pid AS wake_pid, w.comm AS wake_comm, w.thread AS wake_thread,
    w.stack_id AS wake_stack_id, w.time AS wake_time,
    CAST(w.duration / coalesce(w.count, 1) AS BIGINT) AS wake_duration,
    CAST(w.value / coalesce(w.count, 1) AS BIGINT) AS wake_value,
    coalesce(w.count, 1) AS wake_count
FROM samples s
LEFT JOIN samples w ON w.kind = 'wake' AND w.wakee = s.tid
    AND epoch_ns(w.time) - CAST(w.duration / coalesce(w.count, 1) AS BIGINT) = epoch_ns(CASE
        WHEN s.kind = 'switch' AND s.duration IS NOT NULL THEN s.time
        WHEN s.kind = 'state' THEN s.offcpu_since END)
WHERE s.kind IN ('switch', 'state')
