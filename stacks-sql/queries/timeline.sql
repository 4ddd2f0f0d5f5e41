-- Timeline of a resource: events and their total per time bucket (default: CPU per second).
--
-- One row per bucket that has events of `kind`. `events` counts events (folded rows count for
-- what they stand for), `total` sums `value` in `unit`, `processes` counts distinct pids.
-- Buckets start at multiples of `interval` since the Unix epoch; empty buckets are absent.
-- kinds: any
-- param: comm text = '%'        process names to keep (SQL LIKE pattern)
-- param: pid int = null         only this process id (null: every process)
-- param: from timestamp = null  start of the time window, inclusive (null: from the start)
-- param: to timestamp = null    end of the time window, exclusive (null: to the end)
-- param: kind text = 'profile'  the event kind (profile, switch, rss, block, vfs, net, lost, …)
-- param: interval interval = 1s bucket width
SELECT
    time_bucket(time, $interval) AS bucket,
    sum(coalesce(count, 1)) AS events,
    sum(value) AS total,
    min(kind_unit(kind)) AS unit,
    count(DISTINCT pid) AS processes
FROM samples
WHERE kind = $kind
    AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
    AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
GROUP BY time_bucket(time, $interval)
ORDER BY bucket;
