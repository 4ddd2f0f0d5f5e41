-- Off-CPU time by stack: where threads waited off CPU, how long, and in which state.
--
-- One row per (process, thread, state, `tracing` span name, stack) over `switch` rows. `intervals` counts off-CPU
-- intervals and `offcpu_ns` sums their length. Short intervals that the recorder folded (rows
-- with `count` > 1 and no stack) are included, under the one-frame stack
-- `[folded short off-CPU intervals]`; intervals recorded without stacks appear as `[no stack]`.
-- stacks-pprof turns this into `intervals/count` and `offcpu/nanoseconds`.
-- kinds: switch
-- default-value: offcpu_ns
-- param: comm text = '%'        process names to keep (SQL LIKE pattern)
-- param: pid int = null         only this process id (null: every process)
-- param: from timestamp = null  start of the time window, inclusive (null: from the start)
-- param: to timestamp = null    end of the time window, exclusive (null: to the end)
SELECT
    a.comm,
    a.pid,
    a.tid,
    a.thread,
    a.state,
    a.span_name,
    stack_or(t.stack, CASE WHEN a.short THEN '[folded short off-CPU intervals]' ELSE '[no stack]' END) AS stack,
    a.intervals, a.offcpu_ns
FROM (
    SELECT comm, pid, tid, thread, state, span_name, stack_id,
        stack_id IS NULL AND coalesce(count, 1) > 1 AS short,
        sum(coalesce(count, 1)) AS intervals, sum(value) AS offcpu_ns
    FROM samples
    WHERE kind = 'switch'
        AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
        AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
    GROUP BY comm, pid, tid, thread, state, span_name, stack_id,
        stack_id IS NULL AND coalesce(count, 1) > 1
) a
LEFT JOIN stack_table t ON t.stack_id = a.stack_id
ORDER BY a.offcpu_ns DESC, a.intervals DESC, a.pid, a.tid;
