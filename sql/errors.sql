--
-- errors: every user error, its SQLSTATE and wording, and that it changes
-- nothing.  catch() runs a statement and returns the error it raised.
--
CREATE EXTENSION tokenbucket;
SELECT tb_create('e', 2, 1, '1 hour');
CREATE TEMP TABLE before AS SELECT * FROM tb_buckets;

\i sql/include/catch.sql

\pset format unaligned
\pset fieldsep ' | '
\pset footer off

-- 42704: unknown bucket, with a hint naming tb_create
SELECT call, (pg_temp.catch(call)).* FROM (VALUES
	($$SELECT tb_acquire('nope')$$),
	($$SELECT tb_acquire('nope', 1)$$),
	($$SELECT tb_try('nope')$$),
	($$SELECT tb_alter('nope', 1)$$),
	($$SELECT tb_reset('nope')$$),
	($$SELECT tb_acquire('')$$),
	($$SELECT tb_acquire('E')$$)
) AS c(call);

-- 22023: a cost that is negative, NaN or infinite, or above capacity
SELECT call, (pg_temp.catch(call)).* FROM (VALUES
	($$SELECT tb_acquire('e', -1)$$),
	($$SELECT tb_acquire('e', -1e-300)$$),
	($$SELECT tb_acquire('e', 'NaN')$$),
	($$SELECT tb_acquire('e', 'Infinity')$$),
	($$SELECT tb_try('e', '-Infinity')$$),
	($$SELECT tb_acquire('e', 2.5)$$),
	($$SELECT tb_try('e', 3)$$)
) AS c(call);

-- 22023: capacity or refill zero, negative, NaN or infinite; per not
-- above zero; a rate that is not representable; an empty name
SELECT call, (pg_temp.catch(call)).* FROM (VALUES
	($$SELECT tb_create('c', 0, 1)$$),
	($$SELECT tb_create('c', -1, 1)$$),
	($$SELECT tb_create('c', 'NaN', 1)$$),
	($$SELECT tb_create('c', 'Infinity', 1)$$),
	($$SELECT tb_create('c', 1, 0)$$),
	($$SELECT tb_create('c', 1, -2)$$),
	($$SELECT tb_create('c', 1, 'NaN')$$),
	($$SELECT tb_create('c', 1, '-Infinity')$$),
	($$SELECT tb_create('c', 1, 1, '0 seconds')$$),
	($$SELECT tb_create('c', 1, 1, '-1 minute')$$),
	($$SELECT tb_create('c', 1, 1, '1 day -24 hours')$$),
	($$SELECT tb_create('c', 1, 1e-320, '1000000 years')$$),
	($$SELECT tb_create('c', 1, 1e308, '1 microsecond')$$),
	($$SELECT tb_create('', 1, 1)$$),
	($$SELECT tb_create(repeat('x', 1025), 1, 1)$$),
	($$SELECT tb_create(repeat('é', 513), 1, 1)$$),
	($$SELECT tb_alter('e', capacity => 0)$$),
	($$SELECT tb_alter('e', capacity => 'NaN')$$),
	($$SELECT tb_alter('e', refill => -1)$$),
	($$SELECT tb_alter('e', refill => 1, per => '0 s')$$),
	($$SELECT tb_alter('e', per => '1 minute')$$)
) AS c(call);

-- 22023 in the 1.1 functions: arrays, timeouts, tokens, idle times
SELECT call, (pg_temp.catch(call)).* FROM (VALUES
	($$SELECT tb_acquire_all('{}')$$),
	($$SELECT tb_acquire_all('{e,NULL}')$$),
	($$SELECT tb_try_all('{e}', '{1,2}')$$),
	($$SELECT tb_acquire_all_wait('{e,e}', '{1,1}', '1 s')$$),
	($$SELECT tb_acquire_all('{e}', '{NULL}')$$),
	($$SELECT tb_acquire_all('{e}', '{-2}')$$),
	($$SELECT tb_acquire_all('{e}', '{3}')$$),
	($$SELECT tb_acquire_wait('e', 1, '-1 s')$$),
	($$SELECT tb_acquire_wait('e', 3)$$),
	($$SELECT tb_refund('e', -1)$$),
	($$SELECT tb_settle('e', 1, 'NaN')$$),
	($$SELECT tb_sync('e', -5)$$),
	($$SELECT tb_purge('-1 minute')$$),
	($$SELECT tb_pause('nope', interval '1 s')$$)
) AS c(call);

-- 23505: tb_create of an existing name
SELECT call, (pg_temp.catch(call)).* FROM (VALUES
	($$SELECT tb_create('e', 5, 5)$$)
) AS c(call);

-- the table itself rejects bad configuration (23514) and duplicates (23505)
SELECT call, (pg_temp.catch(call)).code FROM (VALUES
	($$INSERT INTO tb_buckets (name, capacity, refill_rate) VALUES ('', 1, 1)$$),
	($$INSERT INTO tb_buckets (name, capacity, refill_rate) VALUES (repeat('x', 1025), 1, 1)$$),
	($$INSERT INTO tb_buckets (name, capacity, refill_rate) VALUES ('t', 0, 1)$$),
	($$INSERT INTO tb_buckets (name, capacity, refill_rate) VALUES ('t', 'NaN', 1)$$),
	($$INSERT INTO tb_buckets (name, capacity, refill_rate) VALUES ('t', 'Infinity', 1)$$),
	($$INSERT INTO tb_buckets (name, capacity, refill_rate) VALUES ('t', 1, -1)$$),
	($$INSERT INTO tb_buckets (name, capacity, refill_rate) VALUES ('t', 1, 'NaN')$$),
	($$INSERT INTO tb_buckets (name, capacity, refill_rate, deficit) VALUES ('t', 1, 1, -1)$$),
	($$INSERT INTO tb_buckets (name, capacity, refill_rate, deficit) VALUES ('t', 1, 1, 'NaN')$$),
	($$INSERT INTO tb_buckets (name, capacity, refill_rate, updated_at) VALUES ('t', 1, 1, 'infinity')$$),
	($$INSERT INTO tb_buckets (name, capacity, refill_rate) VALUES ('e', 1, 1)$$),
	($$UPDATE tb_buckets SET refill_rate = 0 WHERE name = 'e'$$)
) AS c(call);

\pset format aligned
-- none of the above changed a bucket
SELECT NOT EXISTS (SELECT * FROM tb_buckets EXCEPT SELECT * FROM before)
   AND NOT EXISTS (SELECT * FROM before EXCEPT SELECT * FROM tb_buckets) AS unchanged;
DROP EXTENSION tokenbucket;

-- 55000: the extension's schema dropped under an open cursor gives a clean
-- error naming the extension, not an internal one
CREATE SCHEMA regress_lim;
CREATE EXTENSION tokenbucket SCHEMA regress_lim;
SELECT regress_lim.tb_create('x', 10, 1);
BEGIN;
DECLARE c CURSOR FOR SELECT regress_lim.tb_acquire('x') FROM generate_series(1, 3);
FETCH 1 FROM c;
DROP SCHEMA regress_lim CASCADE;
FETCH 1 FROM c;
ROLLBACK;
DROP SCHEMA regress_lim CASCADE;
