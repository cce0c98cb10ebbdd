--
-- reserve: a call with reserve => r is granted only if r x capacity tokens
-- (of a limit: r x max_in_flight slots, rounded up) are left after it; a
-- call without one may use everything.  Exactly at the boundary it is
-- granted and a hair above it is not, on table and memory buckets alike
-- (the test server preloads the library), for every function that takes a
-- reserve.  Buckets refill once in 1000 hours unless a test needs refill.
-- A cost that even a full bucket could not grant with its reserve is an
-- error, as a cost above the capacity is.  catch() runs a statement and
-- returns the error it raised.
--
CREATE EXTENSION tokenbucket;
\i sql/include/catch.sql
SELECT tb_create('t', 10, 1, '1000 hours'), tb_create('m', 10, 1, '1000 hours', memory => true);

-- a full bucket of 10 with a reserve of 0.2: 8 is the most, exactly; a
-- millionth more could never be granted
SELECT name,
       (pg_temp.catch(format('SELECT tb_acquire(%L, 8.000001, reserve => 0.2)', name))).code AS above,
       tb_acquire(name, 8, reserve => 0.2) AS boundary,
       tb_acquire(name, 0.000001, reserve => 0.2) AS one_more,
       tb_acquire(name, 0, reserve => 0.2) AS zero_cost_looks,
       tb_acquire(name, 0.1, reserve => 0.19) AS smaller_reserve,
       tb_acquire(name, 1.9) AS without_reserve_the_rest
FROM (VALUES ('t'), ('m')) AS b(name);
SELECT name, round(tokens::numeric, 4) AS tokens FROM tb_status WHERE name IN ('t', 'm') ORDER BY name;
SELECT tb_reset('t'), tb_reset('m');

-- not full: 3 taken, 5 more with the reserve, not 5.000001
SELECT name, tb_acquire(name, 3) AS three,
       tb_acquire(name, 5.000001, reserve => 0.2) AS above,
       tb_acquire(name, 5, reserve => 0.2) AS boundary,
       tb_acquire(name, 1, 0) AS reserve_zero_is_none
FROM (VALUES ('t'), ('m')) AS b(name);
SELECT tb_reset('t'), tb_reset('m');

-- boundaries written in decimals are granted as written, though float8
-- makes reserve x capacity + cost miss capacity by a last place (the first
-- three), and a millionth of the capacity above each is not (on a full
-- bucket: it never could be)
CREATE TEMP TABLE edges (name text, capacity float8, reserve float8, cost float8);
INSERT INTO edges VALUES ('e1', 3, 0.8, 0.6), ('e2', 60, 0.54, 27.6), ('e3', 10, 0.81, 1.9),
	('e4', 3, 0.1, 2.7), ('e5', 1, 0.7, 0.3), ('e6', 90000, 0.15, 76500),
	('e7', 7, 0.35, 4.55), ('e8', 1000000, 0.33, 670000);
SELECT count(tb_create(name, capacity, 1, '1000 hours')) AS table_buckets,
       count(tb_create('m' || name, capacity, 1, '1000 hours', memory => true)) AS memory_buckets
FROM edges;
SELECT e.name, b.store,
       (pg_temp.catch(format('SELECT tb_acquire(%L, %s, %s)', b.store || e.name,
                             e.cost + e.capacity * 1e-6, e.reserve))).code AS above,
       tb_acquire(b.store || e.name, e.cost, e.reserve) AS boundary
FROM edges AS e CROSS JOIN (VALUES (''), ('m')) AS b(store)
ORDER BY e.name, b.store;

