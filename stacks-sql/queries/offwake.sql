-- Why threads waited: off-CPU time by the waker's stack and the blocked thread's stack (offwaketime).
--
-- One row per (process, thread, waker, waker stack, blocked stack) over `switch` intervals that
-- have a `wake` row (record with `-e switch,wake`; the view `waits` links them). `stack` is laid out as bcc's offwaketime
-- folds it: read root first, the blocked thread from its root to where it blocked, a `--`
-- frame, then the waker from where it woke it back to its root (`stack_chain`). A waker without
-- stacks (an interrupt, or a wakeup sooner than the `switch` MIN) stands as one frame naming it.
-- `offcpu_ns` sums the intervals (switch-out to back on CPU), `waited_ns` the part until the
-- wakeup (the rest waited for a CPU). With wakeups sampled 1 in N (`wake:STACKS:N`) only the
-- intervals of the wakeups taken are linked, and with intervals sampled (`switch:STACKS:MIN:N`)
-- only those taken have a row: a wake row's `count` is the intervals it stands for (both Ns),
-- and the sums scale each interval's own `duration` and wait by it. stacks-pprof turns this into `intervals/count`,
-- `offcpu/nanoseconds` and `waited/nanoseconds`; `stacks-pprof --format folded` or `svg`
-- gives the classic chart.
-- kinds: switch, wake
-- default-value: offcpu_ns
-- param: comm text = '%'        blocked processes to keep (SQL LIKE pattern)
-- param: pid int = null         only this blocked process id (null: every process)
-- param: tid int = null         only this blocked thread id (null: every thread)
-- param: from timestamp = null  start of the time window, inclusive (null: from the start)
-- param: to timestamp = null    end of the time window, exclusive (null: to the end)
SELECT
    a.comm,
    a.pid,
    a.thread,
    a.waker_comm,
    a.waker_thread,
    stack_chain(
        stack_or(wt.stack, a.waker_thread),
        stack_or(st.stack, '[no stack]')
    ) AS stack,
    a.intervals, a.offcpu_ns, a.waited_ns
FROM (
    SELECT s.comm, s.pid, s.thread, s.wake_comm AS waker_comm, s.wake_thread AS waker_thread,
        s.wake_stack_id AS waker_stack_id, s.stack_id,
        sum(s.wake_count) AS intervals, sum(s.duration * s.wake_count) AS offcpu_ns,
        sum(s.wake_value * s.wake_count) AS waited_ns
    FROM waits s
    WHERE s.kind = 'switch' AND s.duration IS NOT NULL AND s.wake_time IS NOT NULL
        AND s.comm LIKE $comm AND ($pid IS NULL OR s.pid = $pid)
        AND ($tid IS NULL OR s.tid = $tid)
        AND ($from IS NULL OR s.time >= $from) AND ($to IS NULL OR s.time < $to)
    GROUP BY s.comm, s.pid, s.thread, s.wake_comm, s.wake_thread, s.wake_stack_id, s.stack_id
) a
LEFT JOIN stack_table wt ON wt.stack_id = a.waker_stack_id
LEFT JOIN stack_table st ON st.stack_id = a.stack_id
ORDER BY a.offcpu_ns DESC, a.intervals DESC, a.pid;
