-- CPU profile by stack: samples and on-CPU time per process, thread and stack.
--
-- One row per distinct (process, thread, stack). `samples` counts CPU samples; `cpu_ns` sums
-- their sampling periods, i.e. the on-CPU time they stand for. stacks-pprof turns this into a
-- pprof profile with sample types `samples/count` and `cpu/nanoseconds`. Stacks are grouped by
-- `stack_key(stack)`, a 128-bit fingerprint of the whole stack: much cheaper than grouping by
-- the nested list itself.
-- param: comm text = '%'        process names to keep (SQL LIKE pattern)
-- param: pid int = null         only this process id (null: every process)
-- param: from timestamp = null  start of the time window, inclusive (null: from the start)
-- param: to timestamp = null    end of the time window, exclusive (null: to the end)
SELECT
    comm,
    pid,
    tid,
    thread,
    first_value(stack) AS stack,
    count(*) AS samples,
    sum(value) AS cpu_ns
FROM stacks
WHERE kind = 'profile' AND stack IS NOT NULL
    AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
    AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
GROUP BY comm, pid, tid, thread, stack_key(stack)
ORDER BY samples DESC, cpu_ns DESC, pid, tid;
