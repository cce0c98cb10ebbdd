--
-- retry_after: a client told to come back after retry_after, that sleeps
-- that long (pg_sleep never sleeps less) and asks again, alone, is
-- granted; and it is not told to wait longer than the refill needs.  Real
-- clock, about a second; the bounds on retry_after come from the server's
-- clock around each round, so a busy machine cannot break them.
--
BEGIN;
SELECT plan(4);

DO $$ BEGIN PERFORM tb_create('r', 3, 20); END $$;

CREATE TEMP TABLE rounds (round int, cost float8, retry_after interval, granted boolean,
	emptying interval);

DO $$
DECLARE
	t record;
	cost float8;
	t0 timestamptz;
	emptying interval;
BEGIN
	FOR round IN 1..8 LOOP
		cost := 1 + (round % 3);
		-- empty the bucket, then ask for cost tokens: it holds then what
		-- refilled since its tokens were read, at most 20/s x "emptying"
		t0 := clock_timestamp();
		PERFORM tb_acquire('r', tokens) FROM tb_status WHERE name = 'r';
		SELECT * INTO t FROM tb_try('r', cost);
		emptying := clock_timestamp() - t0;
		PERFORM pg_sleep(extract(epoch FROM t.retry_after)::float8);
		INSERT INTO rounds VALUES (round, cost, t.retry_after, tb_acquire('r', cost), emptying);
	END LOOP;
END $$;

SELECT is((SELECT count(*)::int FROM rounds WHERE granted), 8,
	'each client that waited retry_after was granted');
SELECT is((SELECT count(*)::int FROM rounds WHERE retry_after <= interval '0'), 0,
	'an empty bucket always asks for a wait');
SELECT is((SELECT count(*)::int FROM rounds
	WHERE retry_after > cost / 20 * interval '1 second' + interval '1 microsecond'), 0,
	'retry_after is never longer than cost / rate (rounded up to a microsecond)');
SELECT is((SELECT count(*)::int FROM rounds
	WHERE retry_after < cost / 20 * interval '1 second' - emptying), 0,
	format('retry_after is cost / rate less at most what refilled while the bucket was emptied (%s ms at most here)',
		(SELECT round(extract(epoch FROM max(emptying)) * 1000, 3) FROM rounds)));

SELECT * FROM finish();
ROLLBACK;
