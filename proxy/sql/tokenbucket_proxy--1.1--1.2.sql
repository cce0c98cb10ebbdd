/* tokenbucket_proxy--1.1--1.2.sql: the cluster as PL/Proxy reads it;
 * counters summed over the shards. */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION tokenbucket_proxy UPDATE TO '1.2'" to load this file. \quit

--
-- The cluster's partitions, read as PL/Proxy reads them.  From the foreign
-- server tokenbucket when there is one: PL/Proxy takes an option for a
-- partition when its name is p or partition_ followed by a number as
-- strtoul reads it (spaces, a sign, digits; none at all is 0), so p0,
-- partition_0 and p are all partition 0, and one server may mix them.
-- Without such a server, PL/Proxy falls back to the functions
-- plproxy.get_cluster_partitions, _config and _version (all three must
-- exist), whose rows are the partitions in order.  Partitions with the
-- same connection string share one connection, and so one database.
--
CREATE FUNCTION @extschema@.tb_cluster_partitions(OUT partition int4, OUT conninfo text)
RETURNS SETOF record
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
AS $$
BEGIN
	IF EXISTS (SELECT FROM pg_catalog.pg_foreign_server AS s
			   WHERE s.srvname OPERATOR(pg_catalog.=) 'tokenbucket') THEN
		RETURN QUERY
		SELECT CASE WHEN m[2] IS NULL THEN 0 ELSE CAST(m[2] AS pg_catalog.int4) END, m[3]
		FROM pg_catalog.pg_foreign_server AS s,
			 pg_catalog.unnest(s.srvoptions) AS o(option),
			 pg_catalog.regexp_match(o.option,
				'^(p|partition_)([[:space:]]*[+-]?[0-9]+)?=(.*)$') AS m
		WHERE s.srvname OPERATOR(pg_catalog.=) 'tokenbucket' AND m IS NOT NULL
		ORDER BY 1;
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

COMMENT ON FUNCTION @extschema@.tb_cluster_partitions() IS
	'the partitions of the PL/Proxy cluster tokenbucket and their connection strings, read as PL/Proxy reads them (foreign server options p<N> or partition_<N>, else plproxy.get_cluster_partitions)';

-- whether PL/Proxy maps a hash to partition abs(hash % N) (the option
-- modular_mapping, on the server, else on its wrapper, else from
-- plproxy.get_cluster_config; any number but 0 sets it, as atoi reads it)
-- rather than hash & (N - 1)
CREATE FUNCTION @extschema@.tb_modular_mapping()
RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
AS $$
DECLARE
	setting text;
BEGIN
	IF EXISTS (SELECT FROM pg_catalog.pg_foreign_server AS s
			   WHERE s.srvname OPERATOR(pg_catalog.=) 'tokenbucket') THEN
		SELECT o.value INTO setting
		FROM pg_catalog.pg_foreign_server AS s
		JOIN pg_catalog.pg_foreign_data_wrapper AS w ON w.oid OPERATOR(pg_catalog.=) s.srvfdw,
			 LATERAL (SELECT 1, s.srvoptions UNION ALL SELECT 2, w.fdwoptions) AS l(rank, options),
			 LATERAL pg_catalog.unnest(l.options) AS u(option),
			 LATERAL (SELECT pg_catalog.split_part(u.option, '=', 1),
							 pg_catalog.substr(u.option,
								 pg_catalog.strpos(u.option, '=') OPERATOR(pg_catalog.+) 1)) AS o(key, value)
		WHERE s.srvname OPERATOR(pg_catalog.=) 'tokenbucket'
		  AND pg_catalog.lower(o.key) OPERATOR(pg_catalog.=) 'modular_mapping'
		ORDER BY l.rank
		LIMIT 1;
	ELSIF pg_catalog.to_regprocedure('plproxy.get_cluster_partitions(text)') IS NOT NULL
		AND pg_catalog.to_regprocedure('plproxy.get_cluster_config(text)') IS NOT NULL
		AND pg_catalog.to_regprocedure('plproxy.get_cluster_version(text)') IS NOT NULL THEN
		-- PL/Proxy sets the options in the order of the rows: the last wins
		EXECUTE
			'SELECT c.val FROM plproxy.get_cluster_config($1) WITH ORDINALITY AS c(key, val, n)
			 WHERE pg_catalog.lower(c.key) OPERATOR(pg_catalog.=) ''modular_mapping''
			 ORDER BY c.n DESC LIMIT 1'
			INTO setting USING 'tokenbucket';
	END IF;
	RETURN COALESCE(CAST(pg_catalog.substring(setting, '^[[:space:]]*([+-]?[0-9]+)')
						 AS pg_catalog.numeric), 0) OPERATOR(pg_catalog.<>) 0;
