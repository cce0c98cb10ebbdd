/* tokenbucket_shard--1.1.sql: what tokenbucket_proxy calls on each shard. */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION tokenbucket_shard" to load this file. \quit

--
-- tokenbucket_proxy (1.3 and later) calls these on the shards, in each
-- partition's database, instead of tokenbucket's functions: PL/Proxy drops
-- its connection to a shard after any error the shard raises, so that a
-- call for a name that does not exist would cost a new connection (tens of
-- milliseconds, a new backend on the shard).  Each tb_routed_<f> runs
-- tokenbucket's tb_<f> with the same arguments and returns its result, or
-- the error it raised as data (error: SQLSTATE, message, detail, hint); the
-- proxy raises that error again, with the same SQLSTATE.  The call runs in a
-- subtransaction, so an error leaves nothing done, as it does for a direct
-- call: tokenbucket's C function tb_routed_call for those whose result is
-- one value (the hot ones: no PL/pgSQL run per call), a PL/pgSQL EXCEPTION
-- block for the others.  A cancel (57014) is not caught: it ends the call
-- as before.  tb_routed_try and tb_routed_peek end with tokenbucket 1.9's
-- denied_by (1.1), which tokenbucket_proxy 1.5 takes by name, and
-- tb_routed_refund and tb_routed_settle have 1.9's forms with reserved_at
-- (1.1).
--
-- They run as their caller (not SECURITY DEFINER) and do no more than the
-- tokenbucket function each wraps, which checks the caller's privileges as
-- it does for a direct call (a refusal comes back as data, 42501): so
-- PUBLIC may execute them all.  They must be in tokenbucket's schema, the
-- schema the proxy's functions are in.
--
DO $$
BEGIN
	IF pg_catalog.to_regprocedure('@extschema@.tb_set_parent(text, text)') IS NULL THEN
		RAISE EXCEPTION 'tokenbucket_shard must be created in the schema of tokenbucket 1.9 or later'
			USING ERRCODE = 'invalid_schema_name',
				  DETAIL = 'No function @extschema@.tb_set_parent(text, text) exists.',
				  HINT = 'Create it in tokenbucket''s schema: CREATE EXTENSION tokenbucket_shard SCHEMA <the schema of tokenbucket>; or update tokenbucket first: ALTER EXTENSION tokenbucket UPDATE;';
	END IF;
END
$$;

--
-- The results of the C ones: named types, not OUT parameters, because
-- PL/Proxy sends every call as a new statement, which the shard parses
-- and plans each time; a named type's columns come from the type cache,
-- where a function's OUT parameters are read from pg_proc and built into
-- a row type again on every parse (about 9,600 instructions a call).
--
CREATE TYPE @extschema@.tb_routed_result_boolean AS (result boolean, error text[]);
COMMENT ON TYPE @extschema@.tb_routed_result_boolean IS
	'a routed call''s boolean result, or its error as data {SQLSTATE, message, detail, hint}';
CREATE TYPE @extschema@.tb_routed_result_float8 AS (result float8, error text[]);
COMMENT ON TYPE @extschema@.tb_routed_result_float8 IS
	'a routed call''s float8 result, or its error as data {SQLSTATE, message, detail, hint}';

CREATE FUNCTION @extschema@.tb_routed_acquire(name text)
RETURNS @extschema@.tb_routed_result_boolean
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE
AS '$libdir/tokenbucket', 'tb_routed_call';

COMMENT ON FUNCTION @extschema@.tb_routed_acquire(text) IS
	'tb_acquire(text) for tokenbucket_proxy: its result, or its error as data {SQLSTATE, message, detail, hint}';

CREATE FUNCTION @extschema@.tb_routed_acquire(name text, cost float8)
RETURNS @extschema@.tb_routed_result_boolean
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE
AS '$libdir/tokenbucket', 'tb_routed_call';

COMMENT ON FUNCTION @extschema@.tb_routed_acquire(text, float8) IS
	'tb_acquire(text, float8) for tokenbucket_proxy: its result, or its error as data {SQLSTATE, message, detail, hint}';

