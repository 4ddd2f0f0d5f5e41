-- io_uring requests by stack, operation and file: which code paths submitted how many, how many bytes, how long they took.
--
-- One row per (process, operation, file, how it ran, stack) over `uring` rows (`-e uring`).
-- `requests` counts them, `errors` the failed ones, `bytes` sums what reads, writes, sends
-- and receives moved; `latency_ns` sums their times from submission to completion, `p50_ns`,
-- `p99_ns` are percentiles of those times (approximate: a t-digest; a row of requests folded
-- under MIN counts as `count` requests of its mean time).
-- stacks-pprof: `bytes/bytes`, `requests/count`, `errors/count`, `latency/nanoseconds`.
-- kinds: uring
-- default-value: bytes
-- param: comm text = '%'        process names to keep (SQL LIKE pattern)
-- param: pid int = null         only this process id (null: every process)
-- param: from timestamp = null  start of the time window, inclusive (null: from the start)
-- param: to timestamp = null    end of the time window, exclusive (null: to the end)
SELECT
    a.comm,
    a.pid,
    a.op,
    a.path,
    a.mode,
    stack_or(t.stack, '[no stack]') AS stack,
    a.requests, a.errors, a.bytes, a.latency_ns,
    CAST(a.p[1] AS BIGINT) AS p50_ns,
    CAST(a.p[2] AS BIGINT) AS p99_ns
FROM (
    SELECT comm, pid, op, path, mode, stack_id,
        sum(coalesce(count, 1)) AS requests,
        sum(CASE WHEN errno IS NULL THEN 0 ELSE coalesce(count, 1) END) AS errors,
        sum(value) AS bytes, sum(duration) AS latency_ns,
        approx_percentiles(CAST(duration / coalesce(count, 1) AS DOUBLE), coalesce(count, 1), 0.5, 0.99) AS p
    FROM samples
    WHERE kind = 'uring'
        AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
        AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
    GROUP BY comm, pid, op, path, mode, stack_id
) a
LEFT JOIN stack_table t ON t.stack_id = a.stack_id
ORDER BY a.bytes DESC, a.requests DESC, a.pid, a.op;
