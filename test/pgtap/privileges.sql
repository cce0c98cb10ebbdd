--
-- privileges: an application role with EXECUTE only, and what it cannot
-- make the owner do.  The attacker puts its own schema first in
-- search_path, with its own tb_take(), "=" operator, clock_timestamp(),
-- isfinite(), starts_with(), left(), octet_length(), LIKE operator, and a
-- table named tb_buckets, and a temporary tb_buckets too.
-- Each of its functions raises an error if it ever runs, so a call that
-- succeeds ran none of them.
--
BEGIN;
SELECT plan(48);

CREATE ROLE regress_tb_app;
CREATE ROLE regress_tb_admin;
GRANT USAGE ON SCHEMA public TO regress_tb_app, regress_tb_admin;
GRANT EXECUTE ON FUNCTION tb_create(text, float8, float8, interval, boolean),
	tb_alter(text, float8, float8, interval), tb_reset(text), tb_drop(text)
	TO regress_tb_admin;
GRANT SELECT ON tb_status TO regress_tb_admin;
-- the README's grant block for a worker that also settles and pauses
GRANT EXECUTE ON FUNCTION tb_refund(text, float8), tb_settle(text, float8, float8),
	tb_sync(text, float8), tb_pause(text, interval),
	tb_pause_until(text, timestamptz) TO regress_tb_app;

DO $$ BEGIN
	PERFORM tb_create('shared', 2, 1, '1 hour');
	PERFORM tb_create('other', 100, 1, '1 hour');
	PERFORM tb_create('key:*', 5, 1, '1 hour');
	PERFORM tb_reset('key:full');
	INSERT INTO tb_prices VALUES ('m', 'EUR', 2, 8, 0.5, '-infinity');
END $$;

-- run_as(role, sql, path): run sql as role with that search_path, and say
-- 'ok: <first value>' or the SQLSTATE it raised.  The role and path are
-- undone before returning, so pgTAP itself runs as the test's owner.
CREATE FUNCTION pg_temp.run_as(role text, sql text, path text DEFAULT 'public')
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	result text;
BEGIN
	PERFORM pg_catalog.set_config('role', role, true);
	PERFORM pg_catalog.set_config('search_path', path, true);
	EXECUTE sql INTO result;
	PERFORM pg_catalog.set_config('search_path', 'public', true);
	PERFORM pg_catalog.set_config('role', 'none', true);
	RETURN 'ok: ' || coalesce(result, '');
EXCEPTION WHEN others THEN
	RETURN SQLSTATE;
END $$;

-- the attacker's schema, first in its search_path
CREATE SCHEMA regress_evil AUTHORIZATION regress_tb_app;
CREATE FUNCTION regress_evil.pwned() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'attacker code ran as %', current_user USING ERRCODE = 'XX666';
END $$;
CREATE FUNCTION regress_evil.tb_take(float8, float8, float8, timestamptz, float8, timestamptz)
RETURNS float8 LANGUAGE sql AS 'SELECT 0 WHERE regress_evil.pwned()';
CREATE FUNCTION regress_evil.tb_take(float8, float8, float8, timestamptz, timestamptz, float8, timestamptz)
RETURNS float8 LANGUAGE sql AS 'SELECT 0 WHERE regress_evil.pwned()';
CREATE FUNCTION regress_evil.starts_with(text, text)
RETURNS boolean LANGUAGE sql AS 'SELECT regress_evil.pwned()';
CREATE FUNCTION regress_evil.left(text, int)
RETURNS text LANGUAGE sql AS 'SELECT ''x'' WHERE regress_evil.pwned()';
CREATE FUNCTION regress_evil.octet_length(text)
RETURNS int LANGUAGE sql AS 'SELECT 1 WHERE regress_evil.pwned()';
CREATE FUNCTION regress_evil.tb_tokens(float8, float8, float8, timestamptz, timestamptz)
RETURNS float8 LANGUAGE sql AS 'SELECT 0 WHERE regress_evil.pwned()';
CREATE FUNCTION regress_evil.clock_timestamp()
RETURNS timestamptz LANGUAGE sql AS 'SELECT now() WHERE regress_evil.pwned()';
CREATE FUNCTION regress_evil.isfinite(timestamptz)
RETURNS boolean LANGUAGE sql AS 'SELECT regress_evil.pwned()';
CREATE FUNCTION regress_evil.text_eq(text, text)
RETURNS boolean LANGUAGE sql AS 'SELECT regress_evil.pwned()';
CREATE OPERATOR regress_evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_evil.text_eq);
CREATE OPERATOR regress_evil.~~ (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_evil.text_eq);
CREATE TABLE regress_evil.tb_buckets (LIKE public.tb_buckets INCLUDING DEFAULTS);
INSERT INTO regress_evil.tb_buckets (name, capacity, refill_rate, deficit, updated_at)
VALUES ('shared', 1e9, 1e9, 0, clock_timestamp());
CREATE TEMP TABLE tb_buckets (LIKE public.tb_buckets);
INSERT INTO pg_temp.tb_buckets SELECT * FROM regress_evil.tb_buckets;
ALTER TABLE regress_evil.tb_buckets OWNER TO regress_tb_app;
ALTER TABLE pg_temp.tb_buckets OWNER TO regress_tb_app;
ALTER FUNCTION regress_evil.pwned() OWNER TO regress_tb_app;

