/* tokenbucket_proxy--1.0--1.1.sql: tokenbucket 1.7's forms with a reserve. */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION tokenbucket_proxy UPDATE TO '1.1'" to load this file. \quit

--
-- tokenbucket 1.7 adds a form with reserve (a share of the capacity the
-- call must leave) beside each form that takes or looks; the proxy has
-- them too, routed as the forms without.  The shards must run tokenbucket
-- 1.7 or later.  (Leases are not proxied.)
--
CREATE FUNCTION @extschema@.tb_acquire(name text, cost float8, reserve float8)
RETURNS boolean
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
$$;

COMMENT ON FUNCTION @extschema@.tb_acquire(text, float8, float8) IS
	'take cost tokens from the bucket on its shard if it holds them and reserve x capacity besides: true, or false (taking nothing)';

CREATE FUNCTION @extschema@.tb_try(name text, cost float8, reserve float8,
	OUT granted boolean, OUT remaining float8,
	OUT retry_after interval, OUT reset_after interval,
	OUT retry_after_seconds float8, OUT reset_after_seconds float8)
RETURNS record
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
$$;

COMMENT ON FUNCTION @extschema@.tb_try(text, float8, float8) IS
	'tb_acquire with a reserve on the bucket''s shard, with the tokens remaining and how long until a retry can succeed and until the bucket is full';

CREATE FUNCTION @extschema@.tb_peek(name text, cost float8, reserve float8,
	OUT granted boolean, OUT remaining float8,
	OUT retry_after interval, OUT reset_after interval,
	OUT retry_after_seconds float8, OUT reset_after_seconds float8)
RETURNS record
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
$$;

COMMENT ON FUNCTION @extschema@.tb_peek(text, float8, float8) IS
	'what tb_try with a reserve would answer now on the bucket''s shard, taking nothing';

CREATE FUNCTION @extschema@.tb_acquire_all(names text[], costs float8[], reserve float8)
RETURNS boolean
LANGUAGE plproxy VOLATILE
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route_all(names);
$$;

COMMENT ON FUNCTION @extschema@.tb_acquire_all(text[], float8[], float8) IS
	'take costs[i] from every bucket, each keeping reserve x its capacity, or from none, on the one shard their shard key names';

CREATE FUNCTION @extschema@.tb_try_all(names text[], costs float8[], reserve float8)
RETURNS TABLE (name text, granted boolean, remaining float8,
			   retry_after interval, reset_after interval,
			   retry_after_seconds float8, reset_after_seconds float8)
LANGUAGE plproxy VOLATILE
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route_all(names);
$$;

COMMENT ON FUNCTION @extschema@.tb_try_all(text[], float8[], float8) IS
	'tb_acquire_all with a reserve and a row per bucket, on the one shard their shard key names';
