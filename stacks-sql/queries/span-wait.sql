-- Where `tracing` spans wait: off-CPU time by span name, state and stack.
--
-- One row per (process, span name, state, stack) over `switch` rows in a span (programs using
-- the tracing-stacks layer). `intervals` counts off-CPU intervals, `offcpu_ns` sums them;
-- intervals the recorder folded as short (no stack) are under
-- `[folded short off-CPU intervals]`. Time an async task is parked is not here: its worker
-- thread leaves the span when the poll returns, so the wait shows as the worker's, in no span.
-- stacks-pprof turns this into `intervals/count` and `offcpu/nanoseconds`, labelled
-- `span_name` and `state`.
-- kinds: switch
-- default-value: offcpu_ns
-- param: comm text = '%'        process names to keep (SQL LIKE pattern)
-- param: pid int = null         only this process id (null: every process)
-- param: span text = '%'        span names to keep (SQL LIKE pattern)
-- param: from timestamp = null  start of the time window, inclusive (null: from the start)
-- param: to timestamp = null    end of the time window, exclusive (null: to the end)
SELECT
    a.comm,
    a.pid,
    a.span_name,
    a.state,
    stack_or(t.stack, CASE WHEN a.short THEN '[folded short off-CPU intervals]' ELSE '[no stack]' END) AS stack,
    a.intervals, a.offcpu_ns
FROM (
    SELECT comm, pid, span_name, state, stack_id,
        stack_id IS NULL AND coalesce(count, 1) > 1 AS short,
        sum(coalesce(count, 1)) AS intervals, sum(value) AS offcpu_ns
    FROM samples
    WHERE kind = 'switch' AND span_name IS NOT NULL AND span_name LIKE $span
        AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
        AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
    GROUP BY comm, pid, span_name, state, stack_id,
        stack_id IS NULL AND coalesce(count, 1) > 1
) a
LEFT JOIN stack_table t ON t.stack_id = a.stack_id
ORDER BY a.offcpu_ns DESC, a.intervals DESC, a.pid, a.span_name;
