/* tokenbucket_proxy--1.3--1.4.sql: a bound on a call to a shard that does
 * not answer, by default (tokenbucket.proxy_timeout); a NULL refused where
 * tokenbucket 1.8 refuses one. */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION tokenbucket_proxy UPDATE TO '1.4'" to load this file. \quit

--
-- The bound on a call on a bucket (tokenbucket.proxy_timeout, a setting of
-- tokenbucket's library, which the proxy server must have: make install
-- puts it there).  PL/Proxy waits for a shard's answer as long as the
-- statement lasts, and a SET statement_timeout inside a function counts
-- from the next statement only, so a shard that accepts and never
-- answers, or a frozen shard backend, held a caller with no
-- statement_timeout for ever.  tb_proxy_bound arms a timer of this
-- backend's own for the call: when it passes, the statement is cancelled
-- as statement_timeout would cancel it (PL/Proxy then cancels the call on
-- the shard), and once more a second later, for a frozen shard that does
-- not answer that cancel either (when the cluster has no query_timeout).
-- A wait's own timeout is added to it; a wait without one has no bound but
-- statement_timeout.  tb_proxy_unbound ends it, and says whether it
-- passed.
--
CREATE FUNCTION @extschema@.tb_proxy_bound(kind text, timeout interval)
RETURNS void
AS '$libdir/tokenbucket', 'tb_proxy_bound'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.tb_proxy_bound(text, interval) IS
	'bound the routed call about to be made: cancel it after tokenbucket.proxy_timeout (for a wait, after its timeout and that)';

CREATE FUNCTION @extschema@.tb_proxy_unbound()
RETURNS boolean
AS '$libdir/tokenbucket', 'tb_proxy_unbound'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.tb_proxy_unbound() IS
	'end the bound of tb_proxy_bound: whether it passed';

