/* tokenbucket_shard--1.0--1.1.sql: tb_routed_try and tb_routed_peek end
 * with tokenbucket 1.9's denied_by; tb_routed_refund and tb_routed_settle
 * with 1.9's reserved_at. */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION tokenbucket_shard UPDATE TO '1.1'" to load this file. \quit

DO $$
BEGIN
	IF pg_catalog.to_regprocedure('@extschema@.tb_set_parent(text, text)') IS NULL THEN
		RAISE EXCEPTION 'tokenbucket_shard 1.1 needs tokenbucket 1.9 or later in its schema'
			USING ERRCODE = 'invalid_schema_name',
				  DETAIL = 'No function @extschema@.tb_set_parent(text, text) exists: tokenbucket''s tb_try has no denied_by before 1.9.',
				  HINT = 'Update tokenbucket first: ALTER EXTENSION tokenbucket UPDATE;';
	END IF;
END
$$;

--
-- tb_try and tb_peek (both forms) with the level that refused, denied_by,
-- which tokenbucket_proxy 1.5 takes by name (a shard still on 1.0 gives
-- it NULL).  Their result changes, so they are made again; they are
-- PUBLIC's, as before.  tokenbucket_proxy 1.4 and earlier take every
-- column of these and refuse one more ("Got too many fields"): update the
-- proxy first.
--
DROP FUNCTION @extschema@.tb_routed_try(text, float8);
DROP FUNCTION @extschema@.tb_routed_try(text, float8, float8);
DROP FUNCTION @extschema@.tb_routed_peek(text, float8);
DROP FUNCTION @extschema@.tb_routed_peek(text, float8, float8);

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

-- tokenbucket 1.9's forms told when the reservation was made, which
-- tokenbucket_proxy 1.5 calls (a shard still on 1.0 is given the forms
-- without it): CALLED ON NULL INPUT, as tokenbucket's are (a NULL
-- reserved_at is not known: to the bucket alone); PUBLIC's, as the others
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