-- tb_try and tb_peek: the same decision; retry_after counts to the moment
-- the call with its reserve is granted (a bucket empty until an hour from
-- now, refilling a token a second: cost 1 needs 1 s of refill alone, 3 s
-- with a reserve of 0.2)
INSERT INTO tb_buckets (name, capacity, refill_rate, deficit, updated_at)
VALUES ('r', 10, 1, 10, date_trunc('second', clock_timestamp()) + interval '1 hour');
SELECT updated_at AS empty_until FROM tb_buckets WHERE name = 'r' \gset
SELECT clock_timestamp() AS t0 \gset
SELECT granted, retry_after AS with_reserve FROM tb_try('r', 1, reserve => 0.2) \gset
SELECT clock_timestamp() AS t1 \gset
SELECT retry_after AS without_reserve FROM tb_peek('r', 1) \gset
SELECT clock_timestamp() AS t2 \gset
SELECT :'granted' AS granted,
       :'t0'::timestamptz + :'with_reserve'::interval <= :'empty_until'::timestamptz + interval '3 s'
       AND :'empty_until'::timestamptz + interval '3 s' <= :'t1'::timestamptz + :'with_reserve'::interval
           AS with_reserve_ends_at_3_s,
       :'t1'::timestamptz + :'without_reserve'::interval <= :'empty_until'::timestamptz + interval '1 s'
       AND :'empty_until'::timestamptz + interval '1 s' <= :'t2'::timestamptz + :'without_reserve'::interval
           AS without_reserve_ends_at_1_s;
-- that moment, to the microsecond: the helper with a reserve (tb_take's
-- form the acquire UPDATE runs) grants at it and not a microsecond before
SELECT tb_take(capacity, refill_rate, deficit, updated_at, paused_until, 1,
               updated_at + interval '3 s' - interval '1 us', 0.2) IS NULL AS refused_before,
       tb_take(capacity, refill_rate, deficit, updated_at, paused_until, 1,
               updated_at + interval '3 s', 0.2) AS deficit_at_boundary
FROM tb_buckets WHERE name = 'r';
-- a bucket of 10 a second: waiting exactly retry_after is enough, with the
-- reserve (the 300 ms it needs leaves a slow machine room between two
-- statements)
SELECT tb_create('fast', 10, 10), tb_acquire('fast', 10);
SELECT granted, retry_after_seconds AS wait FROM tb_try('fast', 1, 0.2) \gset
SELECT :'granted' AS granted, :wait > 0 AND :wait <= 0.3 AS at_most_300_ms, pg_sleep(:wait);
SELECT granted FROM tb_try('fast', 1, 0.2);
SELECT name, granted, round(remaining::numeric, 4) AS remaining
FROM (VALUES ('t'), ('m')) AS b(name),
     LATERAL tb_peek(name, 8, 0.2) AS p
ORDER BY name;
SELECT name, granted, round(remaining::numeric, 4) AS remaining
FROM (VALUES ('t'), ('m')) AS b(name),
     LATERAL tb_try(name, 8.5, 0) AS p
ORDER BY name;
SELECT name, granted, round(remaining::numeric, 4) AS remaining,
       retry_after_seconds > 1e6 AS long_wait
FROM (VALUES ('t'), ('m')) AS b(name),
     LATERAL tb_try(name, 1, 0.2) AS p
ORDER BY name;
SELECT tb_reset('t'), tb_reset('m');

-- several buckets, all or nothing: one short of its reserve takes nothing
-- anywhere (a table and a memory bucket; two memory buckets)
SELECT tb_create('m2', 10, 1, '1000 hours', memory => true);
SELECT tb_acquire_all('{t,m}', '{8,8.5}', reserve => 0.1) AS mixed_ok,
       tb_acquire_all('{t,m}', '{1,1}', reserve => 0.15) AS mixed_short,
       tb_acquire_all('{m,m2}', '{1,8}', reserve => 0.2) AS memory_short;
SELECT name, round(tokens::numeric, 4) AS tokens FROM tb_status WHERE name IN ('t', 'm', 'm2') ORDER BY name;
SELECT name, granted, round(remaining::numeric, 4) AS remaining, retry_after_seconds > 0 AS holds_back
FROM tb_try_all('{m2,t,m}', '{1,0.5,0.5}', reserve => 0.15);
SELECT tb_acquire_all('{t,m}', '{0.5,0}', reserve => 0.15) AS boundary,
       tb_acquire_all('{m2}', NULL, reserve => NULL) AS null_reserve_is_none;
SELECT name, round(tokens::numeric, 4) AS tokens FROM tb_status WHERE name IN ('t', 'm', 'm2') ORDER BY name;
SELECT tb_reset('t'), tb_reset('m'), tb_reset('m2');

