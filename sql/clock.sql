--
-- clock: the real clock, for a few seconds.  Time is the server's clock at
-- the moment of each call (not now(), which stands still in a
-- transaction); a clock stepped back mints nothing; refill is exact.
--
CREATE EXTENSION tokenbucket;

-- within one transaction now() stands still, but the bucket refills (a
-- token every 250 ms: the two calls of one statement are far closer)
SELECT tb_create('fast', 1, 4);
BEGIN;
SELECT now() AS txn_start \gset
SELECT tb_acquire('fast'), tb_acquire('fast');
SELECT pg_sleep(0.3);
SELECT tb_acquire('fast'), now() = :'txn_start' AS now_stands_still;
COMMIT;

-- the last write happened an hour "in the future" (the clock has since
-- stepped back an hour): the bucket gains nothing until the clock is back
-- there, and the moment of the last write does not move backwards
SELECT tb_create('stepped', 1, 1000);
UPDATE tb_buckets SET deficit = 1, updated_at = clock_timestamp() + interval '1 hour'
WHERE name = 'stepped';
SELECT updated_at AS last_write FROM tb_buckets WHERE name = 'stepped' \gset
SELECT tb_acquire('stepped');
SELECT pg_sleep(0.05);
SELECT tb_acquire('stepped'), tokens FROM tb_status WHERE name = 'stepped';
SELECT tb_alter('stepped', capacity => 2);
SELECT tb_acquire('stepped'), tokens FROM tb_status WHERE name = 'stepped';
SELECT updated_at = :'last_write' AS last_write_kept FROM tb_buckets WHERE name = 'stepped';
SELECT granted, retry_after > '59 min' AS waits_for_the_clock FROM tb_try('stepped');

-- poll(bucket, pause, seconds): call tb_acquire in its own transaction
-- every "pause" seconds for "seconds".  Each call is recorded with the
-- server's clock just before and just after it and, if granted, with the
-- moment the grant was decided and the tokens it left (the row it wrote).
-- Everything below is computed from these: a busy machine that oversleeps
-- or deschedules the worker changes the calls, not what must hold of them.
CREATE TEMP TABLE calls (bucket text, before timestamptz, after timestamptz,
	granted boolean, t timestamptz, left_after float8);
CREATE PROCEDURE pg_temp.poll(bucket text, pause float8, seconds float8)
LANGUAGE plpgsql AS $$
DECLARE
	t0 timestamptz := clock_timestamp();
	before timestamptz;
	granted boolean;
BEGIN
	LOOP
		before := clock_timestamp();
		EXIT WHEN before - t0 >= seconds * interval '1 second';
		granted := tb_acquire(bucket);
		INSERT INTO calls SELECT bucket, before, clock_timestamp(), granted,
			CASE WHEN granted THEN updated_at END,
			CASE WHEN granted THEN capacity - deficit END
		FROM tb_buckets WHERE name = bucket;
		COMMIT;
		PERFORM pg_sleep(pause);
	END LOOP;
END $$;

-- the first article's scenario: capacity 2, 4 tokens a second, a worker
-- polling every 100 ms.  Flooring the refill and restarting the refill
-- clock on each grant admits about 2.5/s there; exact refill admits 4/s.
-- From the first call to the last, w seconds (at least w_low, at most
-- w_high by the clock around the calls), exact refill grants the 2 tokens
-- the bucket starts with plus 4w, less the at most 1 left in it at the
-- end, less what it could not hold: only a pause between calls longer than
-- the 250 ms a token takes (a busy machine's oversleep) can fill it, and
-- loses at most 4 x pause - 1.  Each column reads ok, or shows what was
-- measured against its bound.
SELECT tb_create('article', 2, 4);
CALL pg_temp.poll('article', 0.1, 3);
WITH c AS (
	SELECT granted, after - lag(before) OVER (ORDER BY before) AS pause
	FROM calls WHERE bucket = 'article'),
s AS (
	SELECT count(*) FILTER (WHERE granted) AS grants, count(*) AS calls,
	       (SELECT extract(epoch FROM max(before) - min(after)) FROM calls WHERE bucket = 'article') AS w_low,
	       (SELECT extract(epoch FROM max(after) - min(before)) FROM calls WHERE bucket = 'article') AS w_high,
	       coalesce(sum(greatest(0, 4 * extract(epoch FROM pause) - 1)), 0) AS lost
	FROM c)
SELECT CASE WHEN grants >= 1 + 4 * w_low - lost THEN 'ok'
            ELSE format('%s grants in %s calls, fewer than 1 + 4 x %s s - %s lost to pauses',
                        grants, calls, round(w_low, 3), round(lost, 3))
       END AS four_per_second,
       CASE WHEN grants <= 2 + 4 * w_high THEN 'ok'
            ELSE format('%s grants, more than 2 + 4 x %s s', grants, round(w_high, 3))
       END AS never_more
FROM s;

-- steady demand: a worker calling as fast as it can, on a bucket emptied
-- first.  Its grants never exceed the refill since the bucket was emptied.
-- And it gets the configured rate: between two grants that each left less
-- than a token, with no grant between them that found the bucket full
-- (its capacity is a second of refill: a worker descheduled that long
-- loses tokens, rightly), it is granted 200 x their distance plus the
-- difference of what they left, within 1/distance of 200/s; checked within
-- 0.5% over the longest such span.
SELECT tb_create('steady', 200, 200);
SELECT tb_acquire('steady', 200);
SELECT updated_at AS emptied FROM tb_buckets WHERE name = 'steady' \gset
CALL pg_temp.poll('steady', 0, 2.5);
WITH g AS (
	SELECT t, left_after,
	       count(*) FILTER (WHERE left_after > 199 - 1e-6) OVER (ORDER BY t) AS stretch
	FROM calls WHERE bucket = 'steady' AND granted),
span AS (
	SELECT min(t) AS first, max(t) AS last FROM g WHERE left_after < 1
	GROUP BY stretch HAVING max(t) > min(t) ORDER BY max(t) - min(t) DESC LIMIT 1),
s AS (
	SELECT (SELECT count(*) FROM g) AS grants,
	       (SELECT extract(epoch FROM max(t) - :'emptied') FROM g) AS since_emptied,
	       (SELECT count(*) FROM g WHERE t > first AND t <= last) AS saturated,
	       extract(epoch FROM last - first) AS seconds
	FROM (SELECT) AS one LEFT JOIN span ON true)
SELECT CASE WHEN grants <= 200 * since_emptied + 1e-6 THEN 'ok'
            ELSE format('%s grants, more than 200 x %s s since the bucket was emptied',
                        grants, round(since_emptied, 3))
       END AS never_more,
       CASE WHEN abs(saturated / (200 * seconds) - 1) < 0.005 THEN 'ok'
            WHEN seconds IS NULL THEN 'never emptied twice'
            ELSE format('%s grants in %s s between two that left it empty: %s/s, not 200/s within 0.5%%',
                        saturated, round(seconds, 3), round(saturated / seconds, 2))
       END AS rate_within_half_a_percent
FROM s;

DROP EXTENSION tokenbucket;