-- the trap works: resolved through that search_path, it fires
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT 'a' = 'a'::text$$,
	'regress_evil, pg_catalog, public'), 'XX666', 'the attacker''s "=" fires when its path resolves it');

-- EXECUTE alone is enough to take tokens, through the attacker's path
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT tb_acquire('shared')$$,
	'regress_evil, pg_catalog, public'), 'ok: true', 'tb_acquire(name) runs none of the attacker''s code');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT tb_acquire('shared', 1)$$,
	'regress_evil, pg_catalog, public'), 'ok: true', 'tb_acquire(name, cost) takes the real bucket''s last token');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT granted FROM tb_try('shared')$$,
	'regress_evil, pg_catalog, public'), 'ok: false', 'tb_try runs none of the attacker''s code');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT tb_acquire('shared')$$,
	'pg_temp, regress_evil, pg_catalog, public'), 'ok: false', 'a temporary tb_buckets first in the path is not read');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT tb_acquire('nope')$$,
	'regress_evil, pg_catalog, public'), '42704', 'a bucket only the attacker''s table has does not exist');

-- pricing runs with the caller's rights, its every name qualified
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT tb_cost('m', 1000, 10, 100)$$,
	'regress_evil, pg_catalog, public'), 'ok: 0.00193', 'tb_cost runs none of the attacker''s code');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT currency FROM tb_price('m')$$,
	'regress_evil, pg_catalog, public'), 'ok: EUR', 'tb_price runs none of the attacker''s code');

-- and so are the 1.1 functions, and per-key buckets made from templates
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT tb_acquire_wait('other', 1, '1 s')$$,
	'regress_evil, pg_catalog, public'), 'ok: true', 'tb_acquire_wait runs none of the attacker''s code');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT tb_acquire_all('{other,key:a}', '{1,1}')$$,
	'regress_evil, pg_catalog, public'), 'ok: true', 'tb_acquire_all, making a key from a template, runs none of it');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT tb_acquire_all_wait('{other,key:b}', NULL, '1 s')$$,
	'regress_evil, pg_catalog, public'), 'ok: true', 'tb_acquire_all_wait runs none of the attacker''s code');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT bool_and(granted)::text FROM tb_try_all('{other,key:c}')$$,
	'regress_evil, pg_catalog, public'), 'ok: true', 'tb_try_all runs none of the attacker''s code');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT round(tb_refund('other', 1)::numeric)$$,
	'regress_evil, pg_catalog, public'), 'ok: 97', 'tb_refund runs none of the attacker''s code');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT tb_settle('other', 5, 1)$$,
	'regress_evil, pg_catalog, public'), 'ok: 100', 'tb_settle runs none of the attacker''s code');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT tb_sync('other', 50)$$,
	'regress_evil, pg_catalog, public'), 'ok: 50', 'tb_sync runs none of the attacker''s code');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT tb_pause('key:a', interval '1 minute')$$,
	'regress_evil, pg_catalog, public'), 'ok: ', 'tb_pause(interval) runs none of the attacker''s code');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT tb_pause_until('key:b', now() + interval '1 minute')$$,
	'regress_evil, pg_catalog, public'), 'ok: ', 'tb_pause_until runs none of the attacker''s code');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT granted::text FROM tb_peek('key:unmade')$$,
	'regress_evil, pg_catalog, public'), 'ok: true', 'tb_peek, looking at a key its template would make, runs none of it');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT tb_acquire('key:new')$$,
	'regress_evil, pg_catalog, public'), 'ok: true', 'a key made from a template on first use runs none of it');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT tb_purge('0')$$,
	'regress_evil, pg_catalog, public'), '42501', 'tb_purge is revoked from PUBLIC');
GRANT EXECUTE ON FUNCTION tb_purge(interval) TO regress_tb_admin;
SELECT is(pg_temp.run_as('regress_tb_admin', $$SELECT tb_purge('0')$$,
	'regress_evil, pg_catalog, public'), 'ok: 1', 'tb_purge runs none of the attacker''s code (it removes the full key:full)');

-- what the application role cannot do
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT count(*) FROM public.tb_buckets$$),
	'42501', 'the application role cannot read tb_buckets');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT count(*) FROM tb_status$$),
	'42501', 'the application role cannot read tb_status');
SELECT is(pg_temp.run_as('regress_tb_app', $$UPDATE public.tb_buckets SET deficit = 0 RETURNING 1$$),
	'42501', 'the application role cannot write tb_buckets');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT tb_create('mine', 1e9, 1e9)$$),
	'42501', 'tb_create is revoked from PUBLIC');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT tb_alter('shared', 1e9)$$),
	'42501', 'tb_alter is revoked from PUBLIC');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT tb_reset('shared')$$),
	'42501', 'tb_reset is revoked from PUBLIC');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT tb_drop('shared')$$),
	'42501', 'tb_drop is revoked from PUBLIC');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT tb_create('mine', 1, 1)$$,
	'regress_evil, pg_catalog, public'), '42501', 'tb_create stays revoked through the attacker''s path');

