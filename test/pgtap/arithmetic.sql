--
-- arithmetic: the C refill arithmetic against a reference computed in SQL,
-- over a grid of buckets, moments and costs; then the properties every
-- decision relies on.  Exact equality: both sides do the same IEEE
-- operations on the same inputs (elapsed time is whole microseconds
-- divided by 1e6, correctly rounded either way).
--
BEGIN;
SELECT plan(9);

CREATE TEMP TABLE grid AS
SELECT c AS capacity, r AS refill_rate, d AS deficit,
       timestamptz '2026-01-01 00:00:00+00' AS updated_at,
       timestamptz '2026-01-01 00:00:00+00' + e * interval '1 microsecond' AS at,
       e AS elapsed_us, k AS cost
FROM unnest(ARRAY[1, 2.5, 10, 1e6]::float8[]) AS c,
     unnest(ARRAY[0.001, 0.5, 4, 1000, 33333.333]::float8[]) AS r,
     unnest(ARRAY[0, 0.3, 1, 7.25]::float8[]) AS d0,
     LATERAL (SELECT least(d0, c) AS d UNION SELECT c) AS dd,
     unnest(ARRAY[-1000000, -1, 0, 1, 999, 250000, 1000000, 3600000000]::bigint[]) AS e,
     unnest(ARRAY[0, 0.25, 1, 2.5]::float8[]) AS k0,
     LATERAL (SELECT least(k0, c) AS k) AS kk;

-- the reference: what refill has not yet paid back at "at"
CREATE FUNCTION pg_temp.ref_deficit(g grid) RETURNS float8 LANGUAGE sql AS $$
	SELECT CASE WHEN g.at <= g.updated_at THEN g.deficit
	            ELSE greatest(0, g.deficit -
	                 extract(epoch FROM g.at - g.updated_at)::float8 * g.refill_rate)
	       END $$;

SELECT cmp_ok((SELECT count(*)::int FROM grid), '>', 2000, 'the grid has over 2000 cases');

SELECT is((SELECT count(*)::int FROM grid g
	WHERE tb_tokens(capacity, refill_rate, deficit, updated_at, at)
	      IS DISTINCT FROM capacity - pg_temp.ref_deficit(g)), 0,
	'tb_tokens = capacity - reference deficit, exactly');

SELECT is((SELECT count(*)::int FROM grid g
	WHERE tb_take(capacity, refill_rate, deficit, updated_at, cost, at)
	      IS DISTINCT FROM CASE WHEN pg_temp.ref_deficit(g) + cost <= capacity
	                            THEN pg_temp.ref_deficit(g) + cost END), 0,
	'tb_take grants exactly when the reference holds cost tokens, and leaves the reference deficit');

SELECT is((SELECT count(*)::int FROM grid g
	WHERE at <= updated_at
	  AND tb_tokens(capacity, refill_rate, deficit, updated_at, at)
	      IS DISTINCT FROM capacity - deficit), 0,
	'a moment before the last write (a clock stepped back) sees the bucket as written: no tokens minted');

SELECT is((SELECT count(*)::int FROM grid g
	WHERE tb_tokens(capacity, refill_rate, deficit, updated_at, at + interval '1 microsecond')
	      < tb_tokens(capacity, refill_rate, deficit, updated_at, at)), 0,
	'tokens never decrease as time passes');

SELECT is((SELECT count(*)::int FROM grid g
	WHERE tb_tokens(capacity, refill_rate, deficit, updated_at, at) > capacity), 0,
	'a bucket never holds more than its capacity');

-- full_at is the first microsecond at which the whole capacity can be taken
SELECT is((SELECT count(*)::int FROM grid g
	WHERE tb_take(capacity, refill_rate, deficit, updated_at, capacity,
	              tb_full_at(capacity, refill_rate, deficit, updated_at)) IS NULL), 0,
	'at full_at the whole capacity can be taken');
SELECT is((SELECT count(*)::int FROM grid g
	WHERE tb_full_at(capacity, refill_rate, deficit, updated_at) > updated_at
	  AND tb_take(capacity, refill_rate, deficit, updated_at, capacity,
	              tb_full_at(capacity, refill_rate, deficit, updated_at)
	              - interval '1 microsecond') IS NOT NULL), 0,
	'a microsecond before full_at it cannot: full_at is rounded up, not early');

-- fractional tokens carry over: a bucket of 2 at 4 tokens a second,
-- polled every 100 ms for 20 s, taking 1 whenever it holds 1.  Each poll
-- adds 0.4; flooring the refill, or restarting its clock at each grant,
-- would drop what had accrued (about 2.5/s).  Exact refill grants the
-- burst plus 4 a second, less the fraction still in the bucket at the end.
SELECT is((WITH RECURSIVE polls(i, deficit, updated_at, grants) AS (
		SELECT 0, 0::float8, timestamptz '2026-01-01 00:00:00+00', 0
		UNION ALL
		SELECT i + 1, coalesce(taken, deficit),
		       CASE WHEN taken IS NULL THEN updated_at ELSE at END,
		       grants + (taken IS NOT NULL)::int
		FROM polls,
		     LATERAL (SELECT timestamptz '2026-01-01 00:00:00+00'
		                     + (i + 1) * interval '100 ms' AS at) AS t,
		     LATERAL (SELECT tb_take(2, 4, deficit, updated_at, 1, at) AS taken) AS d
		WHERE i < 200)
	SELECT grants FROM polls WHERE i = 200), 81,
	'polling every 100 ms for 20 s at 4/s with a burst of 2 grants 81: 4 a second');

SELECT * FROM finish();
ROLLBACK;
