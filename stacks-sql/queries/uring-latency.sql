-- io_uring latency by operation, file and how requests ran: how long from submission to completion, in percentiles.
--
-- One row per (process, operation, file, how it ran) over `uring` rows (`-e uring`): `mode`
-- `inline` (issued in the submitting call), `async` (an io-wq worker), `poll` (armed for
-- readiness) or `sqpoll`. `requests` counts them, `errors` the failed ones, `bytes` sums what
-- they moved; `mean_ns` and the percentiles `p50_ns`, `p90_ns`, `p99_ns` (approximate: a
-- t-digest), `max_ns` are of their times from submission to completion. A row of requests
-- folded under MIN (`count` > 1, `duration` their sum) counts as `count` requests of its mean
-- time (all in one power-of-two latency bucket, so within a factor of 2 of each one's).
-- kinds: uring
-- default-value: requests
-- param: comm text = '%'        process names to keep (SQL LIKE pattern)
-- param: pid int = null         only this process id (null: every process)
-- param: from timestamp = null  start of the time window, inclusive (null: from the start)
-- param: to timestamp = null    end of the time window, exclusive (null: to the end)
SELECT
    comm, pid, op, path, mode, requests, errors, bytes,
    latency_ns / requests AS mean_ns,
    CAST(p[1] AS BIGINT) AS p50_ns,
    CAST(p[2] AS BIGINT) AS p90_ns,
    CAST(p[3] AS BIGINT) AS p99_ns,
    max_ns
FROM (
    SELECT comm, pid, op, path, mode,
        sum(coalesce(count, 1)) AS requests,
        sum(CASE WHEN errno IS NULL THEN 0 ELSE coalesce(count, 1) END) AS errors,
        sum(value) AS bytes, sum(duration) AS latency_ns, max(duration / coalesce(count, 1)) AS max_ns,
        approx_percentiles(CAST(duration / coalesce(count, 1) AS DOUBLE), coalesce(count, 1), 0.5, 0.9, 0.99) AS p
    FROM samples
    WHERE kind = 'uring' AND duration IS NOT NULL
        AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
        AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
    GROUP BY comm, pid, op, path, mode
) a
ORDER BY latency_ns DESC, requests DESC, pid, op;