CREATE FUNCTION @extschema@.tb_routed_acquire(name text, cost float8, reserve float8)
RETURNS @extschema@.tb_routed_result_boolean
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE
AS '$libdir/tokenbucket', 'tb_routed_call';

COMMENT ON FUNCTION @extschema@.tb_routed_acquire(text, float8, float8) IS
	'tb_acquire(text, float8, float8) for tokenbucket_proxy: its result, or its error as data {SQLSTATE, message, detail, hint}';

CREATE FUNCTION @extschema@.tb_routed_try(name text, cost float8,
	OUT granted boolean, OUT remaining float8, OUT retry_after interval,
	OUT reset_after interval, OUT retry_after_seconds float8,
	OUT reset_after_seconds float8, OUT denied_by text, OUT error text[])
RETURNS record
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
AS $$
DECLARE
	detail text;
	hint text;
BEGIN
	SELECT t.granted, t.remaining, t.retry_after, t.reset_after, t.retry_after_seconds, t.reset_after_seconds, t.denied_by
	INTO granted, remaining, retry_after, reset_after, retry_after_seconds, reset_after_seconds, denied_by
	FROM @extschema@.tb_try(name, cost) AS t;
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
	error := ARRAY[SQLSTATE, SQLERRM, NULLIF(detail, ''), NULLIF(hint, '')];
END
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_try(text, float8) IS
	'tb_try(text, float8) for tokenbucket_proxy: its result, or its error as data {SQLSTATE, message, detail, hint}';

CREATE FUNCTION @extschema@.tb_routed_try(name text, cost float8, reserve float8,
	OUT granted boolean, OUT remaining float8, OUT retry_after interval,
	OUT reset_after interval, OUT retry_after_seconds float8,
	OUT reset_after_seconds float8, OUT denied_by text, OUT error text[])
RETURNS record
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
AS $$
DECLARE
	detail text;
	hint text;
BEGIN
	SELECT t.granted, t.remaining, t.retry_after, t.reset_after, t.retry_after_seconds, t.reset_after_seconds, t.denied_by
	INTO granted, remaining, retry_after, reset_after, retry_after_seconds, reset_after_seconds, denied_by
	FROM @extschema@.tb_try(name, cost, reserve) AS t;
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
	error := ARRAY[SQLSTATE, SQLERRM, NULLIF(detail, ''), NULLIF(hint, '')];
END
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_try(text, float8, float8) IS
	'tb_try(text, float8, float8) for tokenbucket_proxy: its result, or its error as data {SQLSTATE, message, detail, hint}';

CREATE FUNCTION @extschema@.tb_routed_peek(name text, cost float8,
	OUT granted boolean, OUT remaining float8, OUT retry_after interval,
	OUT reset_after interval, OUT retry_after_seconds float8,
	OUT reset_after_seconds float8, OUT denied_by text, OUT error text[])
RETURNS record
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
AS $$
DECLARE
	detail text;
	hint text;
BEGIN
	SELECT t.granted, t.remaining, t.retry_after, t.reset_after, t.retry_after_seconds, t.reset_after_seconds, t.denied_by
	INTO granted, remaining, retry_after, reset_after, retry_after_seconds, reset_after_seconds, denied_by
	FROM @extschema@.tb_peek(name, cost) AS t;
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
	error := ARRAY[SQLSTATE, SQLERRM, NULLIF(detail, ''), NULLIF(hint, '')];
END
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_peek(text, float8) IS
	'tb_peek(text, float8) for tokenbucket_proxy: its result, or its error as data {SQLSTATE, message, detail, hint}';

CREATE FUNCTION @extschema@.tb_routed_peek(name text, cost float8, reserve float8,
	OUT granted boolean, OUT remaining float8, OUT retry_after interval,
	OUT reset_after interval, OUT retry_after_seconds float8,
	OUT reset_after_seconds float8, OUT denied_by text, OUT error text[])
RETURNS record
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
AS $$
DECLARE
	detail text;
	hint text;
