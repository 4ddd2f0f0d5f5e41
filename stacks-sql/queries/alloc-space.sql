-- Heap allocations by stack: how many bytes and objects each code path allocated.
--
-- One row per (process, stack) over `alloc` rows of sampled allocations (`-e alloc`: programs
-- running libstacks_alloc.so). Each sample stands for `value` bytes (its weight: its size over
-- its probability of being sampled), so `alloc_bytes` is an unbiased estimate of the bytes
-- allocated there and `alloc_objects` of the allocations (weight / size per sample, rounded);
-- `samples` is how many were sampled (the estimate's relative error is about 1/sqrt(samples)
-- for small blocks; blocks much larger than the interval are all sampled: docs/heap.md).
-- stacks-pprof: `alloc_objects/count`, `alloc_bytes/bytes`, `samples/count`.
-- kinds: alloc
-- default-value: alloc_bytes
-- param: comm text = '%'        process names to keep (SQL LIKE pattern)
-- param: pid int = null         only this process id (null: every process)
-- param: from timestamp = null  start of the time window, inclusive (null: from the start)
-- param: to timestamp = null    end of the time window, exclusive (null: to the end)
SELECT
    a.comm,
    a.pid,
    stack_or(t.stack, '[no stack]') AS stack,
    a.alloc_objects, a.alloc_bytes, a.samples
FROM (
    SELECT comm, pid, stack_id,
        CAST(round(sum(CAST(value AS DOUBLE)
            / CAST(greatest(array_element(args, 2), 1) AS DOUBLE))) AS BIGINT) AS alloc_objects,
        sum(value) AS alloc_bytes,
        count(*) AS samples
    FROM samples
    WHERE kind = 'alloc' AND op = 'alloc'
        AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
        AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
    GROUP BY comm, pid, stack_id
) a
LEFT JOIN stack_table t ON t.stack_id = a.stack_id
ORDER BY a.alloc_bytes DESC, a.pid;