END
$$;

COMMENT ON FUNCTION @extschema@.tb_modular_mapping() IS
	'whether the cluster tokenbucket maps a hash to partition abs(hash % N) (PL/Proxy''s modular_mapping) rather than hash & (N - 1)';

CREATE OR REPLACE FUNCTION @extschema@.tb_partitions()
RETURNS int4
LANGUAGE sql STABLE STRICT PARALLEL RESTRICTED
AS $$
SELECT CAST(pg_catalog.count(*) AS pg_catalog.int4) FROM @extschema@.tb_cluster_partitions()
$$;

COMMENT ON FUNCTION @extschema@.tb_partitions() IS
	'how many partitions the cluster tokenbucket has, as PL/Proxy counts them (0 when there is no such cluster)';

-- every partition, or with distinct_databases one partition of each
-- connection string; refused when the cluster has none, so that a call
-- meant for every partition never does nothing
CREATE FUNCTION @extschema@.tb_each_partition(distinct_databases boolean DEFAULT false)
RETURNS SETOF int4
LANGUAGE plpgsql STABLE STRICT PARALLEL RESTRICTED
AS $$
DECLARE
	found_one boolean := false;
	p int4;
BEGIN
	FOR p IN
		SELECT c.partition FROM @extschema@.tb_cluster_partitions() AS c
		WHERE NOT distinct_databases
		   OR c.partition OPERATOR(pg_catalog.=) (
				SELECT pg_catalog.min(d.partition) FROM @extschema@.tb_cluster_partitions() AS d
				WHERE d.conninfo OPERATOR(pg_catalog.=) c.conninfo)
		ORDER BY c.partition
	LOOP
		found_one := true;
		RETURN NEXT p;
	END LOOP;
	IF NOT found_one THEN
		RAISE EXCEPTION 'the PL/Proxy cluster "tokenbucket" has no partitions'
			USING ERRCODE = 'undefined_object',
				  DETAIL = 'tokenbucket_proxy routes every call to a partition of the foreign server named tokenbucket (options p0, p1, ... or partition_0, partition_1, ...), or of plproxy.get_cluster_partitions(''tokenbucket'') when there is no such server, and finds none.',
				  HINT = 'Create it: CREATE SERVER tokenbucket FOREIGN DATA WRAPPER plproxy OPTIONS (p0 ''dbname=... host=...'', p1 ''...'').';
	END IF;
END
$$;

COMMENT ON FUNCTION @extschema@.tb_each_partition(boolean) IS
	'every partition of the cluster tokenbucket (with true, one per connection string), or 42704 when it has none';

CREATE OR REPLACE FUNCTION @extschema@.tb_shard(name text)
RETURNS int4
LANGUAGE plpgsql STABLE STRICT PARALLEL RESTRICTED
AS $$
DECLARE
	partitions int4 := (SELECT pg_catalog.count(*) FROM @extschema@.tb_each_partition());
