-- CPU by function: time each function was on CPU itself (flat) and with its callees (cumulative).
--
-- One row per function name (unresolved frames appear as [module+0xoffset]). `flat_*`: samples
-- whose leaf frame is the function; `cum_*`: samples with the function anywhere on the stack,
-- counted once per sample even when it recurses. Sorted by flat time.
-- kinds: profile
-- param: comm text = '%'        process names to keep (SQL LIKE pattern)
-- param: pid int = null         only this process id (null: every process)
-- param: from timestamp = null  start of the time window, inclusive (null: from the start)
-- param: to timestamp = null    end of the time window, exclusive (null: to the end)
WITH counts AS (
    SELECT stack_id, count(*) AS samples, sum(value) AS cpu_ns
    FROM samples
    WHERE kind = 'profile' AND stack_id IS NOT NULL
        AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
        AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
    GROUP BY stack_id
),
profiled AS (
    SELECT t.stack, c.samples, c.cpu_ns
    FROM stack_table t JOIN counts c ON c.stack_id = t.stack_id
    WHERE t.stack IS NOT NULL AND stack_depth(t.stack) > 0
),
flat AS (
    SELECT stack_leaf(stack) AS function, sum(samples) AS samples, sum(cpu_ns) AS cpu_ns
    FROM profiled
    GROUP BY stack_leaf(stack)
),
cumulative AS (
    SELECT function, sum(samples) AS samples, sum(cpu_ns) AS cpu_ns
    FROM (
        SELECT unnest(array_distinct(stack_functions(stack))) AS function, samples, cpu_ns
        FROM profiled
    )
    GROUP BY function
)
SELECT
    c.function,
    coalesce(f.samples, 0) AS flat_samples,
    coalesce(f.cpu_ns, 0) AS flat_ns,
    c.samples AS cum_samples,
    c.cpu_ns AS cum_ns
FROM cumulative c
LEFT JOIN flat f ON f.function = c.function
ORDER BY flat_ns DESC, cum_ns DESC, c.function;
