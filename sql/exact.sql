--
-- exact: the arithmetic at the edges of what it accepts.  A cost is 0 or
-- at least capacity / 2^32 (smaller would be lost to float8 rounding and
-- granted without limit); the moment a bucket is told to come back is the
-- first microsecond it grants, at any capacity and rate; every timestamp
-- written or reported is one PostgreSQL can read back.
--
CREATE EXTENSION tokenbucket;
\set VERBOSITY default

-- the smallest cost a bucket of capacity 2^32 accounts for is 1
SELECT tb_create('wide', 4294967296, 1, '1 hour');
SELECT tb_acquire('wide', 1), tb_acquire('wide', 0);
SELECT tb_acquire('wide', 0.9999);
SELECT * FROM tb_try('wide', 0.5);
SELECT * FROM tb_peek('wide', 0.5);
SELECT tb_acquire_all('{wide}', '{1e-6}');
SELECT deficit FROM tb_buckets WHERE name = 'wide';

-- 1.1 granted a cost of 1 from an empty bucket of 1e16 without limit: the
-- deficit could not change.  Now the pure helper denies it (NULL), and so
-- do the entry points, saying why.
SELECT tb_take(1e16, 1, 1e16, now(), '-infinity', 1, now()) AS deficit_after;
SELECT tb_take(1e12, 1, 0, now(), '-infinity', 1e-5, now()) AS deficit_after;
SELECT tb_take(1e12, 1, 0, now(), '-infinity', 1e12 / 4294967296, now()) > 0 AS resolvable;
SELECT tb_create('huge', 1e16, 1);
SELECT tb_acquire('huge', 1e16);
SELECT tb_acquire('huge', 1);
SELECT tb_reset('huge');
SELECT tb_acquire('huge', 1e16 / 4294967296) AS smallest_cost_granted;
SELECT deficit > 0 AS and_accounted FROM tb_buckets WHERE name = 'huge';

-- retry_after is exact where float8 is coarse: an empty bucket of 1e15
-- refilling a token every 1000 s, whose deficit float8 keeps only to 1/8
-- of a token (125 s of refill).  Told to come back at a moment, it grants
-- at that moment and not a microsecond before (1.1 could be seconds off).
CREATE TEMP TABLE coarse AS
SELECT 1e15::float8 AS capacity, 1e-3::float8 AS rate, 1e15::float8 AS deficit,
       '2026-01-01 00:00:00+00'::timestamptz AS at, cost
FROM unnest('{232831,300000.05,1000000,5000000.7}'::float8[]) AS cost;
SELECT cost, ready - at AS retry_after,
       tb_take(capacity, rate, deficit, at, '-infinity', cost, ready) IS NOT NULL AS granted_then,
       tb_take(capacity, rate, deficit, at, '-infinity', cost, ready - interval '1 microsecond') IS NULL
           AS refused_a_microsecond_before
FROM coarse, tb_ready_at(capacity, rate, deficit, at, '-infinity', cost, at) AS ready;
-- the same at ordinary sizes, and through a pause
SELECT tb_ready_at(10, 2, 10, '2026-01-01', '-infinity', 3, '2026-01-01') AS ready,
       tb_ready_at(10, 2, 10, '2026-01-01', '2026-01-02', 3, '2026-01-01') AS paused,
       tb_ready_at(10, 2, 10, '2026-01-01', '-infinity', 3, '2026-01-03') AS already;

-- nonsense in the pure helpers gives infinity, never an undefined cast
SELECT tb_full_at(1, -1, 1e300, now()) - now() AS negative_rate,
       tb_full_at(1, 1e-300, 1e300, now()) - now() AS tiny_rate,
       tb_full_at(1, 1, 0.5, '294276-12-31 23:59:59+00') AS at_the_end,
       tb_ready_at(1, 1, 1, '-infinity', 'infinity', 1, 'infinity') AS paused_for_ever;

-- a pause that would end past the last timestamptz is a pause for ever:
-- stored as infinity, so pg_dump's output restores (test/t/002 restores it)
SELECT tb_create('p', 1, 1);
SELECT tb_pause('p', ('294276-12-31 23:59:59+00'::timestamptz - now()) + interval '3 days');
SELECT paused_until FROM tb_buckets WHERE name = 'p';
SELECT paused_until::text::timestamptz = paused_until AS reads_back FROM tb_buckets WHERE name = 'p';
-- and its wait is capped at 1000 years, as interval and as seconds
SELECT granted, retry_after, retry_after_seconds = 1000 * 365 * 86400.0 AS capped FROM tb_try('p');
SELECT tb_pause('p', interval '100000000 years');
SELECT paused_until FROM tb_buckets WHERE name = 'p';
SELECT tb_acquire_wait('p', 1, interval '170000000 years') IS NOT NULL AS deadline_in_range
FROM (SELECT tb_reset('p')) AS r;

-- debt that float8 cannot hold is an error, not a broken row
SELECT tb_create('d', 1, 1);
SELECT tb_settle('d', 0, 1e308);
SELECT tb_settle('d', 0, 1e308);
SELECT debt > 1e307 AS deep_in_debt FROM tb_status WHERE name = 'd';

-- a call names at most a million buckets, and says so
SELECT tb_acquire_all(array_fill('x'::text, ARRAY[1000001]));

DROP EXTENSION tokenbucket;
