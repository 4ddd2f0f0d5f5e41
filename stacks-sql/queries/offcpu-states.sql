-- Off-CPU time by state: per process, how long its threads were runnable, sleeping, in D state...
--
-- One row per (process, state) over `switch` rows, folded short intervals included.
-- `runnable` time is waiting for a CPU; `sleeping` waiting for an event; `uninterruptible`
-- usually waiting for IO. `mean_ns` = offcpu_ns / intervals.
-- kinds: switch
-- param: comm text = '%'        process names to keep (SQL LIKE pattern)
-- param: pid int = null         only this process id (null: every process)
-- param: from timestamp = null  start of the time window, inclusive (null: from the start)
-- param: to timestamp = null    end of the time window, exclusive (null: to the end)
SELECT
    comm,
    pid,
    state,
    sum(coalesce(count, 1)) AS intervals,
    sum(value) AS offcpu_ns,
    sum(value) / sum(coalesce(count, 1)) AS mean_ns
FROM samples
WHERE kind = 'switch'
    AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
    AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
GROUP BY comm, pid, state
ORDER BY offcpu_ns DESC, pid, state;
