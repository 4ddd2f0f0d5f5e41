-- observed: the time `state` sampling observed, one row per sampling pass and process it saw.
--
-- The one home of the rule behind average active threads (docs/top.md): a pass's rows share
-- its start as `time` and its period as `value`, so `period` is the time the pass stands for,
-- for each process (`pid`) of `host` (`''` for none) it saw. A pass the recorder could not run
-- on time observed nothing and has no row. `state` rows' thread-ns summed over a bucket,
-- divided by the periods of the passes in it, are the threads seen per pass: stacks-top sums
-- the passes per host (`max(period)` over a pass's processes), explore per process.
-- kinds read through it: state
SELECT host, pid, time, max(value) AS period
FROM (SELECT coalesce(host, '') AS host, pid, time, value FROM samples WHERE kind = 'state') s
GROUP BY host, pid, time
