-- Block IO latency by stack: how long the disk requests each code path submitted took.
--
-- One row per (process, thread, operation, device, stack) over `block` rows with a duration.
-- `latency_ns` sums issue-to-completion times (divide by `requests` for the mean); `bytes`
-- sums their sizes. stacks-pprof: `latency/nanoseconds`, `requests/count`, `bytes/bytes`.
-- kinds: block
-- default-value: latency_ns
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
    a.latency_ns, a.requests, a.bytes
FROM (
    SELECT comm, pid, tid, thread, op, dev, stack_id,
        sum(duration) AS latency_ns, sum(coalesce(count, 1)) AS requests, sum(value) AS bytes
    FROM samples
    WHERE kind = 'block' AND duration IS NOT NULL
        AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
        AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
    GROUP BY comm, pid, tid, thread, op, dev, stack_id
) a
LEFT JOIN stack_table t ON t.stack_id = a.stack_id
ORDER BY a.latency_ns DESC, a.requests DESC, a.pid, a.tid;
