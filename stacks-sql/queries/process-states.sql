-- Thread-seconds by process, state and system call: where did each process's threads spend their time?
--
-- One row per (process, state, syscall) over `state` rows (sampled thread states), its threads
-- added up: `thread_ns` = samples × the sampling period (a process with 4 threads recorded for
-- 2 s has 8 thread-seconds in all), `threads` = how many of them were seen so, `syscall` null
-- when not in one. `max_in_syscall_ns` = the longest time waited in that call seen by a sample
-- (null: unseen). Per thread: `thread-states`.
-- kinds: state
-- param: comm text = '%'        process names to keep (SQL LIKE pattern)
-- param: pid int = null         only this process id (null: every process)
-- param: from timestamp = null  start of the time window, inclusive (null: from the start)
-- param: to timestamp = null    end of the time window, exclusive (null: to the end)
SELECT
    comm,
    pid,
    state,
    syscall,
    count(DISTINCT tid) AS threads,
    sum(coalesce(count, 1)) AS samples,
    sum(value) AS thread_ns,
    max(duration) AS max_in_syscall_ns
FROM samples
WHERE kind = 'state'
    AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
    AND ($from IS NULL OR time >= $from) AND ($to IS NULL OR time < $to)
GROUP BY comm, pid, state, syscall
ORDER BY thread_ns DESC, pid, state, syscall;
