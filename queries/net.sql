-- Network bytes by stack, protocol and direction: which code paths sent and received how much.
--
-- One row per (process, thread, protocol, direction, stack) over `net` rows: protocol `tcp` or
-- `udp`, direction `send` or `recv`. `bytes` sums bytes transferred, `calls` counts calls.
-- stacks-pprof: `bytes/bytes`, `calls/count` (protocol and direction become labels).
-- default-value: bytes
-- param: comm text = '%'        process names to keep (SQL LIKE pattern)
-- param: pid int = null         only this process id (null: every process)
-- param: from timestamp = null  start of the time window, inclusive (null: from the start)
-- param: to timestamp = null    end of the time window, exclusive (null: to the end)
SELECT
    comm,
    pid,
    tid,
    thread,
    protocol,
    direction,
    stack_any(stack) AS stack,
    sum(value) AS bytes,
    count(*) AS calls
FROM (
    SELECT comm, pid, tid, thread, protocol, op AS direction, value,
        stack_or(stack, '[no stack]') AS stack
    FROM stacks
    WHERE kind = 'net'
        AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
        AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
)
GROUP BY comm, pid, tid, thread, protocol, direction, stack_key(stack)
ORDER BY bytes DESC, calls DESC, pid, tid;
