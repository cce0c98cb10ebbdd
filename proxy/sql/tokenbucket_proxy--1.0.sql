/* tokenbucket_proxy--1.0.sql: tokenbucket's API on a proxy database. */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION tokenbucket_proxy" to load this file. \quit

--
-- Every function of tokenbucket 1.4 that an application or a DBA calls,
-- with the same name, arguments and result, as a PL/Proxy function of the
-- cluster named tokenbucket (a foreign server of the plproxy wrapper, see
-- README.md, "More than one server").  Each call runs, whole, on the one
-- shard (partition) that holds its bucket; the shard's tokenbucket does the
-- work exactly as it does for a direct call, and PL/Proxy relays its answer
-- or its error.  PL/Proxy calls the shard's function in the schema this
-- extension is in: create both in the same one (public by default).
--

--
-- Routing.  A bucket's shard follows its shard key: the part of its name
-- between the first { and the next } when that part is not empty (Redis
-- Cluster's hash tag), else the whole name.  The key's hash is the first
-- 32 bits of its MD5, which no PostgreSQL version changes (unlike
-- hashtext()); PL/Proxy maps a hash to partition hash & (partitions - 1).
--
CREATE FUNCTION @extschema@.tb_shard_key(name text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
SELECT COALESCE(pg_catalog.substring(name, '^[^{]*\{([^}]+)\}'), name)
$$;

COMMENT ON FUNCTION @extschema@.tb_shard_key(text) IS
	'what routes a bucket name: its {hash tag} when it has a non-empty one, else the whole name';

CREATE FUNCTION @extschema@.tb_shard_hash(name text)
RETURNS int4
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
SELECT CAST(CAST('x' OPERATOR(pg_catalog.||)
                 pg_catalog.substr(pg_catalog.md5(@extschema@.tb_shard_key(name)), 1, 8)
                 AS pg_catalog.bit(32)) AS pg_catalog.int4)
$$;

COMMENT ON FUNCTION @extschema@.tb_shard_hash(text) IS
	'the routing hash of a bucket name: the first 32 bits of the MD5 of its shard key';

CREATE FUNCTION @extschema@.tb_partitions()
RETURNS int4
LANGUAGE sql STABLE STRICT PARALLEL SAFE
AS $$
SELECT pg_catalog.count(*)::pg_catalog.int4
FROM pg_catalog.pg_foreign_server AS s, pg_catalog.unnest(s.srvoptions) AS o(option)
WHERE s.srvname OPERATOR(pg_catalog.=) 'tokenbucket'
  AND o.option OPERATOR(pg_catalog.~) '^p[0-9]+='
$$;

COMMENT ON FUNCTION @extschema@.tb_partitions() IS
	'how many partitions the cluster tokenbucket has (0 when there is no such server)';

CREATE FUNCTION @extschema@.tb_shard(name text)
RETURNS int4
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
AS $$
DECLARE
	partitions int4 := @extschema@.tb_partitions();
BEGIN
	IF partitions OPERATOR(pg_catalog.=) 0 THEN
		RAISE EXCEPTION 'the PL/Proxy cluster "tokenbucket" has no partitions'
			USING ERRCODE = 'undefined_object',
				  DETAIL = 'tokenbucket_proxy routes every call to a partition of the foreign server named tokenbucket, and none with options p0, p1, ... exists.',
				  HINT = 'Create it: CREATE SERVER tokenbucket FOREIGN DATA WRAPPER plproxy OPTIONS (p0 ''dbname=... host=...'', p1 ''...'').';
	END IF;
	RETURN @extschema@.tb_shard_hash(name) OPERATOR(pg_catalog.&) (partitions OPERATOR(pg_catalog.-) 1);
END
$$;

COMMENT ON FUNCTION @extschema@.tb_shard(text) IS
	'the partition (p0 is 0) that holds a bucket, in the cluster as configured now';

-- the one partition of a call on one bucket; a NULL name goes to the
-- first, which answers it as a direct call would
CREATE FUNCTION @extschema@.tb_route(name text)
RETURNS int4
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT COALESCE(@extschema@.tb_shard_hash(name), 0)
$$;

COMMENT ON FUNCTION @extschema@.tb_route(text) IS
	'PL/Proxy''s RUN ON for calls on one bucket: its routing hash (0 for NULL)';

-- a template is on every partition, so that each makes the per-key
-- buckets its keys route to; a bucket is on one
CREATE FUNCTION @extschema@.tb_route_each(name text)
RETURNS SETOF int4
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT @extschema@.tb_route(name)
WHERE name IS NULL OR pg_catalog.right(name, 1) OPERATOR(pg_catalog.<>) '*'
UNION ALL
SELECT pg_catalog.generate_series(0, @extschema@.tb_partitions() OPERATOR(pg_catalog.-) 1)
WHERE pg_catalog.right(name, 1) OPERATOR(pg_catalog.=) '*'
$$;

COMMENT ON FUNCTION @extschema@.tb_route_each(text) IS
	'PL/Proxy''s RUN ON for making, changing and dropping: every partition for a template, else the bucket''s';

-- the buckets of one all-or-nothing call must share a shard key, so the
-- call runs in one transaction on one shard; any other split would grant
-- on one shard what another refused.  The rule is the key, not the
-- partition two keys happen to share today, so a call that works keeps
-- working when partitions are added.
CREATE FUNCTION @extschema@.tb_route_all(names text[])
RETURNS int4
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
	first text;
	other text;
BEGIN
	SELECT n INTO first
	FROM pg_catalog.unnest(names) AS n WHERE n IS NOT NULL LIMIT 1;
	SELECT n INTO other
	FROM pg_catalog.unnest(names) AS n
	WHERE @extschema@.tb_shard_key(n) OPERATOR(pg_catalog.<>) @extschema@.tb_shard_key(first)
	LIMIT 1;
	IF other IS NOT NULL THEN
		RAISE EXCEPTION 'token buckets "%" and "%" are not kept on one shard', first, other
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = pg_catalog.format('Through tokenbucket_proxy, the buckets of one call must share a shard key, the part of a name between the first { and the next }, or the whole name when there is none: "%s" has "%s", "%s" has "%s".',
											 first, @extschema@.tb_shard_key(first),
											 other, @extschema@.tb_shard_key(other)),
				  HINT = 'Give buckets taken together one hash tag, as in ''{openai}:rpm'' and ''{openai}:tpm'': names with the same tag are kept on one shard.';
	END IF;
	RETURN @extschema@.tb_route(first);
END
$$;

COMMENT ON FUNCTION @extschema@.tb_route_all(text[]) IS
	'PL/Proxy''s RUN ON for calls on several buckets: their common routing hash, or 22023 when they have none';

--
-- Spending and looking: one shard each, executable by PUBLIC as in
-- tokenbucket.
--
CREATE FUNCTION @extschema@.tb_acquire(name text)
RETURNS boolean
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
$$;

COMMENT ON FUNCTION @extschema@.tb_acquire(text) IS
	'take 1 token from the bucket on its shard: true, or false (taking nothing)';

CREATE FUNCTION @extschema@.tb_acquire(name text, cost float8)
RETURNS boolean
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
$$;

COMMENT ON FUNCTION @extschema@.tb_acquire(text, float8) IS
	'take cost tokens from the bucket on its shard: true, or false (taking nothing)';

CREATE FUNCTION @extschema@.tb_try(name text, cost float8 DEFAULT 1,
	OUT granted boolean, OUT remaining float8,
	OUT retry_after interval, OUT reset_after interval,
	OUT retry_after_seconds float8, OUT reset_after_seconds float8)
RETURNS record
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
$$;

COMMENT ON FUNCTION @extschema@.tb_try(text, float8) IS
	'tb_acquire on the bucket''s shard, with the tokens remaining and how long until a retry can succeed and until the bucket is full';

CREATE FUNCTION @extschema@.tb_peek(name text, cost float8 DEFAULT 1,
	OUT granted boolean, OUT remaining float8,
	OUT retry_after interval, OUT reset_after interval,
	OUT retry_after_seconds float8, OUT reset_after_seconds float8)
RETURNS record
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
$$;

COMMENT ON FUNCTION @extschema@.tb_peek(text, float8) IS
	'what tb_try would answer now on the bucket''s shard, taking nothing';

CREATE FUNCTION @extschema@.tb_acquire_wait(name text, cost float8 DEFAULT 1,
	timeout interval DEFAULT NULL)
RETURNS boolean
LANGUAGE plproxy VOLATILE
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
$$;

COMMENT ON FUNCTION @extschema@.tb_acquire_wait(text, float8, interval) IS
	'wait on the bucket''s shard until cost tokens can be taken (true) or timeout passes (false); the proxy''s statement_timeout bounds it too';

CREATE FUNCTION @extschema@.tb_acquire_all(names text[], costs float8[] DEFAULT NULL)
RETURNS boolean
LANGUAGE plproxy VOLATILE
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route_all(names);
$$;

COMMENT ON FUNCTION @extschema@.tb_acquire_all(text[], float8[]) IS
	'take costs[i] from every bucket or from none, on the one shard their shard key names';

CREATE FUNCTION @extschema@.tb_acquire_all_wait(names text[], costs float8[] DEFAULT NULL,
	timeout interval DEFAULT NULL)
RETURNS boolean
LANGUAGE plproxy VOLATILE
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route_all(names);
$$;

COMMENT ON FUNCTION @extschema@.tb_acquire_all_wait(text[], float8[], interval) IS
	'tb_acquire_all, waiting on the buckets'' shard as tb_acquire_wait does';

CREATE FUNCTION @extschema@.tb_try_all(names text[], costs float8[] DEFAULT NULL)
RETURNS TABLE (name text, granted boolean, remaining float8,
			   retry_after interval, reset_after interval,
			   retry_after_seconds float8, reset_after_seconds float8)
LANGUAGE plproxy VOLATILE
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route_all(names);
$$;

COMMENT ON FUNCTION @extschema@.tb_try_all(text[], float8[]) IS
	'tb_acquire_all with a row per bucket, on the one shard their shard key names';

--
-- Giving back, pausing, resetting: one shard each, not for PUBLIC (one
-- login could otherwise lift or stop every limit).
--
CREATE FUNCTION @extschema@.tb_refund(name text, tokens float8)
RETURNS float8
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
$$;

COMMENT ON FUNCTION @extschema@.tb_refund(text, float8) IS
	'give unused tokens back to the bucket on its shard; returns the tokens it holds';

CREATE FUNCTION @extschema@.tb_settle(name text, reserved float8, used float8)
RETURNS float8
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
$$;

COMMENT ON FUNCTION @extschema@.tb_settle(text, float8, float8) IS
	'refund reserved - used, or take used - reserved more, on the bucket''s shard; returns the tokens it holds';

CREATE FUNCTION @extschema@.tb_sync(name text, remaining float8)
RETURNS float8
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
$$;

COMMENT ON FUNCTION @extschema@.tb_sync(text, float8) IS
	'lower the tokens of the bucket on its shard to what the provider reports remaining; returns the tokens it holds';

CREATE FUNCTION @extschema@.tb_pause(name text, duration interval)
RETURNS void
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
$$;

COMMENT ON FUNCTION @extschema@.tb_pause(text, interval) IS
	'no grants from the bucket on its shard for this long';

CREATE FUNCTION @extschema@.tb_pause_until(name text, until timestamptz)
RETURNS void
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
$$;

COMMENT ON FUNCTION @extschema@.tb_pause_until(text, timestamptz) IS
	'no grants from the bucket on its shard until a moment';

CREATE FUNCTION @extschema@.tb_reset(name text)
RETURNS void
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route(name);
$$;

COMMENT ON FUNCTION @extschema@.tb_reset(text) IS
	'fill the bucket on its shard and lift any pause';

--
-- Making, changing, dropping and purging.  A template, and tb_purge, act
-- on every partition: PL/Proxy sends the call to each at once, and each
-- commits its part on its own, so one that fails leaves the others done
-- (README.md says how to finish the job).  PL/Proxy runs a call on several
-- partitions only as a set-returning function: the tb_shards_* functions
-- are those, and tb_create, tb_alter, tb_drop and tb_purge keep
-- tokenbucket's results around them.
--
CREATE FUNCTION @extschema@.tb_shards_create(name text, capacity float8, refill float8,
	per interval, memory boolean)
RETURNS SETOF boolean
LANGUAGE plproxy VOLATILE
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route_each(name);
	SELECT true AS tb_shards_create
	FROM @extschema@.tb_create(name, capacity, refill, per, memory);
$$;

COMMENT ON FUNCTION @extschema@.tb_shards_create(text, float8, float8, interval, boolean) IS
	'tb_create on the shard of a bucket, or on every shard for a template: a row per shard';

CREATE FUNCTION @extschema@.tb_create(name text, capacity float8, refill float8,
	per interval DEFAULT '1 second', memory boolean DEFAULT false)
RETURNS void
LANGUAGE sql VOLATILE STRICT
AS $$
SELECT pg_catalog.count(*)
FROM @extschema@.tb_shards_create(name, capacity, refill, per, memory)
$$;

COMMENT ON FUNCTION @extschema@.tb_create(text, float8, float8, interval, boolean) IS
	'make a bucket on its shard, full; a template (name ending in *) on every shard';

CREATE FUNCTION @extschema@.tb_shards_alter(name text, capacity float8, refill float8,
	per interval)
RETURNS SETOF boolean
LANGUAGE plproxy VOLATILE
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route_each(name);
	SELECT true AS tb_shards_alter
	FROM @extschema@.tb_alter(name, capacity, refill, per);
$$;

COMMENT ON FUNCTION @extschema@.tb_shards_alter(text, float8, float8, interval) IS
	'tb_alter on the shard of a bucket, or on every shard for a template: a row per shard';

CREATE FUNCTION @extschema@.tb_alter(name text, capacity float8 DEFAULT NULL,
	refill float8 DEFAULT NULL, per interval DEFAULT NULL)
RETURNS void
LANGUAGE sql VOLATILE
AS $$
SELECT pg_catalog.count(*)
FROM @extschema@.tb_shards_alter(name, capacity, refill, per)
$$;

COMMENT ON FUNCTION @extschema@.tb_alter(text, float8, float8, interval) IS
	'change a bucket''s settings on its shard; a template''s, and its buckets'', on every shard';

CREATE FUNCTION @extschema@.tb_shards_drop(name text)
RETURNS SETOF boolean
LANGUAGE plproxy VOLATILE
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route_each(name);
	SELECT dropped AS tb_shards_drop FROM @extschema@.tb_drop(name) AS dropped;
$$;

COMMENT ON FUNCTION @extschema@.tb_shards_drop(text) IS
	'tb_drop on the shard of a bucket, or on every shard for a template: a row per shard';

CREATE FUNCTION @extschema@.tb_drop(name text)
RETURNS boolean
LANGUAGE sql VOLATILE STRICT
AS $$
SELECT COALESCE(pg_catalog.bool_or(dropped), false)
FROM @extschema@.tb_shards_drop(name) AS dropped
$$;

COMMENT ON FUNCTION @extschema@.tb_drop(text) IS
	'remove a bucket from its shard, a template (with its buckets) from every shard; false when there was none';

CREATE FUNCTION @extschema@.tb_shards_purge(idle interval)
RETURNS SETOF bigint
LANGUAGE plproxy VOLATILE
AS $$
	CLUSTER 'tokenbucket';
	RUN ON ALL;
	SELECT purged AS tb_shards_purge FROM @extschema@.tb_purge(idle) AS purged;
$$;

COMMENT ON FUNCTION @extschema@.tb_shards_purge(interval) IS
	'tb_purge on every shard: a row per shard';

CREATE FUNCTION @extschema@.tb_purge(idle interval DEFAULT '1 hour')
RETURNS bigint
LANGUAGE sql VOLATILE STRICT
AS $$
SELECT pg_catalog.sum(purged)::pg_catalog.int8
FROM @extschema@.tb_shards_purge(idle) AS purged
$$;

COMMENT ON FUNCTION @extschema@.tb_purge(interval) IS
	'delete idle, full template-made buckets on every shard; returns how many in all';

--
-- Looking at every shard: tb_status asks each partition in turn, so each
-- row says which one it came from.  A template is on every shard, and so
-- has a row for each.
--
CREATE FUNCTION @extschema@.tb_shard_status(shard int4,
	OUT name text, OUT capacity float8, OUT refill_rate float8, OUT tokens float8,
	OUT full_at timestamptz, OUT paused_until timestamptz, OUT debt float8,
	OUT template text, OUT is_template boolean, OUT memory boolean)
RETURNS SETOF record
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON shard;
	SELECT b.name, b.capacity, b.refill_rate, b.tokens, b.full_at, b.paused_until,
	       b.debt, b.template, b.is_template, b.memory
	FROM @extschema@.tb_status AS b;
$$;

COMMENT ON FUNCTION @extschema@.tb_shard_status(int4) IS
	'tb_status of one partition (p0 is 0)';

CREATE VIEW @extschema@.tb_status AS
SELECT p.shard, s.name, s.capacity, s.refill_rate, s.tokens, s.full_at, s.paused_until,
	   s.debt, s.template, s.is_template, s.memory
FROM pg_catalog.generate_series(0, @extschema@.tb_partitions() OPERATOR(pg_catalog.-) 1) AS p(shard),
	 LATERAL @extschema@.tb_shard_status(p.shard) AS s;

COMMENT ON VIEW @extschema@.tb_status IS
	'every shard''s tb_status, with the partition each row came from';

--
-- What tokenbucket keeps from PUBLIC, kept from PUBLIC here too; the
-- helpers behind tb_create, tb_alter, tb_drop, tb_purge and tb_status
-- with them.  The shards check again, as the role the user mapping names.
--
REVOKE ALL ON FUNCTION
	@extschema@.tb_refund(text, float8),
	@extschema@.tb_settle(text, float8, float8),
	@extschema@.tb_sync(text, float8),
	@extschema@.tb_pause(text, interval),
	@extschema@.tb_pause_until(text, timestamptz),
	@extschema@.tb_reset(text),
	@extschema@.tb_create(text, float8, float8, interval, boolean),
	@extschema@.tb_shards_create(text, float8, float8, interval, boolean),
	@extschema@.tb_alter(text, float8, float8, interval),
	@extschema@.tb_shards_alter(text, float8, float8, interval),
	@extschema@.tb_drop(text),
	@extschema@.tb_shards_drop(text),
	@extschema@.tb_purge(interval),
	@extschema@.tb_shards_purge(interval),
	@extschema@.tb_shard_status(int4)
FROM PUBLIC;