--
-- What a call on a bucket does when its PL/Proxy function failed (attempt
-- 1 or 2; kind: 'read' for tb_peek, 'wait' for the calls that wait,
-- 'write' for the others): returns when the call is to be run once more
-- (its bound goes on), else ends the call's bound and raises.
--   * The call was not sent (PQsendQueryParams, PQflush), or the shard ended
--     the session before it ran it (57P01, 57P02, 57P03 from the shard: a
--     restart; the call's transaction there did not commit): run once more
--     on a new connection, then 08006.
--   * PL/Proxy could not connect (PQconnectStart, PQconnectPoll: refused,
--     the shard starting up or shutting down): 08001, the call did nothing.
--   * The connection was lost while the call ran (PQconsumeInput), or the
--     shard did not answer PL/Proxy's cancel within the cluster's
--     query_timeout: 08006, and the call may have been done; a tb_peek is
--     run once more after a lost connection.
--   * The call's bound passed (a shard that does not answer: PL/Proxy gave
--     up connecting, or cancelled the call there), or the statement's
--     statement_timeout passed while a call that does not wait was on its
--     way: 08006, most likely nothing done.  A call that waits keeps 57014
--     for statement_timeout: its wait may simply have lasted.
--   * Anything else is raised again as it came.
--
CREATE OR REPLACE FUNCTION @extschema@.tb_routed_failed(name text, attempt int4, kind text,
	code text, message text, detail text, hint text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
	failed text[] := pg_catalog.regexp_match(message,
		'^PL/Proxy function [^ ]+\([0-9]+\): (\[[^]]*\] ([A-Za-z]+): |query timeout$|connect timeout to: )');
	timeout text := pg_catalog.current_setting('statement_timeout');
	not_sent boolean := (code OPERATOR(pg_catalog.=) 'XX000'
		AND failed[2] OPERATOR(pg_catalog.=) ANY (ARRAY['PQsendQueryParams', 'PQflush']))
		OR (code OPERATOR(pg_catalog.=) ANY (ARRAY['57P01', '57P02', '57P03'])
			AND message OPERATOR(pg_catalog.~) '^[^ ]+\([0-9]+\): \[[^]]*\] REMOTE ');
	lost boolean := code OPERATOR(pg_catalog.=) 'XX000'
		AND (failed[2] OPERATOR(pg_catalog.=) 'PQconsumeInput'
			 OR failed[1] OPERATOR(pg_catalog.=) 'query timeout');
	bound_passed boolean;
BEGIN
	IF attempt OPERATOR(pg_catalog.=) 1
	   AND (not_sent OR (lost AND kind OPERATOR(pg_catalog.=) 'read'
						 AND failed[2] OPERATOR(pg_catalog.=) 'PQconsumeInput')) THEN
		RETURN;
	END IF;
	bound_passed := @extschema@.tb_proxy_unbound();
	IF code OPERATOR(pg_catalog.=) 'XX000'
	   AND (failed[2] OPERATOR(pg_catalog.=) ANY (ARRAY['PQconnectStart', 'PQconnectPoll'])
			OR failed[1] OPERATOR(pg_catalog.=) 'connect timeout to: ') THEN
		RAISE EXCEPTION 'could not connect to the shard of token bucket "%"', name
			USING ERRCODE = 'sqlclient_unable_to_establish_sqlconnection',
				  DETAIL = message,
				  HINT = 'The call reached no shard and did nothing: it may be retried.';
	END IF;
	IF not_sent THEN
		RAISE EXCEPTION 'lost the connection to the shard of token bucket "%"', name
			USING ERRCODE = 'connection_failure',
				  DETAIL = message,
				  HINT = 'The shard ended the session before the call ran, on a new connection too: the call did nothing, and may be retried.';
	END IF;
	IF lost THEN
		RAISE EXCEPTION 'lost the connection to the shard of token bucket "%"', name
			USING ERRCODE = 'connection_failure',
				  DETAIL = message,
				  HINT = 'The call may be retried, but the shard may have done it before it stopped answering.';
	END IF;
	IF code OPERATOR(pg_catalog.=) '57014' AND bound_passed THEN
		RAISE EXCEPTION 'the shard of token bucket "%" did not answer within tokenbucket.proxy_timeout (%)', name,
			pg_catalog.current_setting('tokenbucket.proxy_timeout')
			USING ERRCODE = 'connection_failure',
				  DETAIL = 'PL/Proxy gave up connecting to it, or cancelled the call there.',
				  HINT = 'The call most likely did nothing: it may be retried.';
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
-- The calls on one bucket (or on buckets of one shard key): each tb_<f>
-- refuses a NULL where tokenbucket 1.8 refuses one (22004, the same
-- message), is not STRICT (as tokenbucket's are not), and bounds its call
-- with tb_proxy_bound.  Made again from the list of
-- tokenbucket_proxy--1.4.sql, the same statements (CREATE OR REPLACE: the
-- grants made on them are kept); their tb_routed_<f> do not change.
--
DO $make$
DECLARE
	-- the columns of tb_try and tb_peek, and of tb_try_all after the name
	answer constant text := 'granted boolean, remaining float8, retry_after interval, reset_after interval, retry_after_seconds float8, reset_after_seconds float8';
	c record;
	names text[];			-- the arguments' names
	wrapped text;			-- tb_<f>'s call of tb_routed_<f>(arg, ...)
	bucket text;			-- what names the bucket to tb_routed_failed
	out_columns text;		-- result as OUT arguments
	params text;			-- tb_<f>'s arguments (and OUT columns)
	returns text;
	declared text;			-- tb_<f>'s variables besides detail and hint
	checks text;			-- its checks of the arguments that may not be NULL
	calling text;			-- its call of tb_routed_<f>, in the loop
	failure text;			-- where it finds an error returned as data
	answers text;			-- its statements at the end
BEGIN
	FOR c IN
		SELECT * FROM (VALUES
		('acquire', 'name text', '',
		 'value', 'boolean', 'STRICT', 'write',
		 'take 1 token from the bucket on its shard: true, or false (taking nothing)'),
		('acquire', 'name text, cost float8', '',
		 'value', 'boolean', 'STRICT', 'write',
		 'take cost tokens from the bucket on its shard: true, or false (taking nothing)'),
		('acquire', 'name text, cost float8, reserve float8', 'reserve',
		 'value', 'boolean', 'STRICT', 'write',
		 'take cost tokens from the bucket on its shard if it holds them and reserve x capacity besides: true, or false (taking nothing)'),
		('try', 'name text, cost float8 DEFAULT 1', '',
		 'row', answer, 'STRICT', 'write',
		 'tb_acquire on the bucket''s shard, with the tokens remaining and how long until a retry can succeed and until the bucket is full'),
		('try', 'name text, cost float8, reserve float8', 'reserve',
		 'row', answer, 'STRICT', 'write',
		 'tb_acquire with a reserve on the bucket''s shard, with the tokens remaining and how long until a retry can succeed and until the bucket is full'),
		('peek', 'name text, cost float8 DEFAULT 1', '',
		 'row', answer, 'STRICT', 'read',
		 'what tb_try would answer now on the bucket''s shard, taking nothing'),
		('peek', 'name text, cost float8, reserve float8', 'reserve',
		 'row', answer, 'STRICT', 'read',
		 'what tb_try with a reserve would answer now on the bucket''s shard, taking nothing'),
		('acquire_wait', 'name text, cost float8 DEFAULT 1, timeout interval DEFAULT NULL', 'timeout',
		 'value', 'boolean', 'CALLED ON NULL INPUT', 'wait',
		 'wait on the bucket''s shard until cost tokens can be taken (true) or timeout passes (false); the proxy''s statement_timeout bounds it too'),
		('acquire_all', 'names text[], costs float8[] DEFAULT NULL', 'costs',
		 'value', 'boolean', 'CALLED ON NULL INPUT', 'write',
		 'take costs[i] from every bucket or from none, on the one shard their shard key names'),
		('acquire_all', 'names text[], costs float8[], reserve float8', 'costs reserve',
		 'value', 'boolean', 'CALLED ON NULL INPUT', 'write',
		 'take costs[i] from every bucket, each keeping reserve x its capacity, or from none, on the one shard their shard key names'),
		('acquire_all_wait', 'names text[], costs float8[] DEFAULT NULL, timeout interval DEFAULT NULL', 'costs timeout',
		 'value', 'boolean', 'CALLED ON NULL INPUT', 'wait',
		 'tb_acquire_all, waiting on the buckets'' shard as tb_acquire_wait does'),
		('try_all', 'names text[], costs float8[] DEFAULT NULL', 'costs',
		 'rows', pg_catalog.format('name text, %s', answer), 'CALLED ON NULL INPUT', 'write',
		 'tb_acquire_all with a row per bucket, on the one shard their shard key names'),
		('try_all', 'names text[], costs float8[], reserve float8', 'costs reserve',
		 'rows', pg_catalog.format('name text, %s', answer), 'CALLED ON NULL INPUT', 'write',
		 'tb_acquire_all with a reserve and a row per bucket, on the one shard their shard key names'),
		('refund', 'name text, tokens float8', '',
		 'value', 'float8', 'STRICT', 'write',
		 'give unused tokens back to the bucket on its shard; returns the tokens it holds'),
		('settle', 'name text, reserved float8, used float8', '',
		 'value', 'float8', 'STRICT', 'write',
		 'refund reserved - used, or take used - reserved more, on the bucket''s shard; returns the tokens it holds'),
		('sync', 'name text, remaining float8', '',
		 'value', 'float8', 'STRICT', 'write',
		 'lower the tokens of the bucket on its shard to what the provider reports remaining; returns the tokens it holds'),
		('pause', 'name text, duration interval', '',
		 'void', NULL, 'STRICT', 'write',
		 'no grants from the bucket on its shard for this long'),
		('pause_until', 'name text, until timestamptz', '',
		 'void', NULL, 'STRICT', 'write',
		 'no grants from the bucket on its shard until a moment'),
		('reset', 'name text', '',
		 'void', NULL, 'STRICT', 'write',
		 'fill the bucket on its shard and lift any pause')
		) AS l(f, args, nulls, shape, result, strictness, kind, comment)
	LOOP
		names := pg_catalog.string_to_array(pg_catalog.regexp_replace(c.args, '([^ ,]+) [^,]*', '\1', 'g'), ', ');
		-- a STRICT tb_routed_<f> would answer NULL for a NULL reserve: 0 is none too
		wrapped := pg_catalog.format('tb_routed_%s(%s)', c.f,
			(SELECT pg_catalog.string_agg(CASE WHEN c.strictness OPERATOR(pg_catalog.=) 'STRICT'
					AND a.a OPERATOR(pg_catalog.=) ANY (pg_catalog.string_to_array(c.nulls, ' '))
					THEN pg_catalog.format('COALESCE(%s, 0)', a.a) ELSE a.a END, ', ' ORDER BY a.n)
			 FROM pg_catalog.unnest(names) WITH ORDINALITY AS a(a, n)));
		checks := (SELECT pg_catalog.string_agg(pg_catalog.format($check$	IF %1$s IS NULL THEN
		RAISE EXCEPTION 'argument "%1$s" of tb_%2$s must not be NULL'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
$check$, a.a, c.f), '' ORDER BY a.n)
			FROM pg_catalog.unnest(names) WITH ORDINALITY AS a(a, n)
			WHERE a.a OPERATOR(pg_catalog.<>) ALL (pg_catalog.string_to_array(c.nulls, ' ')));
		bucket := CASE WHEN c.args OPERATOR(pg_catalog.~) '^name ' THEN 'name' ELSE 'names[1]' END;

		-- what the shape changes; answers has a line "column := r.column;"
		-- for each column of result
		IF c.shape OPERATOR(pg_catalog.=) 'value' THEN
			params := c.args;
			returns := c.result;
			declared := E'\tr record;\n';
			calling := pg_catalog.format(E'\t\t\tr := @extschema@.%s;\n', wrapped);
			failure := 'r.error';
			answers := E'\tRETURN r.result;\n';
		ELSIF c.shape OPERATOR(pg_catalog.=) 'row' THEN
			out_columns := pg_catalog.regexp_replace(c.result, '([^ ,]+ [^,]+)', 'OUT \1', 'g');
			params := pg_catalog.format('%s, %s', c.args, out_columns);
			returns := 'record';
			declared := E'\tr record;\n';
			calling := pg_catalog.format(E'\t\t\tr := @extschema@.%s;\n', wrapped);
			failure := 'r.error';
			answers := pg_catalog.regexp_replace(c.result, '([^ ,]+) [^,]+(, |$)', E'\t\\1 := r.\\1;\n', 'g');
		ELSIF c.shape OPERATOR(pg_catalog.=) 'rows' THEN
			params := c.args;
			returns := pg_catalog.format('TABLE (%s)', c.result);
			declared := E'\tr record;\n\tfailure text[];\n';
			calling := pg_catalog.format($rows$			FOR r IN SELECT * FROM @extschema@.%s LOOP
				failure := r.error;
				EXIT WHEN failure IS NOT NULL;
%s				RETURN NEXT;
			END LOOP;
$rows$, wrapped, pg_catalog.regexp_replace(c.result, '([^ ,]+) [^,]+(, |$)', E'\t\t\t\t\\1 := r.\\1;\n', 'g'));
			failure := 'failure';
			answers := '';
		ELSE
			params := c.args;
			returns := 'void';
			declared := E'\tfailure text[];\n';
			calling := pg_catalog.format(E'\t\t\tfailure := @extschema@.%s;\n', wrapped);
			failure := 'failure';
			answers := '';
		END IF;

		EXECUTE pg_catalog.format('CREATE OR REPLACE FUNCTION @extschema@.tb_%s(%s) RETURNS %s LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT AS %L',
			c.f, params, returns, pg_catalog.format($body$
DECLARE
%1$s	detail text;
	hint text;
BEGIN
%7$s	PERFORM @extschema@.tb_proxy_bound(%4$L, %8$s);
	FOR attempt IN 1..2 LOOP
		BEGIN
%2$s			EXIT;
		EXCEPTION WHEN OTHERS OR query_canceled THEN
			GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
			PERFORM @extschema@.tb_routed_failed(%3$s, attempt, %4$L, SQLSTATE, SQLERRM, detail, hint);
		END;
	END LOOP;
	PERFORM @extschema@.tb_proxy_unbound();
	IF %5$s IS NOT NULL THEN
		PERFORM @extschema@.tb_routed_raise(%5$s);
	END IF;
%6$sEND
$body$, declared, calling, bucket, c.kind, failure, answers, coalesce(checks, ''),
			CASE WHEN c.kind OPERATOR(pg_catalog.=) 'wait' THEN 'timeout' ELSE 'NULL' END));
	END LOOP;
END
$make$;

--
-- Making, dropping and purging are not STRICT either: a NULL goes to the
-- shard, whose tokenbucket (1.8 or later) refuses it, as a direct call does
-- (tb_alter never was).  Altered, not replaced: grants are kept.
--
ALTER FUNCTION @extschema@.tb_create(text, float8, float8, interval, boolean) CALLED ON NULL INPUT;
ALTER FUNCTION @extschema@.tb_drop(text) CALLED ON NULL INPUT;
ALTER FUNCTION @extschema@.tb_purge(interval) CALLED ON NULL INPUT;