BEGIN
	SELECT t.granted, t.remaining, t.retry_after, t.reset_after, t.retry_after_seconds, t.reset_after_seconds, t.denied_by
	INTO granted, remaining, retry_after, reset_after, retry_after_seconds, reset_after_seconds, denied_by
	FROM @extschema@.tb_peek(name, cost, reserve) AS t;
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
	error := ARRAY[SQLSTATE, SQLERRM, NULLIF(detail, ''), NULLIF(hint, '')];
END
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_peek(text, float8, float8) IS
	'tb_peek(text, float8, float8) for tokenbucket_proxy: its result, or its error as data {SQLSTATE, message, detail, hint}';

CREATE FUNCTION @extschema@.tb_routed_acquire_wait(name text, cost float8, timeout interval)
RETURNS @extschema@.tb_routed_result_boolean
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS '$libdir/tokenbucket', 'tb_routed_call';

COMMENT ON FUNCTION @extschema@.tb_routed_acquire_wait(text, float8, interval) IS
	'tb_acquire_wait(text, float8, interval) for tokenbucket_proxy: its result, or its error as data {SQLSTATE, message, detail, hint}';

CREATE FUNCTION @extschema@.tb_routed_acquire_all(names text[], costs float8[])
RETURNS @extschema@.tb_routed_result_boolean
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS '$libdir/tokenbucket', 'tb_routed_call';

COMMENT ON FUNCTION @extschema@.tb_routed_acquire_all(text[], float8[]) IS
	'tb_acquire_all(text[], float8[]) for tokenbucket_proxy: its result, or its error as data {SQLSTATE, message, detail, hint}';

CREATE FUNCTION @extschema@.tb_routed_acquire_all(names text[], costs float8[], reserve float8)
RETURNS @extschema@.tb_routed_result_boolean
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS '$libdir/tokenbucket', 'tb_routed_call';

COMMENT ON FUNCTION @extschema@.tb_routed_acquire_all(text[], float8[], float8) IS
	'tb_acquire_all(text[], float8[], float8) for tokenbucket_proxy: its result, or its error as data {SQLSTATE, message, detail, hint}';

CREATE FUNCTION @extschema@.tb_routed_acquire_all_wait(names text[], costs float8[], timeout interval)
RETURNS @extschema@.tb_routed_result_boolean
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS '$libdir/tokenbucket', 'tb_routed_call';

COMMENT ON FUNCTION @extschema@.tb_routed_acquire_all_wait(text[], float8[], interval) IS
	'tb_acquire_all_wait(text[], float8[], interval) for tokenbucket_proxy: its result, or its error as data {SQLSTATE, message, detail, hint}';

CREATE FUNCTION @extschema@.tb_routed_try_all(names text[], costs float8[])
RETURNS TABLE (name text, granted boolean, remaining float8, retry_after interval,
			   reset_after interval, retry_after_seconds float8,
			   reset_after_seconds float8, error text[])
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
DECLARE
	detail text;
	hint text;
BEGIN
	RETURN QUERY
	SELECT t.name, t.granted, t.remaining, t.retry_after, t.reset_after, t.retry_after_seconds, t.reset_after_seconds, CAST(NULL AS text[])
	FROM @extschema@.tb_try_all(names, costs) AS t;
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
	RETURN QUERY
	SELECT CAST(NULL AS text), CAST(NULL AS boolean), CAST(NULL AS float8), CAST(NULL AS interval), CAST(NULL AS interval), CAST(NULL AS float8), CAST(NULL AS float8),
		   ARRAY[SQLSTATE, SQLERRM, NULLIF(detail, ''), NULLIF(hint, '')];
END
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_try_all(text[], float8[]) IS
	'tb_try_all(text[], float8[]) for tokenbucket_proxy: its result, or its error as data {SQLSTATE, message, detail, hint}';

CREATE FUNCTION @extschema@.tb_routed_try_all(names text[], costs float8[], reserve float8)
RETURNS TABLE (name text, granted boolean, remaining float8, retry_after interval,
			   reset_after interval, retry_after_seconds float8,
			   reset_after_seconds float8, error text[])
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
DECLARE
	detail text;
	hint text;