-- a bucket made from a template on first use, in either store
SELECT tb_create('tt:*', 10, 1, '1000 hours'), tb_create('mt:*', 10, 1, '1000 hours', memory => true);
SELECT tb_acquire('tt:1', 8, reserve => 0.2) AS table_made, tb_acquire('tt:1', 0.1, reserve => 0.2) AS table_more,
       tb_acquire('mt:1', 8, reserve => 0.2) AS memory_made, tb_acquire('mt:1', 0.1, reserve => 0.2) AS memory_more;
SELECT name, round(tokens::numeric, 4) AS tokens, template FROM tb_status
WHERE template IS NOT NULL ORDER BY name;

-- limits: free slots are whole, so a reserve of 0.2 of 10 keeps 2 free and
-- one of 0.25 keeps 3 (2.5 rounded up)
SELECT tb_create_limit('slots', 10);
CREATE FUNCTION pg_temp.held(text) RETURNS bigint LANGUAGE sql AS
	$$SELECT coalesce(sum(slots), 0) FROM tb_leases WHERE name = $1$$;
SELECT tb_lease('slots', 8, reserve => 0.2) IS NOT NULL AS eight,
       tb_lease('slots', reserve => 0.2) IS NULL AS ninth_refused,
       tb_lease_wait('slots', reserve => 0.2, timeout => '10 ms') IS NULL AS waited_refused,
       tb_lease('slots', reserve => 0.1) IS NOT NULL AS smaller_reserve_ninth,
       tb_lease('slots') IS NOT NULL AS tenth_without_reserve,
       pg_temp.held('slots') AS held;
SELECT tb_release(lease) FROM tb_leases WHERE name = 'slots' ORDER BY lease;
SELECT tb_lease('slots', 7, reserve => 0.25) IS NOT NULL AS seven,
       tb_lease('slots', 1, reserve => 0.25) IS NULL AS eighth_refused,
       tb_lease('slots', 1, 'session', NULL, 0.2) IS NOT NULL AS eighth_with_0_2,
       tb_lease('slots', 1, reserve => NULL) IS NOT NULL AS null_reserve_is_none,
       pg_temp.held('slots') AS held;
SELECT tb_release(lease) FROM tb_leases WHERE name = 'slots' ORDER BY lease;
-- a transaction lease leaves the reserve too, and slots another
-- transaction holds count as held
BEGIN;
SELECT tb_lease('slots', 8, 'transaction', reserve => 0.2) IS NOT NULL AS eight_in_xact,
       tb_lease('slots', 1, 'transaction', reserve => 0.2) IS NULL AS ninth_refused;
ROLLBACK;
SELECT pg_temp.held('slots') AS held_after_rollback;
-- with buckets: the lease's reserve and each bucket's, all or nothing
SELECT tb_lease_all('slots', '{t,m}', '{8,8}', reserve => 0.2) IS NOT NULL AS all_at_boundary,
       tb_lease_all('slots', '{t}', '{0.000001}', reserve => 0.2) IS NULL AS bucket_short,
       tb_lease_all('slots', '{m2}', '{1}', 8, reserve => 0.2) IS NULL AS slots_short,
       pg_temp.held('slots') AS held;
SELECT name, round(tokens::numeric, 4) AS tokens FROM tb_status WHERE name IN ('t', 'm', 'm2') ORDER BY name;
SELECT tb_release(lease) FROM tb_leases WHERE name = 'slots' ORDER BY lease;
SELECT tb_reset('t'), tb_reset('m'), tb_reset('m2');
-- a memory limit keeps the same whole slots free
SELECT tb_create_limit('mslots', 10, memory => true);
SELECT tb_lease('mslots', 8, reserve => 0.2) IS NOT NULL AS eight,
       tb_lease('mslots', reserve => 0.2) IS NULL AS ninth_refused,
       tb_lease_wait('mslots', reserve => 0.2, timeout => '10 ms') IS NULL AS waited_refused,
       tb_lease('mslots', reserve => 0.1) IS NOT NULL AS smaller_reserve_ninth,
       tb_lease('mslots') IS NOT NULL AS tenth_without_reserve,
       pg_temp.held('mslots') AS held;
