/* tokenbucket_proxy--1.2--1.3.sql: errors without reconnecting; a shard that
 * does not answer, or is down, fails a call with class 08. */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION tokenbucket_proxy UPDATE TO '1.3'" to load this file. \quit

--
-- PL/Proxy drops its connection to a shard after any error the shard
-- raises (the next call opens a new one: tens of milliseconds and a new
-- backend on the shard), and reports a connection that fails as XX000.
-- So each function on one bucket (or on buckets of one shard key) is now a
-- plpgsql function, with the same signature, around a PL/Proxy function
-- tb_routed_<f> that calls tokenbucket_shard's tb_routed_<f> on the shard:
-- that one returns tokenbucket's result, or its error as data, and the
-- function here raises the error again with the shard's SQLSTATE, message,
-- detail and hint, on a connection PL/Proxy keeps.  The shards need the
-- extension tokenbucket_shard, in tokenbucket's schema.
--
-- A call that fails on its way (PL/Proxy's XX000, a session the shard
-- ended, the statement's time spent) goes to tb_routed_failed, which
-- runs it once more when it did nothing, and otherwise raises class 08:
-- 08001 when no connection was made (nothing done), 08006 when it was lost
-- or the shard did not answer, with a hint saying whether the call may
-- have been done.
--

-- raise an error returned as data: {SQLSTATE, message, detail, hint}
CREATE FUNCTION @extschema@.tb_routed_raise(error text[])
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT PARALLEL SAFE
AS $$
BEGIN
	-- RAISE refuses a NULL option, and an empty one would print as one
	IF error[3] IS NULL AND error[4] IS NULL THEN
		RAISE EXCEPTION USING ERRCODE = error[1], MESSAGE = error[2];
	ELSIF error[4] IS NULL THEN
		RAISE EXCEPTION USING ERRCODE = error[1], MESSAGE = error[2], DETAIL = error[3];
	ELSIF error[3] IS NULL THEN
		RAISE EXCEPTION USING ERRCODE = error[1], MESSAGE = error[2], HINT = error[4];
	ELSE
		RAISE EXCEPTION USING ERRCODE = error[1], MESSAGE = error[2], DETAIL = error[3],
			HINT = error[4];
	END IF;
END
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_raise(text[]) IS
	'raise the error {SQLSTATE, message, detail, hint} that a shard returned as data';

--
-- What a call on a bucket does when its PL/Proxy function failed (attempt
-- 1 or 2; kind: 'read' for tb_peek, 'wait' for the calls that wait,
-- 'write' for the others): returns when the call is to be run once more,
-- else raises.
--   * PL/Proxy could not connect (PQconnectStart, PQconnectPoll: refused,
--     the shard starting up or shutting down): 08001, the call did nothing.
--   * The call was not sent (PQsendQueryParams, PQflush), or the shard ended
--     the session before it ran it (57P01, 57P02, 57P03 from the shard: a
--     restart; the call's transaction there did not commit): run once more
--     on a new connection, then 08006.
--   * The connection was lost while the call ran (PQconsumeInput), or the
--     shard did not answer PL/Proxy's cancel within the cluster's
--     query_timeout: 08006, and the call may have been done; a tb_peek is
--     run once more after a lost connection.
--   * The statement's statement_timeout passed while a call that does not
--     wait was on its way (a shard that does not answer: PL/Proxy gave up
--     connecting, or cancelled the call there): 08006, most likely nothing
--     done.  A call that waits keeps 57014: its wait may simply have
--     lasted.
--   * Anything else is raised again as it came.
--
CREATE FUNCTION @extschema@.tb_routed_failed(name text, attempt int4, kind text,
	code text, message text, detail text, hint text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL SAFE
AS $$
DECLARE
	failed text[] := pg_catalog.regexp_match(message,
		'^PL/Proxy function [^ ]+\([0-9]+\): (\[[^]]*\] ([A-Za-z]+): |query timeout$|connect timeout to: )');
	timeout text := pg_catalog.current_setting('statement_timeout');
BEGIN
	IF code OPERATOR(pg_catalog.=) 'XX000'
	   AND (failed[2] OPERATOR(pg_catalog.=) ANY (ARRAY['PQconnectStart', 'PQconnectPoll'])
			OR failed[1] OPERATOR(pg_catalog.=) 'connect timeout to: ') THEN
		RAISE EXCEPTION 'could not connect to the shard of token bucket "%"', name
			USING ERRCODE = 'sqlclient_unable_to_establish_sqlconnection',
				  DETAIL = message,
				  HINT = 'The call reached no shard and did nothing: it may be retried.';
	END IF;
	IF (code OPERATOR(pg_catalog.=) 'XX000'
		AND failed[2] OPERATOR(pg_catalog.=) ANY (ARRAY['PQsendQueryParams', 'PQflush']))
	   OR (code OPERATOR(pg_catalog.=) ANY (ARRAY['57P01', '57P02', '57P03'])
		   AND message OPERATOR(pg_catalog.~) '^[^ ]+\([0-9]+\): \[[^]]*\] REMOTE ') THEN
		IF attempt OPERATOR(pg_catalog.=) 1 THEN
			RETURN;
		END IF;
		RAISE EXCEPTION 'lost the connection to the shard of token bucket "%"', name
			USING ERRCODE = 'connection_failure',
				  DETAIL = message,
				  HINT = 'The shard ended the session before the call ran, on a new connection too: the call did nothing, and may be retried.';
	END IF;
	IF code OPERATOR(pg_catalog.=) 'XX000'
	   AND (failed[2] OPERATOR(pg_catalog.=) 'PQconsumeInput'
			OR failed[1] OPERATOR(pg_catalog.=) 'query timeout') THEN
		IF kind OPERATOR(pg_catalog.=) 'read' AND attempt OPERATOR(pg_catalog.=) 1
		   AND failed[2] OPERATOR(pg_catalog.=) 'PQconsumeInput' THEN
			RETURN;
		END IF;
		RAISE EXCEPTION 'lost the connection to the shard of token bucket "%"', name
			USING ERRCODE = 'connection_failure',
				  DETAIL = message,
				  HINT = 'The call may be retried, but the shard may have done it before it stopped answering.';
	END IF;
	IF code OPERATOR(pg_catalog.=) '57014' AND kind OPERATOR(pg_catalog.<>) 'wait'
	   AND timeout OPERATOR(pg_catalog.<>) '0'
	   AND pg_catalog.clock_timestamp() OPERATOR(pg_catalog.>=)
		   (pg_catalog.statement_timestamp() OPERATOR(pg_catalog.+) CAST(timeout AS interval)
			OPERATOR(pg_catalog.-) CAST('10 ms' AS interval)) THEN
		RAISE EXCEPTION 'the shard of token bucket "%" did not answer within statement_timeout (%)', name, timeout
			USING ERRCODE = 'connection_failure',
				  DETAIL = 'PL/Proxy gave up connecting to it, or cancelled the call there.',
				  HINT = 'The call most likely did nothing: it may be retried.';
	END IF;
	IF code OPERATOR(pg_catalog.=) '42883'
	   AND message OPERATOR(pg_catalog.~) 'REMOTE ERROR: function [^ ]*tb_routed_' THEN
		hint := 'Create the extension tokenbucket_shard in each partition''s database, in tokenbucket''s schema: CREATE EXTENSION tokenbucket_shard;';
	END IF;
	PERFORM @extschema@.tb_routed_raise(ARRAY[code, message, NULLIF(detail, ''), NULLIF(hint, '')]);
END
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_failed(text, int4, text, text, text, text, text) IS
	'what a routed call does when PL/Proxy failed: return to run it once more (it did nothing), or raise class 08, or the error as it came';

--
-- The PL/Proxy functions: tokenbucket_shard's tb_routed_<f> on the shard
-- of the bucket (of the shard key, for several buckets).  Each names its
-- statement, SELECT * FROM tb_routed_<f>(...), where PL/Proxy would send
-- SELECT col::type, ... FROM ...: the shard parses every call anew, and
-- each type named in a cast is a catalog lookup (13,000 instructions, an
-- eighth of a routed tb_acquire on a memory bucket).  PL/Proxy still types
-- the arguments ($1::text) and takes the columns by name.
--
CREATE FUNCTION @extschema@.tb_routed_acquire(name text,
	OUT result boolean, OUT error text[])
RETURNS record
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
	SELECT * FROM @extschema@.tb_routed_acquire(name);
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_acquire(text) IS
	'tokenbucket_shard''s tb_routed_acquire on the shard of the bucket: tb_acquire''s result, or its error as data';

CREATE FUNCTION @extschema@.tb_routed_acquire(name text, cost float8,
	OUT result boolean, OUT error text[])
RETURNS record
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
	SELECT * FROM @extschema@.tb_routed_acquire(name, cost);
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_acquire(text, float8) IS
	'tokenbucket_shard''s tb_routed_acquire on the shard of the bucket: tb_acquire''s result, or its error as data';

CREATE FUNCTION @extschema@.tb_routed_acquire(name text, cost float8, reserve float8,
	OUT result boolean, OUT error text[])
RETURNS record
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
	SELECT * FROM @extschema@.tb_routed_acquire(name, cost, reserve);
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_acquire(text, float8, float8) IS
	'tokenbucket_shard''s tb_routed_acquire on the shard of the bucket: tb_acquire''s result, or its error as data';

CREATE FUNCTION @extschema@.tb_routed_try(name text, cost float8,
	OUT granted boolean, OUT remaining float8, OUT retry_after interval,
	OUT reset_after interval, OUT retry_after_seconds float8,
	OUT reset_after_seconds float8, OUT error text[])
RETURNS record
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
	SELECT * FROM @extschema@.tb_routed_try(name, cost);
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_try(text, float8) IS
	'tokenbucket_shard''s tb_routed_try on the shard of the bucket: tb_try''s result, or its error as data';

CREATE FUNCTION @extschema@.tb_routed_try(name text, cost float8, reserve float8,
	OUT granted boolean, OUT remaining float8, OUT retry_after interval,
	OUT reset_after interval, OUT retry_after_seconds float8,
	OUT reset_after_seconds float8, OUT error text[])
RETURNS record
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
	SELECT * FROM @extschema@.tb_routed_try(name, cost, reserve);
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_try(text, float8, float8) IS
	'tokenbucket_shard''s tb_routed_try on the shard of the bucket: tb_try''s result, or its error as data';

CREATE FUNCTION @extschema@.tb_routed_peek(name text, cost float8,
	OUT granted boolean, OUT remaining float8, OUT retry_after interval,
	OUT reset_after interval, OUT retry_after_seconds float8,
	OUT reset_after_seconds float8, OUT error text[])
RETURNS record
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
	SELECT * FROM @extschema@.tb_routed_peek(name, cost);
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_peek(text, float8) IS
	'tokenbucket_shard''s tb_routed_peek on the shard of the bucket: tb_peek''s result, or its error as data';

CREATE FUNCTION @extschema@.tb_routed_peek(name text, cost float8, reserve float8,
	OUT granted boolean, OUT remaining float8, OUT retry_after interval,
	OUT reset_after interval, OUT retry_after_seconds float8,
	OUT reset_after_seconds float8, OUT error text[])
RETURNS record
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
	SELECT * FROM @extschema@.tb_routed_peek(name, cost, reserve);
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_peek(text, float8, float8) IS
	'tokenbucket_shard''s tb_routed_peek on the shard of the bucket: tb_peek''s result, or its error as data';

CREATE FUNCTION @extschema@.tb_routed_acquire_wait(name text, cost float8, timeout interval,
	OUT result boolean, OUT error text[])
RETURNS record
LANGUAGE plproxy VOLATILE CALLED ON NULL INPUT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
	SELECT * FROM @extschema@.tb_routed_acquire_wait(name, cost, timeout);
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_acquire_wait(text, float8, interval) IS
	'tokenbucket_shard''s tb_routed_acquire_wait on the shard of the bucket: tb_acquire_wait''s result, or its error as data';

CREATE FUNCTION @extschema@.tb_routed_acquire_all(names text[], costs float8[],
	OUT result boolean, OUT error text[])
RETURNS record
LANGUAGE plproxy VOLATILE CALLED ON NULL INPUT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route_all(names);
	SELECT * FROM @extschema@.tb_routed_acquire_all(names, costs);
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_acquire_all(text[], float8[]) IS
	'tokenbucket_shard''s tb_routed_acquire_all on the shard of the bucket: tb_acquire_all''s result, or its error as data';

CREATE FUNCTION @extschema@.tb_routed_acquire_all(names text[], costs float8[], reserve float8,
	OUT result boolean, OUT error text[])
RETURNS record
LANGUAGE plproxy VOLATILE CALLED ON NULL INPUT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route_all(names);
	SELECT * FROM @extschema@.tb_routed_acquire_all(names, costs, reserve);
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_acquire_all(text[], float8[], float8) IS
	'tokenbucket_shard''s tb_routed_acquire_all on the shard of the bucket: tb_acquire_all''s result, or its error as data';

CREATE FUNCTION @extschema@.tb_routed_acquire_all_wait(names text[], costs float8[], timeout interval,
	OUT result boolean, OUT error text[])
RETURNS record
LANGUAGE plproxy VOLATILE CALLED ON NULL INPUT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route_all(names);
	SELECT * FROM @extschema@.tb_routed_acquire_all_wait(names, costs, timeout);
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_acquire_all_wait(text[], float8[], interval) IS
	'tokenbucket_shard''s tb_routed_acquire_all_wait on the shard of the bucket: tb_acquire_all_wait''s result, or its error as data';

CREATE FUNCTION @extschema@.tb_routed_try_all(names text[], costs float8[])
RETURNS TABLE (name text, granted boolean, remaining float8, retry_after interval,
			   reset_after interval, retry_after_seconds float8,
			   reset_after_seconds float8, error text[])
LANGUAGE plproxy VOLATILE CALLED ON NULL INPUT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route_all(names);
	SELECT * FROM @extschema@.tb_routed_try_all(names, costs);
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_try_all(text[], float8[]) IS
	'tokenbucket_shard''s tb_routed_try_all on the shard of the bucket: tb_try_all''s result, or its error as data';

CREATE FUNCTION @extschema@.tb_routed_try_all(names text[], costs float8[], reserve float8)
RETURNS TABLE (name text, granted boolean, remaining float8, retry_after interval,
			   reset_after interval, retry_after_seconds float8,
			   reset_after_seconds float8, error text[])
LANGUAGE plproxy VOLATILE CALLED ON NULL INPUT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route_all(names);
	SELECT * FROM @extschema@.tb_routed_try_all(names, costs, reserve);
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_try_all(text[], float8[], float8) IS
	'tokenbucket_shard''s tb_routed_try_all on the shard of the bucket: tb_try_all''s result, or its error as data';

CREATE FUNCTION @extschema@.tb_routed_refund(name text, tokens float8,
	OUT result float8, OUT error text[])
RETURNS record
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
	SELECT * FROM @extschema@.tb_routed_refund(name, tokens);
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_refund(text, float8) IS
	'tokenbucket_shard''s tb_routed_refund on the shard of the bucket: tb_refund''s result, or its error as data';

CREATE FUNCTION @extschema@.tb_routed_settle(name text, reserved float8, used float8,
	OUT result float8, OUT error text[])
RETURNS record
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
	SELECT * FROM @extschema@.tb_routed_settle(name, reserved, used);
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_settle(text, float8, float8) IS
	'tokenbucket_shard''s tb_routed_settle on the shard of the bucket: tb_settle''s result, or its error as data';

CREATE FUNCTION @extschema@.tb_routed_sync(name text, remaining float8,
	OUT result float8, OUT error text[])
RETURNS record
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
	SELECT * FROM @extschema@.tb_routed_sync(name, remaining);
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_sync(text, float8) IS
	'tokenbucket_shard''s tb_routed_sync on the shard of the bucket: tb_sync''s result, or its error as data';

CREATE FUNCTION @extschema@.tb_routed_pause(name text, duration interval, OUT error text[])
RETURNS text[]
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_pause(text, interval) IS
	'tokenbucket_shard''s tb_routed_pause on the shard of the bucket: tb_pause''s result, or its error as data';

CREATE FUNCTION @extschema@.tb_routed_pause_until(name text, until timestamptz, OUT error text[])
RETURNS text[]
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_pause_until(text, timestamptz) IS
	'tokenbucket_shard''s tb_routed_pause_until on the shard of the bucket: tb_pause_until''s result, or its error as data';

CREATE FUNCTION @extschema@.tb_routed_reset(name text, OUT error text[])
RETURNS text[]
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
$$;

COMMENT ON FUNCTION @extschema@.tb_routed_reset(text) IS
	'tokenbucket_shard''s tb_routed_reset on the shard of the bucket: tb_reset''s result, or its error as data';

--
-- tokenbucket's functions, same signatures, through the functions above.
--
CREATE OR REPLACE FUNCTION @extschema@.tb_acquire(name text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
	r record;
	detail text;
	hint text;
BEGIN
	FOR attempt IN 1..2 LOOP
		BEGIN
			r := @extschema@.tb_routed_acquire(name);
			EXIT;
		EXCEPTION WHEN OTHERS OR query_canceled THEN
			GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
			PERFORM @extschema@.tb_routed_failed(name, attempt, 'write', SQLSTATE, SQLERRM, detail, hint);
		END;
	END LOOP;
	IF r.error IS NOT NULL THEN
		PERFORM @extschema@.tb_routed_raise(r.error);
	END IF;
	RETURN r.result;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.tb_acquire(name text, cost float8)
RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
	r record;
	detail text;
	hint text;
BEGIN
	FOR attempt IN 1..2 LOOP
		BEGIN
			r := @extschema@.tb_routed_acquire(name, cost);
			EXIT;
		EXCEPTION WHEN OTHERS OR query_canceled THEN
			GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
			PERFORM @extschema@.tb_routed_failed(name, attempt, 'write', SQLSTATE, SQLERRM, detail, hint);
		END;
	END LOOP;
	IF r.error IS NOT NULL THEN
		PERFORM @extschema@.tb_routed_raise(r.error);
	END IF;
	RETURN r.result;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.tb_acquire(name text, cost float8, reserve float8)
RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
	r record;
	detail text;
	hint text;
BEGIN
	FOR attempt IN 1..2 LOOP
		BEGIN
			r := @extschema@.tb_routed_acquire(name, cost, reserve);
			EXIT;
		EXCEPTION WHEN OTHERS OR query_canceled THEN
			GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
			PERFORM @extschema@.tb_routed_failed(name, attempt, 'write', SQLSTATE, SQLERRM, detail, hint);
		END;
	END LOOP;
	IF r.error IS NOT NULL THEN
		PERFORM @extschema@.tb_routed_raise(r.error);
	END IF;
	RETURN r.result;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.tb_try(name text, cost float8 DEFAULT 1,
	OUT granted boolean, OUT remaining float8, OUT retry_after interval,
	OUT reset_after interval, OUT retry_after_seconds float8,
	OUT reset_after_seconds float8)
RETURNS record
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
	r record;
	detail text;
	hint text;
BEGIN
	FOR attempt IN 1..2 LOOP
		BEGIN
			r := @extschema@.tb_routed_try(name, cost);
			EXIT;
		EXCEPTION WHEN OTHERS OR query_canceled THEN
			GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
			PERFORM @extschema@.tb_routed_failed(name, attempt, 'write', SQLSTATE, SQLERRM, detail, hint);
		END;
	END LOOP;
	IF r.error IS NOT NULL THEN
		PERFORM @extschema@.tb_routed_raise(r.error);
	END IF;
	granted := r.granted;
	remaining := r.remaining;
	retry_after := r.retry_after;
	reset_after := r.reset_after;
	retry_after_seconds := r.retry_after_seconds;
	reset_after_seconds := r.reset_after_seconds;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.tb_try(name text, cost float8, reserve float8,
	OUT granted boolean, OUT remaining float8, OUT retry_after interval,
	OUT reset_after interval, OUT retry_after_seconds float8,
	OUT reset_after_seconds float8)
RETURNS record
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
	r record;
	detail text;
	hint text;
BEGIN
	FOR attempt IN 1..2 LOOP
		BEGIN
			r := @extschema@.tb_routed_try(name, cost, reserve);
			EXIT;
		EXCEPTION WHEN OTHERS OR query_canceled THEN
			GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
			PERFORM @extschema@.tb_routed_failed(name, attempt, 'write', SQLSTATE, SQLERRM, detail, hint);
		END;
	END LOOP;
	IF r.error IS NOT NULL THEN
		PERFORM @extschema@.tb_routed_raise(r.error);
	END IF;
	granted := r.granted;
	remaining := r.remaining;
	retry_after := r.retry_after;
	reset_after := r.reset_after;
	retry_after_seconds := r.retry_after_seconds;
	reset_after_seconds := r.reset_after_seconds;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.tb_peek(name text, cost float8 DEFAULT 1,
	OUT granted boolean, OUT remaining float8, OUT retry_after interval,
	OUT reset_after interval, OUT retry_after_seconds float8,
	OUT reset_after_seconds float8)
RETURNS record
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
	r record;
	detail text;
	hint text;
BEGIN
	FOR attempt IN 1..2 LOOP
		BEGIN
			r := @extschema@.tb_routed_peek(name, cost);
			EXIT;
		EXCEPTION WHEN OTHERS OR query_canceled THEN
			GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
			PERFORM @extschema@.tb_routed_failed(name, attempt, 'read', SQLSTATE, SQLERRM, detail, hint);
		END;
	END LOOP;
	IF r.error IS NOT NULL THEN
		PERFORM @extschema@.tb_routed_raise(r.error);
	END IF;
	granted := r.granted;
	remaining := r.remaining;
	retry_after := r.retry_after;
	reset_after := r.reset_after;
	retry_after_seconds := r.retry_after_seconds;
	reset_after_seconds := r.reset_after_seconds;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.tb_peek(name text, cost float8, reserve float8,
	OUT granted boolean, OUT remaining float8, OUT retry_after interval,
	OUT reset_after interval, OUT retry_after_seconds float8,
	OUT reset_after_seconds float8)
RETURNS record
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
	r record;
	detail text;
	hint text;
BEGIN
	FOR attempt IN 1..2 LOOP
		BEGIN
			r := @extschema@.tb_routed_peek(name, cost, reserve);
			EXIT;
		EXCEPTION WHEN OTHERS OR query_canceled THEN
			GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
			PERFORM @extschema@.tb_routed_failed(name, attempt, 'read', SQLSTATE, SQLERRM, detail, hint);
		END;
	END LOOP;
	IF r.error IS NOT NULL THEN
		PERFORM @extschema@.tb_routed_raise(r.error);
	END IF;
	granted := r.granted;
	remaining := r.remaining;
	retry_after := r.retry_after;
	reset_after := r.reset_after;
	retry_after_seconds := r.retry_after_seconds;
	reset_after_seconds := r.reset_after_seconds;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.tb_acquire_wait(name text, cost float8 DEFAULT 1, timeout interval DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
AS $$
DECLARE
	r record;
	detail text;
	hint text;
BEGIN
	FOR attempt IN 1..2 LOOP
		BEGIN
			r := @extschema@.tb_routed_acquire_wait(name, cost, timeout);
			EXIT;
		EXCEPTION WHEN OTHERS OR query_canceled THEN
			GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
			PERFORM @extschema@.tb_routed_failed(name, attempt, 'wait', SQLSTATE, SQLERRM, detail, hint);
		END;
	END LOOP;
	IF r.error IS NOT NULL THEN
		PERFORM @extschema@.tb_routed_raise(r.error);
	END IF;
	RETURN r.result;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.tb_acquire_all(names text[], costs float8[] DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
AS $$
DECLARE
	r record;
	detail text;
	hint text;
BEGIN
	FOR attempt IN 1..2 LOOP
		BEGIN
			r := @extschema@.tb_routed_acquire_all(names, costs);
			EXIT;
		EXCEPTION WHEN OTHERS OR query_canceled THEN
			GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
			PERFORM @extschema@.tb_routed_failed(names[1], attempt, 'write', SQLSTATE, SQLERRM, detail, hint);
		END;
	END LOOP;
	IF r.error IS NOT NULL THEN
		PERFORM @extschema@.tb_routed_raise(r.error);
	END IF;
	RETURN r.result;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.tb_acquire_all(names text[], costs float8[], reserve float8)
RETURNS boolean
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
AS $$
DECLARE
	r record;
	detail text;
	hint text;
BEGIN
	FOR attempt IN 1..2 LOOP
		BEGIN
			r := @extschema@.tb_routed_acquire_all(names, costs, reserve);
			EXIT;
		EXCEPTION WHEN OTHERS OR query_canceled THEN
			GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
			PERFORM @extschema@.tb_routed_failed(names[1], attempt, 'write', SQLSTATE, SQLERRM, detail, hint);
		END;
	END LOOP;
	IF r.error IS NOT NULL THEN
		PERFORM @extschema@.tb_routed_raise(r.error);
	END IF;
	RETURN r.result;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.tb_acquire_all_wait(names text[], costs float8[] DEFAULT NULL, timeout interval DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
AS $$
DECLARE
	r record;
	detail text;
	hint text;
BEGIN
	FOR attempt IN 1..2 LOOP
		BEGIN
			r := @extschema@.tb_routed_acquire_all_wait(names, costs, timeout);
			EXIT;
		EXCEPTION WHEN OTHERS OR query_canceled THEN
			GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
			PERFORM @extschema@.tb_routed_failed(names[1], attempt, 'wait', SQLSTATE, SQLERRM, detail, hint);
		END;
	END LOOP;
	IF r.error IS NOT NULL THEN
		PERFORM @extschema@.tb_routed_raise(r.error);
	END IF;
	RETURN r.result;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.tb_try_all(names text[], costs float8[] DEFAULT NULL)
RETURNS TABLE (name text, granted boolean, remaining float8, retry_after interval,
			   reset_after interval, retry_after_seconds float8,
			   reset_after_seconds float8)
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
AS $$
DECLARE
	r record;
	failure text[];
	detail text;
	hint text;
BEGIN
	FOR attempt IN 1..2 LOOP
		BEGIN
			FOR r IN SELECT * FROM @extschema@.tb_routed_try_all(names, costs) LOOP
				failure := r.error;
				EXIT WHEN failure IS NOT NULL;
				name := r.name;
				granted := r.granted;
				remaining := r.remaining;
				retry_after := r.retry_after;
				reset_after := r.reset_after;
				retry_after_seconds := r.retry_after_seconds;
				reset_after_seconds := r.reset_after_seconds;
				RETURN NEXT;
			END LOOP;
			EXIT;
		EXCEPTION WHEN OTHERS OR query_canceled THEN
			GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
			PERFORM @extschema@.tb_routed_failed(names[1], attempt, 'write', SQLSTATE, SQLERRM, detail, hint);
		END;
	END LOOP;
	IF failure IS NOT NULL THEN
		PERFORM @extschema@.tb_routed_raise(failure);
	END IF;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.tb_try_all(names text[], costs float8[], reserve float8)
RETURNS TABLE (name text, granted boolean, remaining float8, retry_after interval,
			   reset_after interval, retry_after_seconds float8,
			   reset_after_seconds float8)
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
AS $$
DECLARE
	r record;
	failure text[];
	detail text;
	hint text;
BEGIN
	FOR attempt IN 1..2 LOOP
		BEGIN
			FOR r IN SELECT * FROM @extschema@.tb_routed_try_all(names, costs, reserve) LOOP
				failure := r.error;
				EXIT WHEN failure IS NOT NULL;
				name := r.name;
				granted := r.granted;
				remaining := r.remaining;
				retry_after := r.retry_after;
				reset_after := r.reset_after;
				retry_after_seconds := r.retry_after_seconds;
				reset_after_seconds := r.reset_after_seconds;
				RETURN NEXT;
			END LOOP;
			EXIT;
		EXCEPTION WHEN OTHERS OR query_canceled THEN
			GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
			PERFORM @extschema@.tb_routed_failed(names[1], attempt, 'write', SQLSTATE, SQLERRM, detail, hint);
		END;
	END LOOP;
	IF failure IS NOT NULL THEN
		PERFORM @extschema@.tb_routed_raise(failure);
	END IF;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.tb_refund(name text, tokens float8)
RETURNS float8
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
	r record;
	detail text;
	hint text;
BEGIN
	FOR attempt IN 1..2 LOOP
		BEGIN
			r := @extschema@.tb_routed_refund(name, tokens);
			EXIT;
		EXCEPTION WHEN OTHERS OR query_canceled THEN
			GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
			PERFORM @extschema@.tb_routed_failed(name, attempt, 'write', SQLSTATE, SQLERRM, detail, hint);
		END;
	END LOOP;
	IF r.error IS NOT NULL THEN
		PERFORM @extschema@.tb_routed_raise(r.error);
	END IF;
	RETURN r.result;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.tb_settle(name text, reserved float8, used float8)
RETURNS float8
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
	r record;
	detail text;
	hint text;
BEGIN
	FOR attempt IN 1..2 LOOP
		BEGIN
			r := @extschema@.tb_routed_settle(name, reserved, used);
			EXIT;
		EXCEPTION WHEN OTHERS OR query_canceled THEN
			GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
			PERFORM @extschema@.tb_routed_failed(name, attempt, 'write', SQLSTATE, SQLERRM, detail, hint);
		END;
	END LOOP;
	IF r.error IS NOT NULL THEN
		PERFORM @extschema@.tb_routed_raise(r.error);
	END IF;
	RETURN r.result;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.tb_sync(name text, remaining float8)
RETURNS float8
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
	r record;
	detail text;
	hint text;
BEGIN
	FOR attempt IN 1..2 LOOP
		BEGIN
			r := @extschema@.tb_routed_sync(name, remaining);
			EXIT;
		EXCEPTION WHEN OTHERS OR query_canceled THEN
			GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
			PERFORM @extschema@.tb_routed_failed(name, attempt, 'write', SQLSTATE, SQLERRM, detail, hint);
		END;
	END LOOP;
	IF r.error IS NOT NULL THEN
		PERFORM @extschema@.tb_routed_raise(r.error);
	END IF;
	RETURN r.result;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.tb_pause(name text, duration interval)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
	failure text[];
	detail text;
	hint text;
BEGIN
	FOR attempt IN 1..2 LOOP
		BEGIN
			failure := @extschema@.tb_routed_pause(name, duration);
			EXIT;
		EXCEPTION WHEN OTHERS OR query_canceled THEN
			GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
			PERFORM @extschema@.tb_routed_failed(name, attempt, 'write', SQLSTATE, SQLERRM, detail, hint);
		END;
	END LOOP;
	IF failure IS NOT NULL THEN
		PERFORM @extschema@.tb_routed_raise(failure);
	END IF;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.tb_pause_until(name text, until timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
	failure text[];
	detail text;
	hint text;
BEGIN
	FOR attempt IN 1..2 LOOP
		BEGIN
			failure := @extschema@.tb_routed_pause_until(name, until);
			EXIT;
		EXCEPTION WHEN OTHERS OR query_canceled THEN
			GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
			PERFORM @extschema@.tb_routed_failed(name, attempt, 'write', SQLSTATE, SQLERRM, detail, hint);
		END;
	END LOOP;
	IF failure IS NOT NULL THEN
		PERFORM @extschema@.tb_routed_raise(failure);
	END IF;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.tb_reset(name text)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
	failure text[];
	detail text;
	hint text;
BEGIN
	FOR attempt IN 1..2 LOOP
		BEGIN
			failure := @extschema@.tb_routed_reset(name);
			EXIT;
		EXCEPTION WHEN OTHERS OR query_canceled THEN
			GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
			PERFORM @extschema@.tb_routed_failed(name, attempt, 'write', SQLSTATE, SQLERRM, detail, hint);
		END;
	END LOOP;
	IF failure IS NOT NULL THEN
		PERFORM @extschema@.tb_routed_raise(failure);
	END IF;
END
$$;

--
-- Who may call a function kept from PUBLIC may call the PL/Proxy function
-- behind it: its grants (a 1.2 installation's) are copied, and the routed
-- functions of those are kept from PUBLIC too.
--
REVOKE ALL ON FUNCTION
	@extschema@.tb_routed_refund(text, float8),
	@extschema@.tb_routed_settle(text, float8, float8),
	@extschema@.tb_routed_sync(text, float8),
	@extschema@.tb_routed_pause(text, interval),
	@extschema@.tb_routed_pause_until(text, timestamptz),
	@extschema@.tb_routed_reset(text)
FROM PUBLIC;

DO $$
DECLARE
	f text;
	grantee text;
BEGIN
	FOR f, grantee IN
		SELECT p.oid::pg_catalog.regprocedure::text, pg_catalog.quote_ident(r.rolname)
		FROM pg_catalog.pg_proc AS p
		JOIN pg_catalog.pg_depend AS d
		  ON d.classid OPERATOR(pg_catalog.=) CAST('pg_catalog.pg_proc' AS pg_catalog.regclass)
		 AND d.objid OPERATOR(pg_catalog.=) p.oid AND d.deptype OPERATOR(pg_catalog.=) 'e'
		JOIN pg_catalog.pg_extension AS e
		  ON e.oid OPERATOR(pg_catalog.=) d.refobjid AND e.extname OPERATOR(pg_catalog.=) 'tokenbucket_proxy',
			 LATERAL pg_catalog.aclexplode(p.proacl) AS a
		JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) a.grantee
		WHERE p.proname OPERATOR(pg_catalog.=) ANY (ARRAY['tb_refund', 'tb_settle', 'tb_sync',
						'tb_pause', 'tb_pause_until', 'tb_reset'])
		  AND p.pronamespace OPERATOR(pg_catalog.=) CAST('@extschema@' AS pg_catalog.regnamespace)
		  AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
		  AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
	LOOP
		EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s',
			pg_catalog.regexp_replace(f, '(^|\.)tb_', '\1tb_routed_'), grantee);
	END LOOP;
END
$$;

--
-- From one server to N: tb_move_partition moves one partition's buckets
-- (and a copy of every template) to another database, while calls go on.
-- It reads and writes the rows through tokenbucket_shard's tb_move_rows,
-- tb_move_write and tb_move_delete, over PL/Proxy connections of its own
-- (CONNECT) to the partition's database and to the new one, with the
-- user mapping's options added to each connection string.
--

-- a connection string, with the options of the user mapping PL/Proxy
-- would use for the current user on the server tokenbucket (the user's own,
-- else PUBLIC's) added, as libpq reads a later keyword over an earlier one
CREATE FUNCTION @extschema@.tb_move_connstr(conninfo text)
RETURNS text
LANGUAGE sql STABLE STRICT PARALLEL SAFE
AS $$
SELECT conninfo OPERATOR(pg_catalog.||) COALESCE((
	SELECT pg_catalog.string_agg(pg_catalog.format(' %s=''%s''',
		pg_catalog.split_part(o.option, '=', 1),
		pg_catalog.replace(pg_catalog.replace(
			pg_catalog.substr(o.option, pg_catalog.strpos(o.option, '=') OPERATOR(pg_catalog.+) 1),
			'\', '\\'), '''', '\''')), '')
	FROM (SELECT m.umoptions FROM pg_catalog.pg_user_mappings AS m
		  WHERE m.srvname OPERATOR(pg_catalog.=) 'tokenbucket'
			AND m.usename OPERATOR(pg_catalog.=) ANY (ARRAY[CAST(CURRENT_USER AS text), 'public'])
		  ORDER BY m.usename OPERATOR(pg_catalog.=) 'public'
		  LIMIT 1) AS u,
		 pg_catalog.unnest(u.umoptions) AS o(option)), '')
$$;

COMMENT ON FUNCTION @extschema@.tb_move_connstr(text) IS
	'a connection string with the options of the current user''s user mapping on the server tokenbucket added: how tb_move_partition connects';

CREATE FUNCTION @extschema@.tb_move_remote_rows(connstr text,
	OUT name text, OUT memory boolean, OUT is_template boolean, OUT data text)
RETURNS SETOF record
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CONNECT connstr;
	SELECT r.name, r.memory, r.is_template, r.data FROM @extschema@.tb_move_rows() AS r;
$$;

COMMENT ON FUNCTION @extschema@.tb_move_remote_rows(text) IS
	'tokenbucket_shard''s tb_move_rows in the database of a connection string: its every row of tb_buckets';

CREATE FUNCTION @extschema@.tb_move_remote_write(connstr text, rows text)
RETURNS int4
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CONNECT connstr;
	SELECT @extschema@.tb_move_write($2);
$$;

COMMENT ON FUNCTION @extschema@.tb_move_remote_write(text, text) IS
	'tokenbucket_shard''s tb_move_write in the database of a connection string: rows written over those of the same names';

CREATE FUNCTION @extschema@.tb_move_remote_delete(connstr text, names text[])
RETURNS int4
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CONNECT connstr;
	SELECT @extschema@.tb_move_delete($2);
$$;

COMMENT ON FUNCTION @extschema@.tb_move_remote_delete(text, text[]) IS
	'tokenbucket_shard''s tb_move_delete in the database of a connection string: those rows deleted';

-- the error of a step of a move, in the database "place", raised as the
-- user can act on it: no connection is 08001, tokenbucket_shard missing
-- (or older) is 42883 with what to create; anything else as it came
CREATE FUNCTION @extschema@.tb_move_raise(place text, code text, message text,
	detail text, hint text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL SAFE
AS $$
BEGIN
	IF code OPERATOR(pg_catalog.=) 'XX000'
	   AND message OPERATOR(pg_catalog.~) ': (\[[^]]*\] PQconnect(Start|Poll): |connect timeout to: )' THEN
		RAISE EXCEPTION 'could not connect to %', place
			USING ERRCODE = 'sqlclient_unable_to_establish_sqlconnection',
				  DETAIL = message,
				  HINT = 'tb_move_partition connects with the connection string given (or the partition''s), with the options of your user mapping on the server tokenbucket added: check both.';
	END IF;
	IF code OPERATOR(pg_catalog.=) '42883' AND message OPERATOR(pg_catalog.~) 'tb_move_' THEN
		RAISE EXCEPTION 'tokenbucket_shard is missing from %', place
			USING ERRCODE = 'undefined_function',
				  DETAIL = message,
				  HINT = 'Create tokenbucket and tokenbucket_shard there, in one schema (the proxy''s): CREATE EXTENSION tokenbucket; CREATE EXTENSION tokenbucket_shard;';
	END IF;
	PERFORM @extschema@.tb_routed_raise(ARRAY[code, message, NULLIF(detail, ''), NULLIF(hint, '')]);
END
$$;

COMMENT ON FUNCTION @extschema@.tb_move_raise(text, text, text, text, text) IS
	'raise the error of a step of tb_move_partition in a database: 08001 when it could not connect, 42883 when tokenbucket_shard is missing, else as it came';

-- the partitions the foreign server tokenbucket's options name, with the
-- option of each (as PL/Proxy reads them: tb_cluster_partitions), in one
-- place for tb_cluster_partitions and tb_move_partition, which changes
-- the option
CREATE FUNCTION @extschema@.tb_server_partitions(OUT partition int4, OUT option text,
	OUT conninfo text)
RETURNS SETOF record
LANGUAGE sql STABLE PARALLEL RESTRICTED
AS $$
	SELECT CASE WHEN m[2] IS NULL THEN 0 ELSE CAST(m[2] AS pg_catalog.int4) END,
		   pg_catalog.split_part(o.option, '=', 1), m[3]
	FROM pg_catalog.pg_foreign_server AS s,
		 pg_catalog.unnest(s.srvoptions) AS o(option),
		 pg_catalog.regexp_match(o.option,
			'^(p|partition_)([[:space:]]*[+-]?[0-9]+)?=(.*)$') AS m
	WHERE s.srvname OPERATOR(pg_catalog.=) 'tokenbucket' AND m IS NOT NULL
	ORDER BY 1
$$;

COMMENT ON FUNCTION @extschema@.tb_server_partitions() IS
	'the partitions the options of the foreign server tokenbucket name (p<N> or partition_<N>), with each one''s option and connection string';

CREATE OR REPLACE FUNCTION @extschema@.tb_cluster_partitions(OUT partition int4, OUT conninfo text)
RETURNS SETOF record
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
AS $$
BEGIN
	IF EXISTS (SELECT FROM pg_catalog.pg_foreign_server AS s
			   WHERE s.srvname OPERATOR(pg_catalog.=) 'tokenbucket') THEN
		RETURN QUERY
		SELECT p.partition, p.conninfo FROM @extschema@.tb_server_partitions() AS p;
	ELSIF pg_catalog.to_regprocedure('plproxy.get_cluster_partitions(text)') IS NOT NULL
		AND pg_catalog.to_regprocedure('plproxy.get_cluster_config(text)') IS NOT NULL
		AND pg_catalog.to_regprocedure('plproxy.get_cluster_version(text)') IS NOT NULL THEN
		RETURN QUERY EXECUTE
			'SELECT CAST(p.n OPERATOR(pg_catalog.-) 1 AS pg_catalog.int4), CAST(p.c AS pg_catalog.text)
			 FROM plproxy.get_cluster_partitions($1) WITH ORDINALITY AS p(c, n)
			 ORDER BY p.n'
			USING 'tokenbucket';
	END IF;
END
$$;

-- the partition PL/Proxy sends a hash to, in one place for tb_shard and
-- tb_move_partition: abs(hash % N) with modular_mapping, else
-- hash & (N - 1), for which PL/Proxy wants N a power of two
CREATE FUNCTION @extschema@.tb_partition_of(hash int4, partitions int4, modular boolean)
RETURNS int4
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
BEGIN
	IF modular THEN
		RETURN pg_catalog.abs(hash OPERATOR(pg_catalog.%) partitions);
	END IF;
	IF partitions OPERATOR(pg_catalog.&) (partitions OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog.<>) 0 THEN
		RAISE EXCEPTION 'the PL/Proxy cluster "tokenbucket" has % partitions, not a power of two', partitions
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'Without modular_mapping, PL/Proxy maps a hash to partition hash & (N - 1), and refuses a cluster whose N is not a power of two.',
				  HINT = 'Give the cluster a power of two of partitions, or set modular_mapping ''1'' in its options.';
	END IF;
	RETURN hash OPERATOR(pg_catalog.&) (partitions OPERATOR(pg_catalog.-) 1);
END
$$;

COMMENT ON FUNCTION @extschema@.tb_partition_of(int4, int4, boolean) IS
	'the partition PL/Proxy sends a hash to among N: abs(hash % N) with modular_mapping, else hash & (N - 1) (N a power of two)';

CREATE OR REPLACE FUNCTION @extschema@.tb_shard(name text)
RETURNS int4
LANGUAGE sql STABLE STRICT PARALLEL RESTRICTED
AS $$
	SELECT @extschema@.tb_partition_of(@extschema@.tb_shard_hash(name),
		(SELECT pg_catalog.count(*) FROM @extschema@.tb_each_partition())::int4,
		@extschema@.tb_modular_mapping())
$$;

-- the rows of a database that tb_move_partition moves for a partition:
-- every template, and each bucket whose name PL/Proxy's mapping (as
-- tb_shard computes it, with tb_partition_of) sends there
CREATE FUNCTION @extschema@.tb_move_rows(connstr text, partition int4, place text,
	OUT name text, OUT memory boolean, OUT is_template boolean, OUT data text)
RETURNS SETOF record
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
	partitions int4 := @extschema@.tb_partitions();
	modular boolean := @extschema@.tb_modular_mapping();
	code text;
	message text;
	detail text;
	hint text;
BEGIN
	RETURN QUERY
	SELECT r.name, r.memory, r.is_template, r.data
	FROM @extschema@.tb_move_remote_rows(connstr) AS r
	WHERE r.is_template
	   OR partition OPERATOR(pg_catalog.=)
			@extschema@.tb_partition_of(@extschema@.tb_shard_hash(r.name), partitions, modular);
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
		detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
	PERFORM @extschema@.tb_move_raise(place, code, message, detail, hint);
END
$$;

COMMENT ON FUNCTION @extschema@.tb_move_rows(text, int4, text) IS
	'the rows tb_move_partition moves for a partition, read from a database: every template, and the buckets that hash to the partition';

-- copy a partition's rows (templates included) from one database to
-- another, over the copies there; refuses memory buckets, whose tokens
-- are in the old server's shared memory and cannot be read exactly.
-- Returns the names of the buckets copied, and of the templates.
CREATE FUNCTION @extschema@.tb_move_copy(source text, target text, partition int4,
	OUT buckets text[], OUT templates text[])
RETURNS record
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
	rows text;
	memory_bucket text;
	code text;
	message text;
	detail text;
	hint text;
BEGIN
	SELECT COALESCE(pg_catalog.array_agg(r.name) FILTER (WHERE NOT r.is_template), '{}'),
		   COALESCE(pg_catalog.array_agg(r.name) FILTER (WHERE r.is_template), '{}'),
		   pg_catalog.min(r.name) FILTER (WHERE r.memory),
		   '[' OPERATOR(pg_catalog.||) pg_catalog.string_agg(r.data, ',') OPERATOR(pg_catalog.||) ']'
	INTO buckets, templates, memory_bucket, rows
	FROM @extschema@.tb_move_rows(source, partition, 'the partition''s database') AS r;
	IF memory_bucket IS NOT NULL THEN
		RAISE EXCEPTION 'partition % holds memory buckets', partition
			USING ERRCODE = 'feature_not_supported',
				  DETAIL = pg_catalog.format('"%s" is a memory bucket (or a memory template): its tokens live in its server''s shared memory, which tb_move_partition cannot copy exactly.', memory_bucket),
				  HINT = 'Move the partition''s database by hand (README.md, "Adding servers later"), or drop its memory buckets first.';
	END IF;
	IF rows IS NOT NULL THEN
		BEGIN
			PERFORM @extschema@.tb_move_remote_write(target, rows);
		EXCEPTION WHEN OTHERS THEN
			GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
				detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
			PERFORM @extschema@.tb_move_raise('the target database', code, message, detail, hint);
		END;
	END IF;
END
$$;

COMMENT ON FUNCTION @extschema@.tb_move_copy(text, text, int4) IS
	'copy a partition''s buckets and every template from one database to another, state included (memory buckets refused): the names of the buckets, and of the templates';

-- delete rows by name in a database, the error raised as tb_move_raise does
CREATE FUNCTION @extschema@.tb_move_delete(connstr text, names text[], place text)
RETURNS int4
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
	code text;
	message text;
	detail text;
	hint text;
BEGIN
	IF pg_catalog.cardinality(names) OPERATOR(pg_catalog.=) 0 THEN
		RETURN 0;
	END IF;
	RETURN @extschema@.tb_move_remote_delete(connstr, names);
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
		detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
	PERFORM @extschema@.tb_move_raise(place, code, message, detail, hint);
	RETURN NULL;
END
$$;

COMMENT ON FUNCTION @extschema@.tb_move_delete(text, text[], text) IS
	'delete the rows of these names from tb_buckets in a database (tb_move_partition''s clean-up): how many';

--
-- tb_move_partition(partition, conninfo): move one partition of the
-- foreign server tokenbucket to the database of conninfo (which holds
-- tokenbucket and tokenbucket_shard, in the proxy's schema, and none of
-- the partition's buckets), committing between its steps, so CALL it
-- outside a transaction block:
--   1. check the target: reachable, tokenbucket_shard there, none of the
--      partition's buckets there;
--   2. copy the partition's buckets and every template there, unfenced;
--   3. fence: the partition's option is set to a connection string that
--      fails at once and names the move (calls for its buckets fail with
--      08001, "did nothing, may be retried"), committed; then wait until
--      no statement or transaction of this database that began before the
--      fence is still running, at most fence_timeout;
--   4. copy again: the rows' state as the old database has it now, over
--      the first copies (buckets gone since are deleted there);
--   5. switch the option to conninfo, committed; delete the moved buckets
--      from the old database (its templates too, when no partition uses
--      it any more).
-- Any failure before the switch puts the old option back and deletes the
-- copies.  Only this proxy database's calls are fenced.  Needs to own the
-- server (ALTER SERVER) and pg_read_all_stats (to see every session's
-- transaction).
--
CREATE PROCEDURE @extschema@.tb_move_partition(partition int4, conninfo text,
	fence_timeout interval DEFAULT '10 s')
LANGUAGE plpgsql
AS $$
DECLARE
	option_name text;
	old_conninfo text;
	fence text := pg_catalog.format('host=/tokenbucket-partition-%s-is-moving dbname=tokenbucket_move', partition);
	old_connect text;
	new_connect text;
	found_name text;
	first_copy record;
	final_copy record;
	copied text[] := '{}';
	had_templates text[];
	fence_from timestamptz;		-- before the fence's commit: no call saw it earlier
	fenced_at timestamptz;		-- after it: a session begun before may not have
	switched_at timestamptz;
	busy int4;
	deleted int4;
	failure text[];
	code text;
	message text;
	detail text;
	hint text;
BEGIN
	-- refused at once inside a transaction block, where COMMIT cannot run
	COMMIT;
	IF partition IS NULL OR conninfo IS NULL THEN
		RAISE EXCEPTION 'tb_move_partition needs a partition and a connection string'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF NOT pg_catalog.pg_has_role(CURRENT_USER, 'pg_read_all_stats', 'USAGE') THEN
		RAISE EXCEPTION 'permission denied to move a partition'
			USING ERRCODE = 'insufficient_privilege',
				  DETAIL = 'tb_move_partition waits for every session''s calls that began before its fence, and sees them only with the privileges of pg_read_all_stats.',
				  HINT = 'Run it as a superuser, or as a role granted pg_read_all_stats that owns the server tokenbucket.';
	END IF;
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_foreign_server AS s
				   WHERE s.srvname OPERATOR(pg_catalog.=) 'tokenbucket') THEN
		RAISE EXCEPTION 'there is no foreign server "tokenbucket" to move a partition of'
			USING ERRCODE = 'undefined_object',
				  DETAIL = 'tb_move_partition changes the options p0, p1, ... (or partition_0, ...) of the foreign server tokenbucket; a cluster given by plproxy.get_cluster_partitions is not supported.',
				  HINT = 'Create it: CREATE SERVER tokenbucket FOREIGN DATA WRAPPER plproxy OPTIONS (p0 ''dbname=... host=...'', p1 ''...'').';
	END IF;
	SELECT p.option, p.conninfo INTO option_name, old_conninfo
	FROM @extschema@.tb_server_partitions() AS p
	WHERE p.partition OPERATOR(pg_catalog.=) tb_move_partition.partition;
	IF option_name IS NULL THEN
		RAISE EXCEPTION 'the PL/Proxy cluster "tokenbucket" has no partition %', partition
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = pg_catalog.format('Its partitions are 0 to %s.', @extschema@.tb_partitions() OPERATOR(pg_catalog.-) 1),
				  HINT = 'Give the number of one of them: SELECT * FROM tb_cluster_partitions();';
	END IF;
	IF old_conninfo OPERATOR(pg_catalog.~) '^host=/tokenbucket-partition-' THEN
		RAISE EXCEPTION 'partition % is being moved', partition
			USING ERRCODE = 'object_in_use',
				  DETAIL = pg_catalog.format('Its option %s is the fence of a move: %s', option_name, old_conninfo),
				  HINT = 'Wait for that move to end.  If no move runs (its session was ended), set the option back: ALTER SERVER tokenbucket OPTIONS (SET <option> ''<its old connection string>'');';
	END IF;
	IF old_conninfo OPERATOR(pg_catalog.=) conninfo THEN
		RAISE EXCEPTION 'partition % is already in that database', partition
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Give the connection string of another database.';
	END IF;
	old_connect := @extschema@.tb_move_connstr(old_conninfo);
	new_connect := @extschema@.tb_move_connstr(conninfo);

	-- 1, 2: check the target, copy, fence (committed below)
	BEGIN
		SELECT pg_catalog.min(r.name) FILTER (WHERE NOT r.is_template),
			   COALESCE(pg_catalog.array_agg(r.name) FILTER (WHERE r.is_template), '{}')
		INTO found_name, had_templates
		FROM @extschema@.tb_move_rows(new_connect, partition, 'the target database') AS r;
		IF found_name IS NOT NULL THEN
			RAISE EXCEPTION 'the target database already holds buckets of partition %', partition
				USING ERRCODE = 'duplicate_object',
					  DETAIL = pg_catalog.format('"%s" (and maybe more) hashes to partition %s and is there: tb_move_partition would write over it.', found_name, partition),
					  HINT = 'Give a database that holds none of the partition''s buckets, or delete them there first.';
		END IF;
		first_copy := @extschema@.tb_move_copy(old_connect, new_connect, partition);
		copied := first_copy.buckets OPERATOR(pg_catalog.||)
			ARRAY(SELECT pg_catalog.unnest(first_copy.templates) EXCEPT SELECT pg_catalog.unnest(had_templates));
		EXECUTE pg_catalog.format('ALTER SERVER tokenbucket OPTIONS (SET %I %L)', option_name, fence);
	EXCEPTION WHEN OTHERS THEN
		GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
			detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
		failure := ARRAY[code, message, NULLIF(detail, ''), NULLIF(hint, '')];
	END;
	IF failure IS NULL THEN
		fence_from := pg_catalog.clock_timestamp();
		COMMIT;
		fenced_at := pg_catalog.clock_timestamp();
		-- 3, 4: wait for the calls begun before the fence; copy the state
		BEGIN
			LOOP
				PERFORM pg_catalog.pg_stat_clear_snapshot();
				SELECT CAST(pg_catalog.count(*) AS int4) INTO busy
				FROM pg_catalog.pg_stat_activity AS a
				WHERE a.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()
				  AND a.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
				  AND a.backend_type OPERATOR(pg_catalog.=) 'client backend'
				  AND a.state OPERATOR(pg_catalog.<>) 'idle'
				  AND COALESCE(a.xact_start, a.query_start) OPERATOR(pg_catalog.<) fenced_at;
				EXIT WHEN busy OPERATOR(pg_catalog.=) 0;
				IF pg_catalog.clock_timestamp() OPERATOR(pg_catalog.>=)
				   (fenced_at OPERATOR(pg_catalog.+) fence_timeout) THEN
					RAISE EXCEPTION 'sessions that began before the fence of partition % still run after %', partition, fence_timeout
						USING ERRCODE = 'lock_not_available',
							  DETAIL = pg_catalog.format('%s sessions of this database are in a statement or transaction begun before the fence, and may still call the partition''s old database.', busy),
							  HINT = 'The move was undone: retry it when they have ended (see pg_stat_activity), or with a longer fence_timeout.';
				END IF;
				PERFORM pg_catalog.pg_sleep(0.002);
			END LOOP;
			final_copy := @extschema@.tb_move_copy(old_connect, new_connect, partition);
			copied := ARRAY(SELECT pg_catalog.unnest(copied) UNION SELECT pg_catalog.unnest(final_copy.buckets));
			PERFORM @extschema@.tb_move_delete(new_connect,
				ARRAY(SELECT pg_catalog.unnest(first_copy.buckets)
					  EXCEPT SELECT pg_catalog.unnest(final_copy.buckets)),
				'the target database');
			-- 5: switch
			EXECUTE pg_catalog.format('ALTER SERVER tokenbucket OPTIONS (SET %I %L)', option_name, conninfo);
		EXCEPTION WHEN OTHERS THEN
			GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
				detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
			failure := ARRAY[code, message, NULLIF(detail, ''), NULLIF(hint, '')];
			EXECUTE pg_catalog.format('ALTER SERVER tokenbucket OPTIONS (SET %I %L)', option_name, old_conninfo);
		END;
		COMMIT;
		switched_at := pg_catalog.clock_timestamp();
	END IF;
	IF failure IS NOT NULL THEN
		-- undo the copies (not the templates the target had), as far as
		-- the target answers
		BEGIN
			PERFORM @extschema@.tb_move_delete(new_connect, copied, 'the target database');
		EXCEPTION WHEN OTHERS THEN
			NULL;
		END;
		PERFORM @extschema@.tb_routed_raise(failure);
	END IF;

	-- the old copies: the buckets, and the templates when no partition
	-- uses that database any more
	deleted := @extschema@.tb_move_delete(old_connect,
		final_copy.buckets OPERATOR(pg_catalog.||) ARRAY(
			SELECT r.name FROM @extschema@.tb_move_rows(old_connect, partition, 'the partition''s old database') AS r
			WHERE r.is_template
			  AND NOT EXISTS (SELECT FROM @extschema@.tb_cluster_partitions() AS c
							  WHERE c.conninfo OPERATOR(pg_catalog.=) old_conninfo)),
		'the partition''s old database');
	RAISE NOTICE 'partition % moved: % buckets and % templates copied; its calls were fenced for % ms (from % to %); % rows deleted from its old database',
		partition, pg_catalog.cardinality(final_copy.buckets), pg_catalog.cardinality(final_copy.templates),
		pg_catalog.round(CAST(pg_catalog.date_part('epoch', switched_at OPERATOR(pg_catalog.-) fence_from) * 1000 AS numeric), 1),
		fence_from, switched_at, deleted;
END
$$;

COMMENT ON PROCEDURE @extschema@.tb_move_partition(int4, text, interval) IS
	'move one partition''s buckets (and a copy of every template) to the database of a connection string while calls go on: its calls fenced (08001) only for the final copy and the switch';

REVOKE ALL ON FUNCTION
	@extschema@.tb_move_connstr(text),
	@extschema@.tb_move_remote_rows(text),
	@extschema@.tb_move_remote_write(text, text),
	@extschema@.tb_move_remote_delete(text, text[]),
	@extschema@.tb_move_raise(text, text, text, text, text),
	@extschema@.tb_move_rows(text, int4, text),
	@extschema@.tb_move_copy(text, text, int4),
	@extschema@.tb_move_delete(text, text[], text)
FROM PUBLIC;

REVOKE ALL ON PROCEDURE @extschema@.tb_move_partition(int4, text, interval) FROM PUBLIC;
