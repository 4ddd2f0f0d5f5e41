-- CPU profile by stack: samples and on-CPU time per process, thread and stack.
--
-- One row per distinct (process, thread, `tracing` span name, stack). `samples` counts CPU
-- samples; `cpu_ns` sums their sampling periods, i.e. the on-CPU time they stand for.
-- stacks-pprof turns this into a pprof profile with sample types `samples/count` and
-- `cpu/nanoseconds`, labelled `span_name` where the program uses tracing-stacks
-- (`go tool pprof -tagfocus span_name=NAME`).
--
-- Done in two parts joined by `stack_id` (the 128-bit stack fingerprint stacks-pack stores):
-- the counts per (thread, stack_id), sorted, read from `samples`, which has no stacks; each
-- distinct stack is read once from `stack_table` and joined to its rows afterwards, so memory
-- stays bounded by the distinct stacks however many (thread, stack) rows the result has.
-- kinds: profile
-- default-value: cpu_ns
-- param: comm text = '%'        process names to keep (SQL LIKE pattern)
-- param: pid int = null         only this process id (null: every process)
-- param: from timestamp = null  start of the time window, inclusive (null: from the start)
-- param: to timestamp = null    end of the time window, exclusive (null: to the end)
WITH counts AS (
    SELECT comm, pid, tid, thread, span_name, stack_id, count(*) AS samples, sum(value) AS cpu_ns
    FROM samples
    WHERE kind = 'profile' AND stack_id IS NOT NULL
        AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
        AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
    GROUP BY comm, pid, tid, thread, span_name, stack_id
    ORDER BY samples DESC, cpu_ns DESC, pid, tid
)
SELECT s.comm, s.pid, s.tid, s.thread, s.span_name, t.stack, s.samples, s.cpu_ns
FROM stack_table t JOIN counts s ON s.stack_id = t.stack_id
ORDER BY s.samples DESC, s.cpu_ns DESC, s.pid, s.tid;
