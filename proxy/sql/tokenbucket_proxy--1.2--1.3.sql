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
-- of the bucket (of the shard key, for several buckets).
--
CREATE FUNCTION @extschema@.tb_routed_acquire(name text,
	OUT result boolean, OUT error text[])
RETURNS record
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
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
