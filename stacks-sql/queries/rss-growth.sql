-- RSS growth by stack: which code paths made resident memory grow, and by how many bytes.
--
-- One row per (process, thread, counter, stack) over `rss` rows with positive growth.
-- `rss_growth_bytes` sums the growth the recorder attributed to each sampled row; `events`
-- counts the page-level growth events the rows stand for. `op` is the counter that grew (anon,
-- file, shmem, swap). stacks-pprof: `events/count`, `rss_growth_bytes/bytes`.
-- kinds: rss
-- default-value: rss_growth_bytes
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
    stack_or(t.stack, '[no stack]') AS stack,
    a.events, a.rss_growth_bytes
FROM (
    SELECT comm, pid, tid, thread, op, stack_id,
        sum(coalesce(count, 1)) AS events, sum(value) AS rss_growth_bytes
    FROM samples
    WHERE kind = 'rss' AND value > 0
        AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
        AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
    GROUP BY comm, pid, tid, thread, op, stack_id
) a
LEFT JOIN stack_table t ON t.stack_id = a.stack_id
ORDER BY a.rss_growth_bytes DESC, a.events DESC, a.pid, a.tid;
