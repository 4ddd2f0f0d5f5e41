-- Stuck threads: which threads stayed in one system call longer than a threshold, on what file?
--
-- One row per system call a thread was seen in for at least `min_ms` milliseconds, over `state`
-- rows (sampled thread states): a call is the thread's rows with the same start of its wait
-- (`time` - `duration`: when it last left the CPU, in that call). `longest_ns` = the longest wait
-- in the call seen by a sample (the call lasted at least that long); `first_seen`/`last_seen` = the first and last sampling pass that
-- saw it past the threshold; `path` = the file, pipe or socket it was on (null: not a call on a
-- file descriptor); `local`/`remote` = a TCP/UDP socket's addresses. Threads that have not left
-- the CPU since the recording started have no `duration` and are not listed.
-- kinds: state
-- param: comm text = '%'        process names to keep (SQL LIKE pattern)
-- param: pid int = null         only this process id (null: every process)
-- param: from timestamp = null  start of the time window, inclusive (null: from the start)
-- param: to timestamp = null    end of the time window, exclusive (null: to the end)
-- param: min_ms int = 1000      shortest time in one call to report, milliseconds
SELECT
    comm,
    pid,
    thread,
    tid,
    syscall,
    path,
    local,
    remote,
    max(duration) AS longest_ns,
    min(time) AS first_seen,
    max(time) AS last_seen,
    count(*) AS samples
FROM samples
WHERE kind = 'state' AND syscall IS NOT NULL AND duration >= $min_ms * 1000000
    AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
    AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
GROUP BY comm, pid, thread, tid, syscall, path, local, remote,
    CAST(time AS BIGINT) - duration
ORDER BY longest_ns DESC, pid, tid;
