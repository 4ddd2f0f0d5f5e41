-- RSS growth by stack: which code paths made resident memory grow, and by how many bytes.
--
-- One row per (process, thread, counter, stack) over `rss` rows with positive growth.
-- `rss_growth_bytes` sums the growth the recorder attributed to each sampled row; `events`
-- counts the page-level growth events the rows stand for. `op` is the counter that grew (anon,
-- file, shmem, swap). stacks-pprof: `events/count`, `rss_growth_bytes/bytes`.
-- default-value: rss_growth_bytes
-- param: comm text = '%'        process names to keep (SQL LIKE pattern)
-- param: pid int = null         only this process id (null: every process)
-- param: from timestamp = null  start of the time window, inclusive (null: from the start)
-- param: to timestamp = null    end of the time window, exclusive (null: to the end)
SELECT
    comm,
    pid,
    tid,
    thread,
    op,
    stack_any(stack) AS stack,
    sum(n) AS events,
    sum(value) AS rss_growth_bytes
FROM (
    SELECT comm, pid, tid, thread, op, value,
        coalesce(count, 1) AS n,
        stack_or(stack, '[no stack]') AS stack
    FROM stacks
    WHERE kind = 'rss' AND value > 0
        AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
        AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
)
GROUP BY comm, pid, tid, thread, op, stack_key(stack)
ORDER BY rss_growth_bytes DESC, events DESC, pid, tid;
