-- Top threads per resource: for each kind of event, the threads with the most of it.
--
-- One row per (kind, rank). `total` sums `value` in the kind's `unit` (profile and switch: ns
-- on and off CPU; rss, block, vfs, net: bytes; exec, fork, exit: count); `events` counts the
-- events (folded rows count for what they stand for). `lost` rows are left out.
-- kinds: any
-- param: comm text = '%'        process names to keep (SQL LIKE pattern)
-- param: pid int = null         only this process id (null: every process)
-- param: from timestamp = null  start of the time window, inclusive (null: from the start)
-- param: to timestamp = null    end of the time window, exclusive (null: to the end)
-- param: kind text = '%'        event kinds to rank (SQL LIKE pattern, e.g. 'block')
-- param: top int = 10           how many per kind
SELECT kind, rank, comm, pid, tid, thread, events, total, unit
FROM (
    SELECT kind, comm, pid, tid, thread, events, total, unit,
        row_number() OVER (PARTITION BY kind ORDER BY total DESC, events DESC, comm, pid, tid, thread) AS rank
    FROM (
        SELECT kind, comm, pid, tid, thread,
            sum(coalesce(count, 1)) AS events,
            sum(value) AS total,
            kind_unit(kind) AS unit
        FROM samples
        WHERE kind <> 'lost' AND kind LIKE $kind
            AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
            AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
        GROUP BY kind, comm, pid, tid, thread
    )
)
WHERE rank <= $top
ORDER BY kind, rank;
