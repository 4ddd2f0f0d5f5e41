-- Thread-seconds by state: per thread, how long it ran, waited for a CPU, slept, and in which system call
--
-- One row per (process, thread, state, syscall) over `state` rows (sampled thread states):
-- `thread_ns` = samples × the sampling period, so a thread's rows add up to its wall time
-- while recorded. `syscall` is null when it was not in one (running, or runnable in user code);
-- `mean_in_syscall_ns` = the mean time waited in that call so far when sampled (null: unseen).
-- kinds: state
-- param: comm text = '%'        process names to keep (SQL LIKE pattern)
-- param: pid int = null         only this process id (null: every process)
-- param: from timestamp = null  start of the time window, inclusive (null: from the start)
-- param: to timestamp = null    end of the time window, exclusive (null: to the end)
SELECT
    comm,
    pid,
    thread,
    tid,
    state,
    syscall,
    sum(coalesce(count, 1)) AS samples,
    sum(value) AS thread_ns,
    avg(duration) AS mean_in_syscall_ns
FROM samples
WHERE kind = 'state'
    AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
    AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
GROUP BY comm, pid, thread, tid, state, syscall
ORDER BY thread_ns DESC, pid, tid, state, syscall;