BEGIN
	IF @extschema@.tb_modular_mapping() THEN
		RETURN pg_catalog.abs(@extschema@.tb_shard_hash(name) OPERATOR(pg_catalog.%) partitions);
	END IF;
	IF partitions OPERATOR(pg_catalog.&) (partitions OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog.<>) 0 THEN
		RAISE EXCEPTION 'the PL/Proxy cluster "tokenbucket" has % partitions, not a power of two', partitions
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'Without modular_mapping, PL/Proxy maps a hash to partition hash & (N - 1), and refuses a cluster whose N is not a power of two.',
				  HINT = 'Give the cluster a power of two of partitions, or set modular_mapping ''1'' in its options.';
	END IF;
	RETURN @extschema@.tb_shard_hash(name) OPERATOR(pg_catalog.&) (partitions OPERATOR(pg_catalog.-) 1);
END
$$;

COMMENT ON FUNCTION @extschema@.tb_shard(text) IS
	'the partition (p0 is 0) that holds a bucket, in the cluster as configured now, by the mapping PL/Proxy uses';

-- a template is made, changed and dropped on every partition; RUN ON gives
-- PL/Proxy hashes, which both mappings send to partition i for i < N
CREATE OR REPLACE FUNCTION @extschema@.tb_route_each(name text)
RETURNS SETOF int4
LANGUAGE sql STABLE PARALLEL RESTRICTED
AS $$
SELECT @extschema@.tb_route(name)
WHERE name IS NULL OR pg_catalog.right(name, 1) OPERATOR(pg_catalog.<>) '*'
UNION ALL
SELECT @extschema@.tb_each_partition()
WHERE pg_catalog.right(name, 1) OPERATOR(pg_catalog.=) '*'
$$;

-- each database once: partitions that share a connection string are read
-- once, under the lowest of their numbers
CREATE OR REPLACE VIEW @extschema@.tb_status AS
SELECT p.shard, s.name, s.capacity, s.refill_rate, s.tokens, s.full_at, s.paused_until,
	   s.debt, s.template, s.is_template, s.memory
FROM @extschema@.tb_each_partition(true) AS p(shard),
	 LATERAL @extschema@.tb_shard_status(p.shard) AS s;

COMMENT ON VIEW @extschema@.tb_status IS
	'every shard''s tb_status, with the partition each row came from (one of those that share a database)';

--
-- Counters across the shards.  tb_stats, tb_template_stats and
-- tb_limit_counters() have tokenbucket's columns, so that
-- prometheus/tokenbucket.yaml scrapes the proxy as it scrapes one server:
-- a bucket's or a limit's row comes from its shard; a template's sums its
-- rows of every database, and its since is the
-- latest of theirs (from then on, every shard counts).  PL/Proxy asks
-- every database at once (RUN ON ALL: each connection string once); a
-- shard that does not answer fails the call, with PL/Proxy's error naming
-- its database and server.  Who may read them needs EXECUTE on the
-- tb_shards_* function behind each, and its user mapping's role what
-- tokenbucket asks on the shards.
--
CREATE FUNCTION @extschema@.tb_shards_stats(OUT name text, OUT memory boolean,
	OUT template text, OUT capacity float8, OUT refill_rate float8, OUT granted bigint,
	OUT granted_tokens float8, OUT denied bigint, OUT waited bigint,
	OUT wait_seconds float8, OUT timeouts bigint, OUT refunded_tokens float8,
	OUT pauses bigint, OUT since timestamptz, OUT tokens float8, OUT cancelled bigint,
	OUT max_in_flight integer, OUT in_flight integer, OUT released bigint,
	OUT ended bigint, OUT expired bigint)
RETURNS SETOF record
LANGUAGE plproxy VOLATILE
AS $$
	CLUSTER 'tokenbucket';
	RUN ON ALL;
	SELECT s.name, s.memory, s.template, s.capacity, s.refill_rate, s.granted,
	       s.granted_tokens, s.denied, s.waited, s.wait_seconds, s.timeouts,
	       s.refunded_tokens, s.pauses, s.since, s.tokens, s.cancelled,
	       s.max_in_flight, s.in_flight, s.released, s.ended, s.expired
	FROM @extschema@.tb_stats AS s;