BEGIN
	RETURN QUERY
	SELECT t.name, t.granted, t.remaining, t.retry_after, t.reset_after, t.retry_after_seconds, t.reset_after_seconds, CAST(NULL AS text[])
	FROM @extschema@.tb_try_all(names, costs, reserve) AS t;
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
	RETURN QUERY
	SELECT CAST(NULL AS text), CAST(NULL AS boolean), CAST(NULL AS float8), CAST(NULL AS interval), CAST(NULL AS interval), CAST(NULL AS float8), CAST(NULL AS float8),
		   ARRAY[SQLSTATE, SQLERRM, NULLIF(detail, ''), NULLIF(hint, '')];
END
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_try_all(text[], float8[], float8) IS
	'tb_try_all(text[], float8[], float8) for tokenbucket_proxy: its result, or its error as data {SQLSTATE, message, detail, hint}';

CREATE FUNCTION @extschema@.tb_routed_refund(name text, tokens float8)
RETURNS @extschema@.tb_routed_result_float8
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE
AS '$libdir/tokenbucket', 'tb_routed_call';

COMMENT ON FUNCTION @extschema@.tb_routed_refund(text, float8) IS
	'tb_refund(text, float8) for tokenbucket_proxy: its result, or its error as data {SQLSTATE, message, detail, hint}';

CREATE FUNCTION @extschema@.tb_routed_settle(name text, reserved float8, used float8)
RETURNS @extschema@.tb_routed_result_float8
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE
AS '$libdir/tokenbucket', 'tb_routed_call';

COMMENT ON FUNCTION @extschema@.tb_routed_settle(text, float8, float8) IS
	'tb_settle(text, float8, float8) for tokenbucket_proxy: its result, or its error as data {SQLSTATE, message, detail, hint}';

-- tokenbucket 1.9's forms told when the reservation was made (1.1):
-- CALLED ON NULL INPUT, as tokenbucket's are (a NULL reserved_at is not
-- known: to the bucket alone)
CREATE FUNCTION @extschema@.tb_routed_refund(name text, tokens float8, reserved_at timestamptz)
RETURNS @extschema@.tb_routed_result_float8
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS '$libdir/tokenbucket', 'tb_routed_call';

COMMENT ON FUNCTION @extschema@.tb_routed_refund(text, float8, timestamptz) IS
	'tb_refund(text, float8, timestamptz) for tokenbucket_proxy: its result, or its error as data {SQLSTATE, message, detail, hint}';

CREATE FUNCTION @extschema@.tb_routed_settle(name text, reserved float8, used float8,
	reserved_at timestamptz)
RETURNS @extschema@.tb_routed_result_float8
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS '$libdir/tokenbucket', 'tb_routed_call';

COMMENT ON FUNCTION @extschema@.tb_routed_settle(text, float8, float8, timestamptz) IS
	'tb_settle(text, float8, float8, timestamptz) for tokenbucket_proxy: its result, or its error as data {SQLSTATE, message, detail, hint}';

CREATE FUNCTION @extschema@.tb_routed_sync(name text, remaining float8)
RETURNS @extschema@.tb_routed_result_float8
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE
AS '$libdir/tokenbucket', 'tb_routed_call';

COMMENT ON FUNCTION @extschema@.tb_routed_sync(text, float8) IS
	'tb_sync(text, float8) for tokenbucket_proxy: its result, or its error as data {SQLSTATE, message, detail, hint}';

CREATE FUNCTION @extschema@.tb_routed_pause(name text, duration interval, OUT error text[])
RETURNS text[]
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
AS $$
DECLARE
	detail text;
	hint text;
BEGIN
	PERFORM @extschema@.tb_pause(name, duration);
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
	error := ARRAY[SQLSTATE, SQLERRM, NULLIF(detail, ''), NULLIF(hint, '')];
END
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_pause(text, interval) IS
	'tb_pause(text, interval) for tokenbucket_proxy: its result, or its error as data {SQLSTATE, message, detail, hint}';

CREATE FUNCTION @extschema@.tb_routed_pause_until(name text, until timestamptz, OUT error text[])
RETURNS text[]
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
AS $$
DECLARE
	detail text;
	hint text;