SELECT count(tb_release(lease)) FROM tb_leases WHERE name = 'mslots';
SELECT tb_lease('mslots', 7, reserve => 0.25) IS NOT NULL AS seven,
       tb_lease('mslots', 1, reserve => 0.25) IS NULL AS eighth_refused,
       tb_lease('mslots', 1, 'session', NULL, 0.2) IS NOT NULL AS eighth_with_0_2,
       pg_temp.held('mslots') AS held;
SELECT count(tb_release(lease)) FROM tb_leases WHERE name = 'mslots';
SELECT tb_lease('mslots', 9, reserve => 0.2);
SELECT tb_drop('mslots');

-- calls without a reserve read as before, untyped arguments included
SELECT tb_acquire('t'), tb_acquire('t', 2), tb_acquire('t', '1');
SELECT granted FROM tb_try('t');
SELECT granted FROM tb_try('t', '1');
SELECT tb_acquire_all(ARRAY['t', 'm']), tb_acquire_all('{t,m}', '{1,1}');
SELECT tb_lease('slots') IS NOT NULL AS one, tb_lease('slots', '2') IS NOT NULL AS two,
       pg_temp.held('slots') AS held;
SELECT tb_release(lease) FROM tb_leases WHERE name = 'slots' ORDER BY lease;
PREPARE untyped AS SELECT tb_lease($1, $2) IS NOT NULL AS leased;
EXECUTE untyped('slots', 3);
SELECT pg_temp.held('slots') AS held;
SELECT tb_release(lease) FROM tb_leases WHERE name = 'slots' ORDER BY lease;
-- a NULL reserve is none, for every function that takes one (t holds 2)
SELECT (SELECT granted FROM tb_peek('t', 1, NULL)) AS peek, tb_acquire('t', 1, NULL) AS acquire,
       (SELECT granted FROM tb_try('t', 1, NULL)) AS try;

-- errors: each with its SQLSTATE; nothing is taken
\pset format unaligned
\pset fieldsep ' | '
\pset footer off
-- 22023: a reserve that is not a share from 0 up to 1 (1 excluded)
SELECT call, (pg_temp.catch(call)).* FROM (VALUES
	($$SELECT tb_acquire('t', 1, -0.1)$$),
	($$SELECT tb_acquire('m', 1, 1)$$),
	($$SELECT tb_try('t', 1, 1.5)$$),
	($$SELECT tb_peek('m', 1, 'NaN')$$),
	($$SELECT tb_acquire_all('{t,m}', NULL, 'Infinity')$$),
	($$SELECT tb_try_all('{t}', '{1}', -1)$$),
	($$SELECT tb_lease('slots', reserve => 1)$$),
	($$SELECT tb_lease_wait('slots', reserve => -0.5)$$),
	($$SELECT tb_lease_all('slots', '{t}', reserve => 'NaN')$$)) AS c(call);
-- 22023: a cost no bucket of that capacity grants with that reserve, as
-- for a cost above its capacity: denied with a reason, never refused
-- silently (a table bucket, a memory one, one a template would make)
SELECT call, (pg_temp.catch(call)).* FROM (VALUES
	($$SELECT tb_acquire('t', 8.5, reserve => 0.2)$$),
	($$SELECT tb_acquire('t', 8.000001, reserve => 0.2)$$),
	($$SELECT tb_try('m', 8.000001, reserve => 0.2)$$),
	($$SELECT tb_peek('t', 9, reserve => 0.2)$$),
	($$SELECT tb_acquire_all('{t,m}', '{1,9}', reserve => 0.2)$$),
	($$SELECT tb_acquire('tt:2', 8.5, reserve => 0.2)$$),
	($$SELECT tb_acquire('mt:2', 8.5, reserve => 0.2)$$),
	($$SELECT tb_lease('slots', 9, reserve => 0.2)$$),
	($$SELECT tb_lease('slots', 8, reserve => 0.25)$$),
	($$SELECT tb_lease_all('slots', '{t}', '{9}', reserve => 0.2)$$)) AS c(call);
\pset format aligned
\pset footer on
SELECT name, round(tokens::numeric, 4) AS tokens, template FROM tb_status
WHERE max_in_flight IS NULL AND name NOT LIKE 'e%' AND name NOT LIKE 'me%' AND name <> 'fast'
ORDER BY name;
SELECT pg_temp.held('slots') AS held;
