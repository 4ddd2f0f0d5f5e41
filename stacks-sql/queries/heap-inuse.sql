-- Live heap by stack: which code paths hold the memory still allocated at the end of the
-- window (the leak view).
--
-- One row per (process, stack) over the sampled allocations of the window (`-e alloc`) whose
-- pointer was not freed in the window after them (a `free` row of the same process and
-- address): `inuse_bytes` estimates the bytes they hold (their weights), `inuse_objects` the
-- blocks. Blocks allocated before the window are not seen; blocks a process still held at its
-- exit count as live (what it never freed). stacks-pprof: `inuse_objects/count`,
-- `inuse_bytes/bytes`, `samples/count`.
-- kinds: alloc
-- default-value: inuse_bytes
-- param: comm text = '%'        process names to keep (SQL LIKE pattern)
-- param: pid int = null         only this process id (null: every process)
-- param: from timestamp = null  start of the time window, inclusive (null: from the start)
-- param: to timestamp = null    end of the time window, exclusive (null: to the end)
WITH rows_in AS (
    SELECT time, comm, pid, op, value, stack_id,
        array_element(args, 1) AS address, array_element(args, 2) AS size
    FROM samples
    WHERE kind = 'alloc'
        AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
        AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
),
allocs AS (SELECT * FROM rows_in WHERE op = 'alloc'),
frees AS (SELECT pid, address, time FROM rows_in WHERE op = 'free'),
live AS (
    SELECT a.* FROM allocs a
    LEFT ANTI JOIN frees f ON f.pid = a.pid AND f.address = a.address AND f.time >= a.time
)
SELECT
    l.comm,
    l.pid,
    stack_or(t.stack, '[no stack]') AS stack,
    l.inuse_objects, l.inuse_bytes, l.samples
FROM (
    SELECT comm, pid, stack_id,
        CAST(round(sum(CAST(value AS DOUBLE)
            / CAST(greatest(size, 1) AS DOUBLE))) AS BIGINT) AS inuse_objects,
        sum(value) AS inuse_bytes,
        count(*) AS samples
    FROM live
    GROUP BY comm, pid, stack_id
) l
LEFT JOIN stack_table t ON t.stack_id = l.stack_id
ORDER BY l.inuse_bytes DESC, l.pid;
