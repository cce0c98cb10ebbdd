--
-- bad_input: a table of bad calls, each checked for its SQLSTATE and for
-- leaving every bucket as it was.  A NULL where a value is needed is 22004
-- (sql/nulls.sql tries every argument of every function); the pure
-- helpers are STRICT, NULL in and NULL out (shown as 00000 here).
--
BEGIN;

DO $$
BEGIN
	PERFORM tb_create('b', 5, 1, '1 hour');
	PERFORM tb_create('full', 1, 1, '1 hour');
	PERFORM tb_acquire('b', 3);
END $$;
CREATE TEMP TABLE snapshot AS SELECT * FROM tb_buckets;

-- outcome(call): the SQLSTATE it raised (00000 if none), then whether the
-- buckets are exactly as in the snapshot
CREATE FUNCTION pg_temp.outcome(call text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	code text := '00000';
	same boolean;
BEGIN
	-- the outer block always ends in an error, so whatever the call did is
	-- rolled back before the next case runs
	BEGIN
		BEGIN
			EXECUTE call;
		EXCEPTION WHEN others THEN
			code := SQLSTATE;
		END;
		SELECT NOT EXISTS (SELECT * FROM tb_buckets EXCEPT SELECT * FROM snapshot)
		   AND NOT EXISTS (SELECT * FROM snapshot EXCEPT SELECT * FROM tb_buckets) INTO same;
		RAISE SQLSTATE 'TBUND';
	EXCEPTION WHEN SQLSTATE 'TBUND' THEN
		NULL;
	END;
	RETURN code || CASE WHEN same THEN ', unchanged' ELSE ', CHANGED' END;
END $$;

CREATE TEMP TABLE cases (call text, code text);

-- names: unknown, empty, long, a template's, odd characters, SQL fragments.
-- An empty or too long name is 22023; so is a template's name where a
-- bucket is meant (tb_alter may change a template)
INSERT INTO cases
SELECT format('SELECT %s(%L%s)', f, n, a),
       CASE WHEN n = '' OR octet_length(n) > 1024 OR (n LIKE '%*' AND f <> 'tb_alter')
            THEN '22023' ELSE '42704' END
FROM unnest(ARRAY['tb_acquire', 'tb_try', 'tb_reset', 'tb_alter']) AS f,
     unnest(ARRAY['', ' ', 'B', 'b ', repeat('x', 10000), 'b''; DROP TABLE tb_buckets; --',
                  E'b\\0', E'b\\x00', 'b\', '"b"', 'ключ', '*', '%', 'b_', 'NULL']) AS n,
     LATERAL (SELECT CASE f WHEN 'tb_alter' THEN ', 1' ELSE '' END AS a) AS x;
INSERT INTO cases
SELECT format('SELECT tb_acquire(%L, 1)', n),
       CASE WHEN n = '' OR octet_length(n) > 1024 THEN '22023' ELSE '42704' END
FROM unnest(ARRAY['', 'B', repeat('b', 3000), 'b''--', E'\\']) AS n;
INSERT INTO cases
SELECT format('SELECT tb_create(%L, 1, 1)', n), '22023'
FROM unnest(ARRAY['', repeat('x', 1025), repeat('я', 513), repeat('ab', 100000)]) AS n;
INSERT INTO cases
SELECT format('SELECT tb_create(%L, 1, 1)', n), '23505' FROM unnest(ARRAY['b', 'full']) AS n;
INSERT INTO cases
SELECT format('SELECT tb_drop(%L)', n), '00000'
FROM unnest(ARRAY['', 'B', repeat('x', 10000), 'b''; --']) AS n;

-- costs: negative, NaN, infinite, above capacity
INSERT INTO cases
SELECT format('SELECT %s(%L, %L::float8)', f, b, c), '22023'
FROM unnest(ARRAY['tb_acquire', 'tb_try']) AS f,
     unnest(ARRAY['b', 'full']) AS b,
     unnest(ARRAY['-1', '-1e-308', '-4.9e-324', '-1e308', 'NaN', 'Infinity', '-Infinity',
                  '5.000001', '1e308', '6']) AS c
WHERE NOT (b = 'b' AND c IN ('5.000001', '6'))
   OR (b = 'b' AND c IN ('5.000001', '6'));

-- a bad cost is reported before an unknown name
INSERT INTO cases
SELECT format('SELECT %s(%L, %L::float8)', f, 'nope', c), '22023'
FROM unnest(ARRAY['tb_acquire', 'tb_try']) AS f,
     unnest(ARRAY['-1', '-1e-308', 'NaN', 'Infinity', '-Infinity']) AS c;

-- numbers and intervals that do not even parse
INSERT INTO cases VALUES
	('SELECT tb_acquire(''b'', ''1e309'')', '22003'),
	('SELECT tb_acquire(''b'', ''-1e309'')', '22003'),
	('SELECT tb_acquire(''b'', ''abc'')', '22P02'),
	('SELECT tb_acquire(''b'', '''')', '22P02'),
	('SELECT tb_try(''b'', ''1,5'')', '22P02'),
	('SELECT tb_create(''n'', ''1e999'', 1)', '22003'),
	('SELECT tb_create(''n'', 1, ''1e'')', '22P02'),
	('SELECT tb_create(''n'', 1, 1, ''1 fortnight'')', '22007'),
	('SELECT tb_create(''n'', 1, 1, ''abc'')', '22007'),
	('SELECT tb_create(''n'', 1, 1, ''99999999999 years'')', '22015'),
	('SELECT tb_alter(''b'', refill => 1, per => '''')', '22007');

-- capacity and refill: zero, negative, NaN, infinite, denormal products
INSERT INTO cases
SELECT format('SELECT tb_create(''new'', %L::float8, %L::float8, %L::interval)', c, r, p), '22023'
FROM (VALUES
	('0', '1', '1 s'), ('-0', '1', '1 s'), ('-1', '1', '1 s'), ('NaN', '1', '1 s'),
	('Infinity', '1', '1 s'), ('-Infinity', '1', '1 s'), ('-1e308', '1', '1 s'),
	('1', '0', '1 s'), ('1', '-0', '1 s'), ('1', '-5', '1 s'), ('1', 'NaN', '1 s'),
	('1', 'Infinity', '1 s'), ('1', '-Infinity', '1 s'),
	('1', '1', '0'), ('1', '1', '-1 s'), ('1', '1', '-1 year'), ('1', '1', '1 mon -30 days'),
	('1', '1', '-1 microsecond'), ('1', '1', '1 day -86400 s'),
	('1', '4.9e-324', '1000 years'), ('1', '1e-310', '1000000 years'),
	('1', '1e-300', '1000000 years'), ('1', '1e308', '1 microsecond'), ('1', '1e308', '0.5 s')
) AS v(c, r, p);
INSERT INTO cases
SELECT format('SELECT tb_alter(''b'', %s)', a), '22023'
FROM unnest(ARRAY['0', '-1', '''NaN''', '''Infinity''', 'refill => 0', 'refill => -1',
                  'refill => ''NaN''', 'refill => ''-Infinity''', 'per => ''1 minute''',
                  'refill => 1, per => ''0''', 'refill => 1, per => ''-1 day''',
                  'NULL, NULL, ''1 s''', 'refill => 1e308, per => ''1 microsecond''']) AS a;

-- NULLs: 22004, and nothing touched; tb_alter keeps what is NULL; the
-- pure helpers give NULL
INSERT INTO cases
SELECT call, CASE WHEN call ~ '^SELECT tb_(take|tokens|full_at)\(' OR call LIKE '%''b'', NULL, NULL, NULL)'
                  THEN '00000' ELSE '22004' END
FROM unnest(ARRAY[
	'SELECT tb_acquire(NULL)', 'SELECT tb_acquire(NULL, 1)', 'SELECT tb_acquire(''b'', NULL)',
	'SELECT tb_try(NULL)', 'SELECT tb_try(''b'', NULL)', 'SELECT tb_try(NULL, NULL)',
	'SELECT tb_create(NULL, 1, 1)', 'SELECT tb_create(''n'', NULL, 1)',
	'SELECT tb_create(''n'', 1, NULL)', 'SELECT tb_create(''n'', 1, 1, NULL)',
	'SELECT tb_reset(NULL)', 'SELECT tb_drop(NULL)', 'SELECT tb_alter(NULL)',
	'SELECT tb_alter(NULL, 1, 1, ''1 s'')', 'SELECT tb_alter(''b'', NULL, NULL, NULL)',
	'SELECT tb_take(NULL, 1, 0, now(), 1, now())', 'SELECT tb_tokens(1, 1, 0, NULL, now())',
	'SELECT tb_full_at(1, NULL, 0, now())']) AS call;

-- the table refuses what the functions refuse
INSERT INTO cases
SELECT format('INSERT INTO tb_buckets (name, capacity, refill_rate, deficit, updated_at) VALUES (%s)', v), '23514'
FROM unnest(ARRAY[
	$$'', 1, 1, 0, now()$$, $$repeat('x', 1025), 1, 1, 0, now()$$,
	$$'n', 0, 1, 0, now()$$, $$'n', 'NaN', 1, 0, now()$$, $$'n', '-Infinity', 1, 0, now()$$,
	$$'n', 1, 0, 0, now()$$, $$'n', 1, 'Infinity', 0, now()$$, $$'n', 1, 'NaN', 0, now()$$,
	$$'n', 1, 1, -1, now()$$, $$'n', 1, 1, 'NaN', now()$$, $$'n', 1, 1, 'Infinity', now()$$,
	$$'n', 1, 1, 0, 'infinity'$$, $$'n', 1, 1, 0, '-infinity'$$]) AS v;
INSERT INTO cases VALUES
	('INSERT INTO tb_buckets (name, capacity, refill_rate) VALUES (NULL, 1, 1)', '23502'),
	('INSERT INTO tb_buckets (name, capacity, refill_rate) VALUES (''n'', NULL, 1)', '23502'),
	('INSERT INTO tb_buckets (name, capacity, refill_rate) VALUES (''b'', 1, 1)', '23505'),
	('UPDATE tb_buckets SET capacity = -capacity', '23514'),
	('UPDATE tb_buckets SET deficit = NULL', '23502');

-- 1.1: waiting, several buckets, refunds, settlement, sync, pause, purge
INSERT INTO cases
SELECT format('SELECT tb_acquire_wait(''b'', %s)', a), '22023'
FROM unnest(ARRAY['-1', '''NaN''', '''Infinity''', '6', '1e308', '1, ''-1 s''',
                  '1, ''-1 day''', '0, ''-1 microsecond''']) AS a;
INSERT INTO cases
SELECT format('SELECT %s(%s)', f, a), code
FROM unnest(ARRAY['tb_acquire_all', 'tb_acquire_all_wait', 'tb_try_all']) AS f,
     (VALUES ('''{}''', '22023'), ('''{b,NULL}''', '22023'), ('''{b,full}'', ''{1}''', '22023'),
             ('''{b,full}'', ''{1,2,3}''', '22023'), ('''{b,b}''', '22023'),
             ('''{b,full}'', ''{1,NULL}''', '22023'), ('''{b,full}'', ''{-1,1}''', '22023'),
             ('''{b,full}'', ''{1,NaN}''', '22023'), ('''{b,full}'', ''{Infinity,1}''', '22023'),
             ('''{b,full}'', ''{1,2}''', '22023'), ('''{b,nope}''', '42704'),
             ('''{nope}''', '42704'), ('''{"",b}''', '22023'), (quote_literal(ARRAY['b', repeat('x', 5000)]), '22023'),
             ('''{b,tpl*}''', '22023'),
             ('NULL', '22004'), ('NULL, ''{1}''', '22004')) AS c(a, code)
WHERE NOT (f = 'tb_acquire_all_wait' AND a = 'NULL, ''{1}''');
INSERT INTO cases
SELECT format('SELECT tb_acquire_all_wait(''{b,full}'', ''{1,1}'', %L)', t), '22023'
FROM unnest(ARRAY['-1 s', '-1 day', '-1 microsecond']) AS t;
INSERT INTO cases
SELECT format('SELECT %s', call), code FROM (VALUES
	('tb_refund(''b'', -1)', '22023'), ('tb_refund(''b'', ''NaN'')', '22023'),
	('tb_refund(''b'', ''Infinity'')', '22023'), ('tb_refund(''nope'', 1)', '42704'),
	('tb_settle(''b'', -1, 1)', '22023'), ('tb_settle(''b'', 1, -1)', '22023'),
	('tb_settle(''b'', ''NaN'', 1)', '22023'), ('tb_settle(''b'', 1, ''Infinity'')', '22023'),
	('tb_settle(''nope'', 1, 1)', '42704'),
	('tb_sync(''b'', -1)', '22023'), ('tb_sync(''b'', ''NaN'')', '22023'),
	('tb_sync(''b'', ''-Infinity'')', '22023'), ('tb_sync(''nope'', 1)', '42704'),
	('tb_pause(''nope'', interval ''1 minute'')', '42704'),
	('tb_pause_until(''nope'', now() + interval ''1 minute'')', '42704'),
	('tb_pause(''nope'', ''1 minute'')', '42704'),
	('tb_pause(''nope'', interval ''-1 minute'')', '42704'),
	('tb_pause(''b'', interval ''-1 minute'')', '00000'),
	('tb_pause_until(''b'', ''-infinity'')', '00000'),
	('tb_pause(''b'', ''-infinity''::timestamptz)', '42883'),
	('tb_settle(''b'', 0, 1e308), tb_settle(''b'', 0, 1e308)', '22003'),
	('tb_acquire(''b'', 1e-10)', '22023'), ('tb_try(''b'', 4.9e-324)', '22023'),
	('tb_peek(''b'', 1e-300)', '22023'), ('tb_peek(''b'', 6)', '22023'),
	('tb_peek(''nope'')', '42704'), ('tb_peek(''tpl*'')', '22023'),
	('tb_acquire_all_wait(ARRAY(SELECT ''k'' || g FROM generate_series(1, 100) AS g))', '54000'),
	('tb_pause(NULL, interval ''1 minute'')', '22004'),
	('tb_pause(''b'', NULL::interval)', '22004'),
	('tb_purge(''-1 s'')', '22023'), ('tb_purge(''-1 day'')', '22023'),
	('tb_purge(''1 hour'')', '00000'), ('tb_purge(NULL)', '22004'),
	('tb_refund(NULL, 1)', '22004'), ('tb_settle(''b'', NULL, 1)', '22004'),
	('tb_sync(''b'', NULL)', '22004'), ('tb_acquire_wait(NULL)', '22004'),
	('tb_acquire_wait(''b'', NULL)', '22004')
) AS v(call, code);

SELECT plan((SELECT count(*)::int FROM cases) + 1);
SELECT ok((SELECT count(*) >= 200 FROM cases), 'at least 200 bad calls');
SELECT is(pg_temp.outcome(call), code || ', unchanged', left(call, 120)) FROM cases;

SELECT * FROM finish();
ROLLBACK;
