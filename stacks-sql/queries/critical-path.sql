-- What did a thread wait for, link by link: its waits attributed along the chain of wakers.
--
-- For thread `tid` (record with `-e switch,wake`): each of its kept off-CPU intervals that a
-- `wake` row explains (the view `waits`) is a wait, from its switch-out to its wakeup, on the waker. What the
-- waker did during that wait is split into its own CPU time and its own waits, and those waits
-- are attributed to their wakers in turn, up to `depth` links, at most 4 (the chain
-- `A <- B <- C`). One row per (depth, chain, stack): `waits` (how many waits of that link),
-- `waited_ns` (their time, within the first thread's waits), `waker_cpu_ns` (the last waker's
-- CPU in that time: its time in it not off CPU) and `waker_off_ns` (its time off CPU in it,
-- attributed at the next depth where a wake row explains it); both null for an interrupt,
-- softirq or timer, or a thread the recording did not follow (a kworker), whose time is not
-- known. `stack` is the link's wait as offwake lays it out: where the chain's last-but-one
-- thread waited, root first, a `--` frame, then where the last one woke it, leaf first (a
-- waker without stacks stands as one frame naming it), so stacks-pprof draws the chain's
-- waits. Depth 0 is the thread itself: `waited_ns` = all its off-CPU time by where it waited,
-- `waker_off_ns` = the part a wake row explains. Sum over `stack` for a chain's totals.
-- Off-CPU intervals shorter than the `switch` MIN are folded and count as CPU here.
-- kinds: switch, wake
-- default-value: waited_ns
-- param: tid int = null         the thread to explain (required)
-- param: depth int = 4          links of the chain to follow (1-4)
-- param: from timestamp = null  start of the time window, inclusive (null: from the start)
-- param: to timestamp = null    end of the time window, exclusive (null: to the end)
-- The chain link by link (written out, not WITH RECURSIVE: a cluster cannot run recursion).
WITH seg1 AS (
    SELECT 1 AS depth, s.thread || ' <- ' || s.wake_thread AS chain, s.wake_tid AS tid,
        s.wake_thread AS waker, s.stack_id AS sid, s.wake_stack_id AS wid,
        cast(s.time AS bigint) AS a, cast(s.wake_time AS bigint) AS b
    FROM waits s
    WHERE s.kind = 'switch' AND s.tid = $tid AND s.wake_time IS NOT NULL
        AND ($from IS NULL OR s.time >= $from) AND ($to IS NULL OR s.time < $to)
),
seg2 AS (
    SELECT p.depth + 1 AS depth, p.chain || ' <- ' || s.wake_thread AS chain, s.wake_tid AS tid,
        s.wake_thread AS waker, s.stack_id AS sid, s.wake_stack_id AS wid,
        greatest(p.a, cast(s.time AS bigint)) AS a, least(p.b, cast(s.wake_time AS bigint)) AS b
    FROM seg1 p
    JOIN waits s ON s.kind = 'switch' AND s.tid = p.tid AND s.duration IS NOT NULL
        AND cast(s.time AS bigint) < p.b AND cast(s.time AS bigint) + s.duration > p.a
    WHERE $depth >= 2 AND p.tid <> 0 AND cast(s.wake_time AS bigint) > p.a
),
seg3 AS (
    SELECT p.depth + 1 AS depth, p.chain || ' <- ' || s.wake_thread AS chain, s.wake_tid AS tid,
        s.wake_thread AS waker, s.stack_id AS sid, s.wake_stack_id AS wid,
        greatest(p.a, cast(s.time AS bigint)) AS a, least(p.b, cast(s.wake_time AS bigint)) AS b
    FROM seg2 p
    JOIN waits s ON s.kind = 'switch' AND s.tid = p.tid AND s.duration IS NOT NULL
        AND cast(s.time AS bigint) < p.b AND cast(s.time AS bigint) + s.duration > p.a
    WHERE $depth >= 3 AND p.tid <> 0 AND cast(s.wake_time AS bigint) > p.a
),
seg4 AS (
    SELECT p.depth + 1 AS depth, p.chain || ' <- ' || s.wake_thread AS chain, s.wake_tid AS tid,
        s.wake_thread AS waker, s.stack_id AS sid, s.wake_stack_id AS wid,
        greatest(p.a, cast(s.time AS bigint)) AS a, least(p.b, cast(s.wake_time AS bigint)) AS b
    FROM seg3 p
    JOIN waits s ON s.kind = 'switch' AND s.tid = p.tid AND s.duration IS NOT NULL
        AND cast(s.time AS bigint) < p.b AND cast(s.time AS bigint) + s.duration > p.a
    WHERE $depth >= 4 AND p.tid <> 0 AND cast(s.wake_time AS bigint) > p.a
),
seg AS (
    SELECT * FROM seg1 UNION ALL SELECT * FROM seg2
    UNION ALL SELECT * FROM seg3 UNION ALL SELECT * FROM seg4
),
-- Threads the recording followed (their CPU is known).
traced AS (SELECT DISTINCT tid FROM samples WHERE kind = 'switch'),
-- Each waker's own off-CPU time within the wait it explains.
split AS (
    SELECT seg.depth, seg.chain, seg.tid, seg.waker, seg.sid, seg.wid, seg.a, seg.b,
        max(k.tid) IS NOT NULL AS known,
        coalesce(sum(CASE WHEN s.time IS NULL THEN 0
            ELSE least(seg.b, cast(s.time AS bigint) + s.duration)
                - greatest(seg.a, cast(s.time AS bigint)) END), 0) AS off_ns
    FROM seg
    LEFT JOIN samples s ON s.kind = 'switch' AND s.tid = seg.tid AND s.duration IS NOT NULL
        AND cast(s.time AS bigint) < seg.b AND cast(s.time AS bigint) + s.duration > seg.a
    LEFT JOIN traced k ON k.tid = seg.tid
    GROUP BY seg.depth, seg.chain, seg.tid, seg.waker, seg.sid, seg.wid, seg.a, seg.b
),
-- Depth 0: the thread's own off-CPU intervals by where it waited.
own AS (
    SELECT max(s.thread) AS chain, s.stack_id AS sid, count(*) AS waits, sum(s.value) AS waited_ns,
        sum(CASE WHEN s.wake_tid IS NULL THEN 0 ELSE s.wake_duration END) AS waker_off_ns
    FROM waits s
    WHERE s.kind = 'switch' AND s.tid = $tid
        AND ($from IS NULL OR s.time >= $from) AND ($to IS NULL OR s.time < $to)
    GROUP BY s.tid, s.stack_id
),
links AS (
    SELECT depth, chain, waker, sid, wid, count(*) AS waits, sum(b - a) AS waited_ns,
        CASE WHEN bool_and(known) THEN sum(b - a - off_ns) END AS waker_cpu_ns,
        CASE WHEN bool_and(known) THEN sum(off_ns) END AS waker_off_ns
    FROM split
    GROUP BY depth, chain, waker, sid, wid
)
SELECT 0 AS depth, o.chain, o.waits, o.waited_ns, cast(NULL AS bigint) AS waker_cpu_ns,
    o.waker_off_ns, stack_or(st.stack, '[no stack]') AS stack
FROM own o
LEFT JOIN stack_table st ON st.stack_id = o.sid
UNION ALL
SELECT l.depth, l.chain, l.waits, l.waited_ns, l.waker_cpu_ns, l.waker_off_ns,
    stack_chain(stack_or(wt.stack, l.waker), stack_or(st.stack, '[no stack]')) AS stack
FROM links l
LEFT JOIN stack_table wt ON wt.stack_id = l.wid
LEFT JOIN stack_table st ON st.stack_id = l.sid
ORDER BY depth, waited_ns DESC;
