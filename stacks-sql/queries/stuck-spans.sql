-- Stuck spans: which `tracing` spans were entered and not left during the recording, and where
-- were their threads parked?
--
-- One row per `span` row with no duration (`-e span`: a thread entered the span and had not
-- left it when the recording ended, or its process exited in it). `entered` = when; the
-- thread's last off-CPU interval in that span says where it waited: `parked_state`, since
-- `parked_since`, for `parked_ns` (an interval still open at the end counts to the end) and
-- `parked_stack` (null: the thread was not seen off CPU in the span; record `switch` too).
-- An async task parked between polls is in no thread, so it is not here: it left the span.
-- kinds: switch, span
-- param: comm text = '%'        process names to keep (SQL LIKE pattern)
-- param: pid int = null         only this process id (null: every process)
-- param: span text = '%'        span names to keep (SQL LIKE pattern)
WITH stuck AS (
    SELECT comm, pid, tid, thread, span_name, span_id, trace_id, time AS entered
    FROM samples
    WHERE kind = 'span' AND duration IS NULL
        AND comm LIKE $comm AND ($pid IS NULL OR pid = $pid)
        AND coalesce(span_name, '') LIKE $span
),
parked AS (
    SELECT tid, span_id, state, time, value, stack_id,
        row_number() OVER (PARTITION BY tid, span_id ORDER BY time DESC) AS latest
    FROM samples
    WHERE kind = 'switch' AND span_id IS NOT NULL
)
SELECT
    s.comm,
    s.pid,
    s.thread,
    s.tid,
    s.span_name,
    s.span_id,
    s.trace_id,
    s.entered,
    p.state AS parked_state,
    p.time AS parked_since,
    p.value AS parked_ns,
    t.stack AS parked_stack
FROM stuck s
LEFT JOIN parked p ON p.tid = s.tid AND p.span_id = s.span_id AND p.latest = 1
LEFT JOIN stack_table t ON t.stack_id = p.stack_id
ORDER BY s.entered, s.pid, s.tid;