$$;

COMMENT ON FUNCTION @extschema@.tb_shards_stats() IS
	'tb_stats of every shard database, at once';

CREATE VIEW @extschema@.tb_stats AS
SELECT s.name, s.memory, s.template, s.capacity, s.refill_rate, s.granted,
	   s.granted_tokens, s.denied, s.waited, s.wait_seconds, s.timeouts,
	   s.refunded_tokens, s.pauses, s.since, s.tokens, s.cancelled,
	   s.max_in_flight, s.in_flight, s.released, s.ended, s.expired
FROM @extschema@.tb_shards_stats() AS s;

COMMENT ON VIEW @extschema@.tb_stats IS
	'each bucket''s and limit''s counters, from its shard, with tokenbucket''s columns';

CREATE FUNCTION @extschema@.tb_shards_template_stats(OUT template text,
	OUT memory boolean, OUT buckets bigint, OUT granted bigint, OUT granted_tokens float8,
	OUT denied bigint, OUT waited bigint, OUT wait_seconds float8, OUT timeouts bigint,
	OUT refunded_tokens float8, OUT pauses bigint, OUT since timestamptz,
	OUT cancelled bigint)
RETURNS SETOF record
LANGUAGE plproxy VOLATILE
AS $$
	CLUSTER 'tokenbucket';
	RUN ON ALL;
	SELECT t.template, t.memory, t.buckets, t.granted, t.granted_tokens, t.denied,
	       t.waited, t.wait_seconds, t.timeouts, t.refunded_tokens, t.pauses, t.since,
	       t.cancelled
	FROM @extschema@.tb_template_stats AS t;
$$;

COMMENT ON FUNCTION @extschema@.tb_shards_template_stats() IS
	'tb_template_stats of every shard database, at once: a row per template and database';

CREATE VIEW @extschema@.tb_template_stats AS
SELECT t.template,
	   pg_catalog.bool_or(t.memory) AS memory,
	   CAST(pg_catalog.sum(t.buckets) AS bigint) AS buckets,
	   CAST(pg_catalog.sum(t.granted) AS bigint) AS granted,
	   pg_catalog.sum(t.granted_tokens) AS granted_tokens,
	   CAST(pg_catalog.sum(t.denied) AS bigint) AS denied,
	   CAST(pg_catalog.sum(t.waited) AS bigint) AS waited,
	   pg_catalog.sum(t.wait_seconds) AS wait_seconds,
	   CAST(pg_catalog.sum(t.timeouts) AS bigint) AS timeouts,
	   pg_catalog.sum(t.refunded_tokens) AS refunded_tokens,
	   CAST(pg_catalog.sum(t.pauses) AS bigint) AS pauses,
	   pg_catalog.max(t.since) AS since,
	   CAST(pg_catalog.sum(t.cancelled) AS bigint) AS cancelled
FROM @extschema@.tb_shards_template_stats() AS t
GROUP BY t.template;

COMMENT ON VIEW @extschema@.tb_template_stats IS
	'each template''s counters summed over every shard, and since when every shard counts them';

CREATE FUNCTION @extschema@.tb_shards_limit_counters(OUT name text, OUT granted bigint,
	OUT slots bigint, OUT refused bigint, OUT waited bigint, OUT wait_seconds float8,
	OUT timeouts bigint, OUT cancelled bigint, OUT released bigint, OUT ended bigint,
	OUT expired bigint, OUT since timestamptz)
RETURNS SETOF record
LANGUAGE plproxy VOLATILE
AS $$
	CLUSTER 'tokenbucket';
	RUN ON ALL;
	SELECT c.name, c.granted, c.slots, c.refused, c.waited, c.wait_seconds, c.timeouts,
	       c.cancelled, c.released, c.ended, c.expired, c.since
	FROM @extschema@.tb_limit_counters() AS c;
