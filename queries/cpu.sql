-- CPU profile by stack: samples and on-CPU time per process, thread and stack.
--
-- One row per distinct (process, thread, stack). `samples` counts CPU samples; `cpu_ns` sums
-- their sampling periods, i.e. the on-CPU time they stand for. stacks-pprof turns this into a
-- pprof profile with sample types `samples/count` and `cpu/nanoseconds`.
SELECT
    comm,
    pid,
    tid,
    thread,
    stack,
    count(*) AS samples,
    sum(value) AS cpu_ns
FROM stacks
WHERE kind = 'profile' AND stack IS NOT NULL
GROUP BY comm, pid, tid, thread, stack
ORDER BY samples DESC, cpu_ns DESC, pid, tid;
