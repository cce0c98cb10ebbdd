-- test/load/windows.sql: for every recorded grant g and window length w,
-- the tokens its bucket surely granted in [g.t0, g.t0 + w] (the grants
-- decided no earlier than g.t0 and no later than g.t0 + w) against the most
-- a token bucket may grant there, capacity + refill_rate x w.  One row: the
-- windows checked and those overdrawn.  (A grant is decided no earlier
-- than its t0, so t0 <= t: the bound on g2.t0 below follows from the one on
-- g2.t, and lets the index on (bucket, t0) read only the window's grants.)
WITH windows(w) AS (VALUES (0), (0.01), (0.1), (0.5), (1), (2), (5), (3600)),
checked AS (
	SELECT (SELECT sum(g2.cost) FROM grants g2
	         WHERE g2.bucket = g.bucket
	           AND g2.t0 >= g.t0 AND g2.t0 <= g.t0 + w.w * interval '1 second'
	           AND g2.t <= g.t0 + w.w * interval '1 second') AS taken,
	       b.capacity + b.refill_rate * w.w AS allowed
	FROM grants g CROSS JOIN windows w JOIN tb_status b ON b.name = g.bucket
)
SELECT count(*) AS checked, count(*) FILTER (WHERE taken > allowed + 1e-9) AS overdrawn
FROM checked;
