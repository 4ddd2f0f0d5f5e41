-- Probe hits by stack: which code paths lead to each probe, as bcc's stackcount counts them.
--
-- One row per (probe, process, stack) over `probe` rows (`tp:`, `uprobe:`, `uretprobe:` and
-- `usdt:` in `stacks-record -e`). `hits` sums them: a row of a counting probe (`:count`)
-- stands for all the hits of its thread and stacks in one interval. Hits recorded without
-- stacks appear as `[no stack]`. stacks-pprof turns this into `count/count` labelled by
-- probe; `stacks-pprof -f folded` writes the `root;…;leaf count` lines of stackcount -f.
-- kinds: probe
-- default-value: hits
-- param: probe text = '%'       probes to keep (SQL LIKE pattern over `probe`)
-- param: comm text = '%'        process names to keep (SQL LIKE pattern)
-- param: pid int = null         only this process id (null: every process)
-- param: from timestamp = null  start of the time window, inclusive (null: from the start)
-- param: to timestamp = null    end of the time window, exclusive (null: to the end)
SELECT
    a.probe,
    a.comm,
    a.pid,
    stack_or(t.stack, '[no stack]') AS stack,
    a.hits
FROM (
    SELECT probe, comm, pid, stack_id, sum(value) AS hits
    FROM samples
    WHERE kind = 'probe'
        AND probe LIKE $probe
        AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
        AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
    GROUP BY probe, comm, pid, stack_id
) a
LEFT JOIN stack_table t ON t.stack_id = a.stack_id
ORDER BY a.hits DESC, a.probe, a.pid;