BEGIN
	PERFORM @extschema@.tb_pause_until(name, until);
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
	error := ARRAY[SQLSTATE, SQLERRM, NULLIF(detail, ''), NULLIF(hint, '')];
END
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_pause_until(text, timestamptz) IS
	'tb_pause_until(text, timestamptz) for tokenbucket_proxy: its result, or its error as data {SQLSTATE, message, detail, hint}';

CREATE FUNCTION @extschema@.tb_routed_reset(name text, OUT error text[])
RETURNS text[]
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
AS $$
DECLARE
	detail text;
	hint text;
BEGIN
	PERFORM @extschema@.tb_reset(name);
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
	error := ARRAY[SQLSTATE, SQLERRM, NULLIF(detail, ''), NULLIF(hint, '')];
END
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_reset(text) IS
	'tb_reset(text) for tokenbucket_proxy: its result, or its error as data {SQLSTATE, message, detail, hint}';

--
-- Moving a partition to another server (tokenbucket_proxy's
-- tb_move_partition, which calls these through PL/Proxy's CONNECT on the
-- partition's old database and on its new one).  tb_move_rows reads every
-- row of tb_buckets as JSON, with what the proxy needs to choose the
-- partition's rows (the proxy hashes the names: PL/Proxy's mapping is
-- configured there); tb_move_write writes rows so read over the ones of
-- the same names, state included; tb_move_delete deletes by name.  They
-- read and write every bucket whatever the caller may do with it, so they
-- are kept from PUBLIC: the proxy's user mapping's role needs EXECUTE on
-- them (a superuser has it).
--
CREATE FUNCTION @extschema@.tb_move_rows(OUT name text, OUT memory boolean,
	OUT is_template boolean, OUT data text)
RETURNS SETOF record
LANGUAGE sql STABLE STRICT PARALLEL SAFE
AS $$
SELECT b.name, b.memory, pg_catalog.right(b.name, 1) OPERATOR(pg_catalog.=) '*',
	   CAST(pg_catalog.row_to_json(b) AS text)
FROM @extschema@.tb_buckets AS b
$$;

COMMENT ON FUNCTION @extschema@.tb_move_rows() IS
	'every row of tb_buckets as JSON, with its name, whether it is a memory bucket and whether it is a template: what tb_move_partition copies';

CREATE FUNCTION @extschema@.tb_move_write(rows text)
RETURNS int4
LANGUAGE sql VOLATILE STRICT PARALLEL UNSAFE
AS $$
WITH written AS (
	INSERT INTO @extschema@.tb_buckets AS b
	SELECT r.* FROM pg_catalog.json_populate_recordset(CAST(NULL AS @extschema@.tb_buckets),
													   CAST(rows AS json)) AS r
	ON CONFLICT (name) DO UPDATE
	SET capacity = excluded.capacity, refill_rate = excluded.refill_rate,
		deficit = excluded.deficit, updated_at = excluded.updated_at,
		paused_until = excluded.paused_until, template = excluded.template,
		memory = excluded.memory
	RETURNING 1
)
SELECT CAST(pg_catalog.count(*) AS int4) FROM written
$$;

COMMENT ON FUNCTION @extschema@.tb_move_write(text) IS
	'write rows of tb_buckets given as a JSON array (as tb_move_rows reads them) over those of the same names, state included; returns how many';

CREATE FUNCTION @extschema@.tb_move_delete(names text[])
RETURNS int4
LANGUAGE sql VOLATILE STRICT PARALLEL UNSAFE
AS $$
WITH deleted AS (
	DELETE FROM @extschema@.tb_buckets AS b
	WHERE b.name OPERATOR(pg_catalog.=) ANY (names)
	RETURNING 1
)
SELECT CAST(pg_catalog.count(*) AS int4) FROM deleted
$$;

COMMENT ON FUNCTION @extschema@.tb_move_delete(text[]) IS
	'delete the rows of tb_buckets with these names (what tb_move_partition moved away); returns how many';

REVOKE ALL ON FUNCTION
	@extschema@.tb_move_rows(),
	@extschema@.tb_move_write(text),
	@extschema@.tb_move_delete(text[])
FROM PUBLIC;
