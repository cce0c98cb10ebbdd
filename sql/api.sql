--
-- api: every function and the view, on buckets whose refill is so slow
-- (a token an hour) that the clock cannot change what this file prints.
--
CREATE EXTENSION tokenbucket;

-- tb_create: a full bucket; refill every "per" becomes tokens per second
SELECT tb_create('api', 3, 1, '1 hour');
SELECT tb_create('per_second', 5, 0.0002);
SELECT name, capacity, refill_rate * 3600 AS per_hour, deficit
FROM tb_buckets ORDER BY name;

-- tb_acquire takes one token, or cost tokens, while there are enough
SELECT tb_acquire('api');
SELECT tb_acquire('api', 2);
SELECT tb_acquire('api');
-- fractional costs are exact: 0.5 + 0.25 + 0.25 = 1
SELECT tb_acquire('per_second', 4);
SELECT tb_acquire('per_second', 0.5), tb_acquire('per_second', 0.25),
       tb_acquire('per_second', 0.25);
-- a zero cost is granted while the bucket is not in debt
SELECT tb_acquire('api', 0);

-- tb_try: the decision and what a 429 answer needs
SELECT tb_reset('api');
SELECT granted, remaining, retry_after, reset_after > '59 min' AS refilling
FROM tb_try('api', 2);
SELECT granted, round(remaining::numeric, 2) AS remaining, retry_after,
       reset_after > '2 hours 59 min' AS refilling
FROM tb_try('api');
SELECT granted, remaining < 0.01 AS empty,
       retry_after BETWEEN '59 min 59 s' AND '1 hour' AS retry_in_an_hour,
       reset_after BETWEEN '2 hours 59 min' AND '3 hours' AS full_in_three_hours
FROM tb_try('api');
-- retry_after grows with the cost asked for
SELECT retry_after BETWEEN '2 hours 59 min' AND '3 hours' AS three_hours
FROM tb_try('api', 3);

-- tb_status: settings, tokens now, when full
SELECT name, capacity, round(tokens::numeric, 2) AS tokens,
       full_at > clock_timestamp() AS refilling
FROM tb_status ORDER BY name;

-- tb_reset: back to full
SELECT tb_reset('api');
SELECT tokens, full_at <= clock_timestamp() AS full FROM tb_status WHERE name = 'api';

-- tb_alter: keeps the tokens held, capped at the new capacity
SELECT tb_acquire('api', 2);
SELECT tb_alter('api', capacity => 10);
SELECT capacity, round(tokens::numeric, 2) AS tokens FROM tb_status WHERE name = 'api';
SELECT tb_alter('api', capacity => 0.5);
SELECT capacity, round(tokens::numeric, 2) AS tokens FROM tb_status WHERE name = 'api';
-- refill alone is per second; with per, per that interval; NULLs keep
SELECT tb_alter('api', 3, refill => 7);
SELECT capacity, refill_rate FROM tb_buckets WHERE name = 'api';
SELECT tb_alter('api', refill => 120, per => '1 minute');
SELECT capacity, refill_rate FROM tb_buckets WHERE name = 'api';
SELECT tb_alter('api');
SELECT capacity, refill_rate FROM tb_buckets WHERE name = 'api';
SELECT tb_alter('api', refill => 1, per => '1 hour');
SELECT tb_reset('api');

-- tb_drop: true once, then false
SELECT tb_drop('per_second');
SELECT tb_drop('per_second');
SELECT count(*) FROM tb_buckets WHERE name = 'per_second';

-- a NULL where a value is needed is an error naming the argument (22004),
-- and touches nothing (every argument of every function: sql/nulls.sql)
SELECT tb_acquire(NULL);
SELECT tb_acquire('api', NULL);
SELECT * FROM tb_try(NULL);
SELECT tb_drop(NULL);
SELECT tb_create('x', NULL, 1);
SELECT tb_create('x', 1, 1, NULL);
SELECT tb_reset(NULL);
SELECT tb_alter(NULL, 1);
SELECT count(*) FROM tb_buckets WHERE name = 'x';

-- a bucket made with plain SQL is full and works at once
INSERT INTO tb_buckets (name, capacity, refill_rate) VALUES ('by_hand', 10, 2);
SELECT tb_acquire('by_hand', 10), tb_acquire('by_hand', 10);

-- names are exact text: case, spaces, quotes and other scripts all differ
SELECT tb_create(n, 1, 1, '1 hour')
FROM unnest(ARRAY['Api', ' api', 'a''pi', 'ключ', 'a\b']) AS n;
SELECT tb_acquire(n) FROM unnest(ARRAY['Api', ' api', 'a''pi', 'ключ', 'a\b']) AS n;
SELECT round(tokens::numeric, 2) AS tokens FROM tb_status WHERE name = 'api';

-- a grant is one row version; a denial writes nothing and takes no xid
SELECT tb_create('writes', 2, 1, '1 hour');
CREATE TEMP VIEW updates AS
	SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = 'tb_buckets';
BEGIN;
SELECT n_tup_upd AS before FROM updates \gset
SELECT tb_acquire('writes'), tb_acquire('writes');
SELECT tb_acquire('writes'), tb_acquire('writes'), (tb_try('writes')).granted;
SELECT n_tup_upd - :before AS row_versions FROM updates;
COMMIT;
BEGIN;
SELECT n_tup_upd AS before FROM updates \gset
SELECT tb_acquire('writes'), tb_acquire('writes', 2), (tb_try('writes')).granted;
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid,
       n_tup_upd - :before AS row_versions FROM updates;
COMMIT;

-- a grant rolled back is given back
SELECT tb_reset('writes');
BEGIN;
SELECT tb_acquire('writes', 2);
SELECT (tb_try('writes')).granted;
ROLLBACK;
SELECT tb_acquire('writes', 2);

-- savepoints: only the rolled-back part is given back
SELECT tb_reset('writes');
BEGIN;
SELECT tb_acquire('writes');
SAVEPOINT s;
SELECT tb_acquire('writes');
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT round(tokens::numeric, 2) AS tokens FROM tb_status WHERE name = 'writes';

-- the pure helpers agree with the decisions above
SELECT tb_take(3, 1, 0, '2026-01-01', 2, '2026-01-01') AS deficit_after_two,
       tb_take(3, 1, 2, '2026-01-01', 2, '2026-01-01') IS NULL AS denied,
       tb_take(3, 1, 2, '2026-01-01', 2, '2026-01-01 00:00:01') AS after_a_second,
       tb_tokens(3, 1, 3, '2026-01-01', '2026-01-01 00:00:01.5') AS tokens,
       tb_full_at(3, 1, 3, '2026-01-01') AS full_at;

-- pg_dump keeps the buckets: the table is the extension's configuration
SELECT extconfig::regclass[], extcondition FROM pg_extension WHERE extname = 'tokenbucket';

-- DROP EXTENSION removes everything it made
DROP EXTENSION tokenbucket;
SELECT count(*) FROM pg_proc WHERE proname LIKE 'tb\_%';
SELECT to_regclass('tb_buckets'), to_regclass('tb_status');

-- created again in another schema within the same session, the functions
-- find their new table (the kept plans follow the schema)
CREATE SCHEMA limits;
CREATE EXTENSION tokenbucket SCHEMA limits;
SELECT limits.tb_create('moved', 1, 1, '1 hour');
SELECT limits.tb_acquire('moved'), limits.tb_acquire('moved');
SELECT name, deficit FROM limits.tb_buckets;
DROP SCHEMA limits CASCADE;
