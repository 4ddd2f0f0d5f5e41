-- File writes by stack: bytes written through write system calls, the calls, and time spent in them.
--
-- One row per (process, thread, stack) over `vfs` rows with op = 'write' (write, pwrite64, writev, pwritev, pwritev2).
-- `bytes` sums what the calls returned; `calls` counts them, `errors` the failed ones;
-- `syscall_ns` sums time in the calls.
-- stacks-pprof: `bytes/bytes`, `calls/count`, `errors/count`, `syscall/nanoseconds`.
-- kinds: vfs
-- default-value: bytes
-- param: comm text = '%'        process names to keep (SQL LIKE pattern)
-- param: pid int = null         only this process id (null: every process)
-- param: from timestamp = null  start of the time window, inclusive (null: from the start)
-- param: to timestamp = null    end of the time window, exclusive (null: to the end)
SELECT
    a.comm,
    a.pid,
    a.tid,
    a.thread,
    stack_or(t.stack, '[no stack]') AS stack,
    a.bytes, a.calls, a.errors, a.syscall_ns
FROM (
    SELECT comm, pid, tid, thread, stack_id,
        sum(value) AS bytes, sum(coalesce(count, 1)) AS calls,
        sum(CASE WHEN errno IS NULL THEN 0 ELSE coalesce(count, 1) END) AS errors, sum(duration) AS syscall_ns
    FROM samples
    WHERE kind = 'vfs' AND op = 'write'
        AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
        AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
    GROUP BY comm, pid, tid, thread, stack_id
) a
LEFT JOIN stack_table t ON t.stack_id = a.stack_id
ORDER BY a.bytes DESC, a.calls DESC, a.pid, a.tid;
