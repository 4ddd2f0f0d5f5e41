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
-- Off-CPU intervals shorter than the `switch` MIN are folded into rows that say how much, not
-- when: a folded row's time is spread evenly over the span it covers (from its `time` to the
-- thread's next folded row; the last one to its last kept interval or wakeup of another) less
-- the thread's kept intervals, and the part in a wait is the waker's off-CPU time there.
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
-- Folded rows, one group per flush (its rows, one per state, share `time`): their off-CPU ns
-- `v` lie somewhere in [t0, t1), t1 the thread's next group, or for its last group the end of
-- its last kept interval or its last wakeup of another thread, whichever is later (a second,
-- a flush's period, when neither came after t0). A kept interval is
-- wholly in one group's span or outside all (none holds a switch-out of another): the thread's
-- timeline, group starts and kept intervals in time order, gives each kept interval to the
-- group begun last before it, in one pass (no join of every group with every interval).
timeline AS (
    SELECT tid, cast(time AS bigint) AS t, sum(value) AS v, cast(0 AS bigint) AS kept_ns
    FROM samples
    WHERE kind = 'switch' AND duration IS NULL
    GROUP BY tid, time
    UNION ALL
    SELECT tid, cast(time AS bigint) AS t, cast(NULL AS bigint) AS v, duration AS kept_ns
    FROM samples
    WHERE kind = 'switch' AND duration IS NOT NULL
    UNION ALL
    -- The thread's wakeups of others: it was on CPU then (the end of its last group).
    SELECT tid, cast(time AS bigint) AS t, cast(NULL AS bigint) AS v, cast(0 AS bigint) AS kept_ns
    FROM samples
    WHERE kind = 'wake' AND tid <> 0
),
numbered AS (
    SELECT tid, t, v, kept_ns,
        count(v) OVER (PARTITION BY tid ORDER BY t ROWS UNBOUNDED PRECEDING) AS g
    FROM timeline
),
groups AS (
    SELECT tid, min(CASE WHEN v IS NOT NULL THEN t END) AS t0, sum(v) AS v,
        sum(kept_ns) AS kept_ns, max(t + kept_ns) AS last_end
    FROM numbered
    WHERE g > 0
    GROUP BY tid, g
),
-- `d`: the group's density, its ns spread evenly over [t0, t1) less the kept intervals there.
fold AS (
    SELECT tid, t0, t1,
        cast(v AS double) / cast(greatest(t1 - t0 - kept_ns, 1) AS double) AS d
    FROM (
        SELECT tid, t0, v, kept_ns,
            coalesce(lead(t0) OVER (PARTITION BY tid ORDER BY t0),
                CASE WHEN last_end > t0 THEN last_end ELSE t0 + 1000000000 END) AS t1
        FROM groups
    ) f
),
-- Each waker's own off-CPU time within the wait it explains, in parts summed per wait (each a
-- row, not an aggregate of aggregates, which would also deepen the plan): its kept intervals
-- there; its folded groups' density over their overlap with the wait; less that density over
-- its kept intervals in that overlap.
parts AS (
    SELECT seg.depth, seg.chain, seg.tid, seg.waker, seg.sid, seg.wid, seg.a, seg.b,
        k.tid AS known_tid,
        CASE WHEN s.time IS NULL THEN 0.0
            ELSE cast(least(seg.b, cast(s.time AS bigint) + s.duration)
                - greatest(seg.a, cast(s.time AS bigint)) AS double) END AS off
    FROM seg
    LEFT JOIN samples s ON s.kind = 'switch' AND s.tid = seg.tid AND s.duration IS NOT NULL
        AND cast(s.time AS bigint) < seg.b AND cast(s.time AS bigint) + s.duration > seg.a
    LEFT JOIN traced k ON k.tid = seg.tid
    UNION ALL
    SELECT seg.depth, seg.chain, seg.tid, seg.waker, seg.sid, seg.wid, seg.a, seg.b,
        cast(NULL AS int) AS known_tid,
        f.d * cast(least(seg.b, f.t1) - greatest(seg.a, f.t0) AS double) AS off
    FROM seg
    JOIN fold f ON f.tid = seg.tid AND f.t0 < seg.b AND f.t1 > seg.a
    UNION ALL
    SELECT seg.depth, seg.chain, seg.tid, seg.waker, seg.sid, seg.wid, seg.a, seg.b,
        cast(NULL AS int) AS known_tid,
        -f.d * cast(least(seg.b, f.t1, cast(s.time AS bigint) + s.duration)
            - greatest(seg.a, f.t0, cast(s.time AS bigint)) AS double) AS off
    FROM seg
    JOIN fold f ON f.tid = seg.tid AND f.t0 < seg.b AND f.t1 > seg.a
    JOIN samples s ON s.kind = 'switch' AND s.tid = seg.tid AND s.duration IS NOT NULL
        AND cast(s.time AS bigint) < least(seg.b, f.t1)
        AND cast(s.time AS bigint) + s.duration > greatest(seg.a, f.t0)
),
split AS (
    SELECT depth, chain, tid, waker, sid, wid, a, b, max(known_tid) IS NOT NULL AS known,
        least(b - a, greatest(cast(round(sum(off)) AS bigint), 0)) AS off_ns
    FROM parts
    GROUP BY depth, chain, tid, waker, sid, wid, a, b
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
