-- Network bytes by stack, protocol and direction: which code paths sent and received how much.
--
-- One row per (process, thread, protocol, direction, stack) over `net` rows: protocol `tcp` or
-- `udp`, direction `send` or `recv`. `bytes` sums bytes transferred, `calls` counts calls.
-- stacks-pprof: `bytes/bytes`, `calls/count` (protocol and direction become labels).
-- kinds: net
-- default-value: bytes
-- param: comm text = '%'        process names to keep (SQL LIKE pattern)
-- param: pid int = null         only this process id (null: every process)
-- param: from timestamp = null  start of the time window, inclusive (null: from the start)
-- param: to timestamp = null    end of the time window, exclusive (null: to the end)
SELECT
    a.comm,
    a.pid,
    a.tid,
    a.thread,
    a.protocol,
    a.direction,
    stack_or(t.stack, '[no stack]') AS stack,
    a.bytes, a.calls
FROM (
    SELECT comm, pid, tid, thread, protocol, op AS direction, stack_id,
        sum(value) AS bytes, sum(coalesce(count, 1)) AS calls
    FROM samples
    WHERE kind = 'net'
        AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
        AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
    GROUP BY comm, pid, tid, thread, protocol, op, stack_id
) a
LEFT JOIN stack_table t ON t.stack_id = a.stack_id
ORDER BY a.bytes DESC, a.calls DESC, a.pid, a.tid;