-- a role granted the admin functions uses them through the same path
SELECT is(pg_temp.run_as('regress_tb_admin', $$SELECT tb_create('made', 2, 1)$$,
	'regress_evil, pg_catalog, public'), 'ok: ', 'tb_create runs none of the attacker''s code');
SELECT is(pg_temp.run_as('regress_tb_admin', $$SELECT tb_alter('made', 5, 2, '1 minute')$$,
	'regress_evil, pg_catalog, public'), 'ok: ', 'tb_alter runs none of the attacker''s code');
SELECT is(pg_temp.run_as('regress_tb_admin', $$SELECT tb_reset('made')$$,
	'regress_evil, pg_catalog, public'), 'ok: ', 'tb_reset runs none of the attacker''s code');
SELECT is(pg_temp.run_as('regress_tb_admin', $$SELECT round(tokens)::text FROM tb_status WHERE name = 'made'$$,
	'regress_evil, pg_catalog, public'), 'ok: 5', 'tb_status runs none of the attacker''s code');
SELECT is(pg_temp.run_as('regress_tb_admin', $$SELECT tb_drop('made')$$,
	'regress_evil, pg_catalog, public'), 'ok: true', 'tb_drop runs none of the attacker''s code');
SELECT is(pg_temp.run_as('regress_tb_admin', $$SELECT count(*) FROM public.tb_buckets$$),
	'42501', 'the admin functions grant no right on the table itself');

-- the owner's data is what the calls changed, and the attacker's is not
SELECT ok((SELECT deficit > 1.99 FROM public.tb_buckets WHERE name = 'shared'),
	'the real bucket gave its two tokens');
SELECT is((SELECT count(*)::int FROM public.tb_buckets WHERE name = 'made'), 0,
	'the bucket the admin role made and dropped is gone');
SELECT is((SELECT deficit FROM regress_evil.tb_buckets), 0::float8,
	'the attacker''s table was not written');
SELECT is((SELECT deficit FROM pg_temp.tb_buckets), 0::float8,
	'the temporary table was not written');

-- what makes this hold is in C: each function switches to the owner, with
-- search_path = pg_catalog, pg_temp, around its table work only, and
-- gives the caller back its own role and settings, after an error too
SELECT is((SELECT count(*)::int FROM pg_proc
	WHERE pronamespace = 'public'::regnamespace AND proname ~ '^tb_'
	  AND (prosecdef OR proconfig IS NOT NULL)), 0,
	'no function is SECURITY DEFINER or sets a parameter: the C code does, around the table work');
CREATE FUNCTION pg_temp.calls_restore() RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_catalog.set_config('enable_seqscan', 'on', true);
	PERFORM public.tb_acquire('shared', 0), public.tb_acquire('key:u1', 0);
	BEGIN
		PERFORM public.tb_acquire('missing');
	EXCEPTION WHEN undefined_object THEN
		NULL;
	END;
	RETURN pg_catalog.concat_ws(' ', current_user, pg_catalog.current_setting('search_path'),
		pg_catalog.current_setting('enable_seqscan'));
END $$;
SELECT is(pg_temp.run_as('regress_tb_app', 'SELECT pg_temp.calls_restore()',
	'regress_evil, pg_catalog, public'), 'ok: regress_tb_app regress_evil, pg_catalog, public on',
	'after each call, a success or an error, the caller has its own role, search_path and enable_seqscan back');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT count(*) FROM tb_memory_buckets()$$), '42501',
	'tb_memory_buckets() is for those who may read tb_status');
SELECT is(pg_temp.run_as('regress_tb_app', $$SELECT count(*) FROM tb_memory_leases()$$), '42501',
	'tb_memory_leases() is for those who may read tb_leases or tb_status');
SELECT ok(has_function_privilege('regress_tb_app', 'tb_acquire(text)', 'EXECUTE'),
	'PUBLIC may call tb_acquire(name)');
SELECT ok(has_function_privilege('regress_tb_app', 'tb_acquire(text, float8)', 'EXECUTE'),
	'PUBLIC may call tb_acquire(name, cost)');
SELECT ok(has_function_privilege('regress_tb_app', 'tb_try(text, float8)', 'EXECUTE'),
	'PUBLIC may call tb_try');
SELECT ok(NOT has_table_privilege('regress_tb_app', 'public.tb_buckets', 'SELECT, INSERT, UPDATE, DELETE'),
	'PUBLIC has no right on tb_buckets');
SELECT ok(NOT has_table_privilege('regress_tb_app', 'public.tb_status', 'SELECT'),
	'PUBLIC may not read tb_status');

SELECT * FROM finish();
ROLLBACK;
