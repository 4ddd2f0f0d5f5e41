-- Block IO bytes by stack: which code paths submitted disk requests, and how many bytes.
--
-- One row per (process, thread, operation, device, stack) over `block` rows; the stack is the
-- submitter's at submission. `requests` counts requests, `bytes` sums their sizes.
-- stacks-pprof: `requests/count`, `bytes/bytes`.
-- kinds: block
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
    a.op,
    a.dev,
    stack_or(t.stack, '[no stack]') AS stack,
    a.requests, a.bytes
FROM (
    SELECT comm, pid, tid, thread, op, dev, stack_id,
        sum(coalesce(count, 1)) AS requests, sum(value) AS bytes
    FROM samples
    WHERE kind = 'block'
        AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
        AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
    GROUP BY comm, pid, tid, thread, op, dev, stack_id
) a
LEFT JOIN stack_table t ON t.stack_id = a.stack_id
ORDER BY a.bytes DESC, a.requests DESC, a.pid, a.tid;
