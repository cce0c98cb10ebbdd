--
-- clock: the real clock, for a few seconds.  Time is the server's clock at
-- the moment of each call (not now(), which stands still in a
-- transaction); a clock stepped back mints nothing; refill is exact.
--
CREATE EXTENSION tokenbucket;

-- within one transaction now() stands still, but the bucket refills
SELECT tb_create('fast', 1, 10);
BEGIN;
SELECT now() AS txn_start \gset
SELECT tb_acquire('fast'), tb_acquire('fast');
SELECT pg_sleep(0.15);
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
-- every "pause" seconds for "seconds", counting calls and grants and
-- measuring the window from the first call to the last
CREATE PROCEDURE pg_temp.poll(bucket text, pause float8, seconds float8,
	INOUT calls int DEFAULT 0, INOUT grants int DEFAULT 0,
	INOUT window_s float8 DEFAULT 0)
LANGUAGE plpgsql AS $$
DECLARE
	t0 timestamptz := clock_timestamp();
	last_call timestamptz;
BEGIN
	LOOP
		last_call := clock_timestamp();
		EXIT WHEN last_call - t0 >= seconds * interval '1 second';
		IF tb_acquire(bucket) THEN
			grants := grants + 1;
		END IF;
		calls := calls + 1;
		COMMIT;
		PERFORM pg_sleep(pause);
	END LOOP;
	window_s := extract(epoch FROM last_call - t0);
END $$;

-- the first article's scenario: capacity 2, 4 tokens a second, a worker
-- polling every 100 ms.  Flooring the refill and restarting the refill
-- clock on each grant admits about 2.5/s there; exact refill admits 4/s:
-- over a window w, between 2 + 4w - 2 and 2 + 4w grants
SELECT tb_create('article', 2, 4);
CALL pg_temp.poll('article', 0.1, 3) \gset
SELECT :calls BETWEEN 20 AND 31 AS polled_every_100ms,
       :grants >= 2 + 4 * :window_s - 2 AS four_per_second,
       :grants <= 2 + 4 * :window_s AS never_more;

-- steady demand: a worker calling as fast as it can gets the configured
-- rate within 0.5%, and never more than the refill allows.  The bucket is
-- emptied first; its capacity (a quarter second of refill) absorbs a
-- descheduled worker without losing tokens.
SELECT tb_create('steady', 50, 200);
SELECT tb_acquire('steady', 50);
CALL pg_temp.poll('steady', 0, 2.5) \gset
SELECT :grants <= 1 + 200 * :window_s AS never_more,
       abs(:grants / (200 * :window_s) - 1) < 0.005 AS rate_within_half_a_percent;

DROP EXTENSION tokenbucket;