$$;

COMMENT ON FUNCTION @extschema@.tb_shards_limit_counters() IS
	'tb_limit_counters() of every shard database, at once: a row per name and database';

-- a limit lives on one shard, a limit template on every one: summed by
-- name, a template's counters are the cluster's
CREATE FUNCTION @extschema@.tb_limit_counters(OUT name text, OUT granted bigint,
	OUT slots bigint, OUT refused bigint, OUT waited bigint, OUT wait_seconds float8,
	OUT timeouts bigint, OUT cancelled bigint, OUT released bigint, OUT ended bigint,
	OUT expired bigint, OUT since timestamptz)
RETURNS SETOF record
LANGUAGE sql VOLATILE STRICT PARALLEL RESTRICTED
AS $$
SELECT c.name, CAST(pg_catalog.sum(c.granted) AS bigint), CAST(pg_catalog.sum(c.slots) AS bigint),
	   CAST(pg_catalog.sum(c.refused) AS bigint), CAST(pg_catalog.sum(c.waited) AS bigint),
	   pg_catalog.sum(c.wait_seconds), CAST(pg_catalog.sum(c.timeouts) AS bigint),
	   CAST(pg_catalog.sum(c.cancelled) AS bigint), CAST(pg_catalog.sum(c.released) AS bigint),
	   CAST(pg_catalog.sum(c.ended) AS bigint), CAST(pg_catalog.sum(c.expired) AS bigint),
	   pg_catalog.max(c.since)
FROM @extschema@.tb_shards_limit_counters() AS c
GROUP BY c.name
$$;

COMMENT ON FUNCTION @extschema@.tb_limit_counters() IS
	'the limits'' counters of every shard, summed by name: a limit''s from its shard, a template''s over every shard';

-- a bucket's counters are on its shard; a template's, and with NULL every
-- bucket's, on every partition
CREATE FUNCTION @extschema@.tb_route_stats(name text)
RETURNS SETOF int4
LANGUAGE sql STABLE PARALLEL RESTRICTED
AS $$
SELECT @extschema@.tb_route(name)
WHERE pg_catalog.right(name, 1) OPERATOR(pg_catalog.<>) '*'
UNION ALL
SELECT @extschema@.tb_each_partition()
WHERE name IS NULL OR pg_catalog.right(name, 1) OPERATOR(pg_catalog.=) '*'
$$;

COMMENT ON FUNCTION @extschema@.tb_route_stats(text) IS
	'PL/Proxy''s RUN ON for tb_stats_reset: the bucket''s partition, or every partition for a template or NULL';

CREATE FUNCTION @extschema@.tb_shards_stats_reset(name text)
RETURNS SETOF boolean
LANGUAGE plproxy VOLATILE
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route_stats(name);
	SELECT true AS tb_shards_stats_reset FROM @extschema@.tb_stats_reset(name);
$$;

COMMENT ON FUNCTION @extschema@.tb_shards_stats_reset(text) IS
	'tb_stats_reset on the shard of a bucket, or on every shard for a template or NULL: a row per shard';

CREATE FUNCTION @extschema@.tb_stats_reset(name text DEFAULT NULL)
RETURNS void
LANGUAGE sql VOLATILE
AS $$
SELECT pg_catalog.count(*) FROM @extschema@.tb_shards_stats_reset(name)
$$;

COMMENT ON FUNCTION @extschema@.tb_stats_reset(text) IS
	'start the counters of a bucket on its shard (of a template: and of its buckets, on every shard), or with NULL of every bucket of every shard, from zero';

REVOKE ALL ON FUNCTION
	@extschema@.tb_shards_stats(),
	@extschema@.tb_shards_template_stats(),
	@extschema@.tb_shards_limit_counters(),
	@extschema@.tb_limit_counters(),
	@extschema@.tb_shards_stats_reset(text),
	@extschema@.tb_stats_reset(text)
FROM PUBLIC;
