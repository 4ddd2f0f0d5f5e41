-- How the live heap changed over the window, by stack: live bytes at its start and at its end.
--
-- One row per (process, stack) over the sampled allocations (`-e alloc`) from the start of the
-- recording to the end of the window: a block is live at a time when it was allocated before it
-- and its address was not freed in between (the first `free` row of the same process and
-- address after the allocation). `start_bytes` and `end_bytes` estimate the bytes live at the
-- window's start and end (their weights; 0 at the start when the window starts with the
-- recording), `growth_bytes` the difference (negative where the stack's blocks were freed),
-- `start_objects` and `end_objects` the blocks. Rows are ordered by growth: the first ones
-- are what grew. stacks-pprof: `growth_bytes/bytes` and the others.
-- kinds: alloc
-- default-value: growth_bytes
-- param: comm text = '%'        process names to keep (SQL LIKE pattern)
-- param: pid int = null         only this process id (null: every process)
-- param: from timestamp = null  start of the window (null: the start of the recording)
-- param: to timestamp = null    end of the window, exclusive (null: to the end)
WITH rows_in AS (
    SELECT time, comm, pid, op, value, stack_id,
        array_element(args, 1) AS address, array_element(args, 2) AS size
    FROM samples
    WHERE kind = 'alloc'
        AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
        AND ($to IS NULL OR time < $to)
),
allocs AS (SELECT * FROM rows_in WHERE op = 'alloc'),
frees AS (SELECT pid, address, time FROM rows_in WHERE op = 'free'),
-- Each sampled block with when its address was first freed after it (null: still live).
blocks AS (
    SELECT a.comm, a.pid, a.stack_id, a.time, a.value, a.size, min(f.time) AS freed
    FROM allocs a
    LEFT JOIN frees f ON f.pid = a.pid AND f.address = a.address AND f.time >= a.time
    GROUP BY a.comm, a.pid, a.stack_id, a.time, a.address, a.value, a.size
),
per_stack AS (
    SELECT comm, pid, stack_id,
        sum(CASE WHEN $from IS NOT NULL AND time < $from AND (freed IS NULL OR freed >= $from)
            THEN value ELSE 0 END) AS start_bytes,
        sum(CASE WHEN freed IS NULL THEN value ELSE 0 END) AS end_bytes,
        sum(CASE WHEN $from IS NOT NULL AND time < $from AND (freed IS NULL OR freed >= $from)
            THEN CAST(value AS DOUBLE) / CAST(greatest(size, 1) AS DOUBLE) ELSE 0 END)
            AS start_objects,
        sum(CASE WHEN freed IS NULL
            THEN CAST(value AS DOUBLE) / CAST(greatest(size, 1) AS DOUBLE) ELSE 0 END)
            AS end_objects
    FROM blocks
    GROUP BY comm, pid, stack_id
)
SELECT
    p.comm,
    p.pid,
    stack_or(t.stack, '[no stack]') AS stack,
    p.start_bytes, p.end_bytes, p.end_bytes - p.start_bytes AS growth_bytes,
    CAST(round(p.start_objects) AS BIGINT) AS start_objects,
    CAST(round(p.end_objects) AS BIGINT) AS end_objects
FROM per_stack p
LEFT JOIN stack_table t ON t.stack_id = p.stack_id
WHERE p.start_bytes <> 0 OR p.end_bytes <> 0
ORDER BY growth_bytes DESC, p.pid;
