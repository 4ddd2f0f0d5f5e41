-- Cost by `tracing` span: CPU, off-CPU time and IO bytes per span name.
--
-- One row per (process, span name) over the rows programs using the tracing-stacks layer label
-- with the span their thread was in (`span_name`); rows in no span have a null `span_name`.
-- `cpu_ns` sums CPU samples' periods; `offcpu_ns` sums off-CPU intervals (`switch`, folded
-- short ones included: they are folded per span); `read_bytes`/`write_bytes` sum file reads
-- and writes (`vfs`); `block_bytes` sums block reads and writes submitted in the span; `net_bytes` sums
-- TCP/UDP bytes sent and received; `spans` counts distinct span ids seen (a span entered many
-- times counts once; one never seen by an event does not count).
-- kinds: profile, switch, block, vfs, net
-- param: comm text = '%'        process names to keep (SQL LIKE pattern)
-- param: pid int = null         only this process id (null: every process)
-- param: tid int = null         only this thread id (null: every thread)
-- param: from timestamp = null  start of the time window, inclusive (null: from the start)
-- param: to timestamp = null    end of the time window, exclusive (null: to the end)
SELECT
    comm,
    pid,
    span_name,
    sum(CASE WHEN kind = 'profile' THEN value ELSE 0 END) AS cpu_ns,
    sum(CASE WHEN kind = 'switch' THEN value ELSE 0 END) AS offcpu_ns,
    sum(CASE WHEN kind = 'vfs' AND op = 'read' THEN value ELSE 0 END) AS read_bytes,
    sum(CASE WHEN kind = 'vfs' AND op = 'write' THEN value ELSE 0 END) AS write_bytes,
    sum(CASE WHEN kind = 'block' AND op IN ('read', 'write') THEN value ELSE 0 END) AS block_bytes,
    sum(CASE WHEN kind = 'net' THEN value ELSE 0 END) AS net_bytes,
    count(DISTINCT span_id) AS spans
FROM samples
WHERE kind IN ('profile', 'switch', 'vfs', 'block', 'net')
    AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid) AND ($tid IS NULL OR tid = $tid)
    AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
GROUP BY comm, pid, span_name
ORDER BY cpu_ns + offcpu_ns DESC, comm, pid, span_name;
