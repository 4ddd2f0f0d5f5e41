-- Thread-seconds by stack: where were threads, in which state and system call (a wall-clock profile)?
--
-- One row per (process, thread, state, syscall, stack) over `state` rows (sampled thread
-- states). `wall_ns` = samples × the sampling period. Threads on a CPU have no stack when
-- sampled: they appear, like other rows recorded without stacks, under the one-frame stack
-- `[no stack]` (as in `stacks-pprof --kind state`), told apart by their `state` label.
-- stacks-pprof turns this into `samples/count` and `wall/nanoseconds` with `state` and
-- `syscall` labels: `go tool pprof -tagfocus state=sleeping` is the profile of sleeping
-- threads.
-- kinds: state
-- default-value: wall_ns
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
    a.syscall,
    stack_or(t.stack, '[no stack]') AS stack,
    a.samples, a.wall_ns
FROM (
    SELECT comm, pid, tid, thread, state, syscall, stack_id,
        sum(coalesce(count, 1)) AS samples, sum(value) AS wall_ns
    FROM samples
    WHERE kind = 'state'
        AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
        AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
    GROUP BY comm, pid, tid, thread, state, syscall, stack_id
) a
LEFT JOIN stack_table t ON t.stack_id = a.stack_id
ORDER BY a.wall_ns DESC, a.samples DESC, a.pid, a.tid;
