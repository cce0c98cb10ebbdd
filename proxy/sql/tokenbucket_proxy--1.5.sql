/* tokenbucket_proxy--1.5.sql: tokenbucket's API on a proxy database. */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION tokenbucket_proxy" to load this file. \quit

--
-- Every function of tokenbucket that an application or a DBA calls on
-- buckets, with the same name, arguments and result, on a database in
-- front of the PL/Proxy cluster named tokenbucket (a foreign server of the
-- plproxy wrapper, see docs/more-than-one-server.md).  Each call on a
-- bucket runs, whole, on the one shard (partition) that holds it; the
-- shard's tokenbucket does the work exactly as it does for a direct call,
-- and the proxy relays its answer or its error.  The shards run tokenbucket
-- 1.7 or later (1.8 to refuse a NULL to tb_create, tb_alter, tb_drop and
-- tb_purge; 1.9 for quotas, parents and alerts, and with tokenbucket_shard
-- 1.1 for tb_try's and tb_peek's denied_by, NULL from a shard before
-- that, and for tb_refund's and tb_settle's reserved_at, to the bucket
-- alone before that) and tokenbucket_shard, in the schema this extension
-- is in, where PL/Proxy calls them: create all three in the same one
-- (public by default).  The proxy server needs tokenbucket's library (not the
-- extension) for the bound on a call.  Leases are not proxied.
--
-- In this order: routing; the cluster as PL/Proxy reads it; the bound on a
-- call and the errors of the calls on buckets; those calls, made from one
-- list; making, changing,
-- dropping and purging; quotas, parents and alerts; every shard's
-- tb_status and tb_quotas; counters across the shards; moving a partition
-- to another database; what is kept from PUBLIC.
--

--
-- Routing.  A bucket's shard follows its shard key: the part of its name
-- between the first { and the next } when that part is not empty (Redis
-- Cluster's hash tag), else the whole name.  The key's hash is the first
-- 32 bits of its MD5, which no PostgreSQL version changes (unlike
-- hashtext()); PL/Proxy maps a hash to a partition (tb_partition_of,
-- below, says which).
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

-- the server's partitions, else those of plproxy.get_cluster_partitions
CREATE FUNCTION @extschema@.tb_cluster_partitions(OUT partition int4, OUT conninfo text)
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

COMMENT ON FUNCTION @extschema@.tb_cluster_partitions() IS
	'the partitions of the PL/Proxy cluster tokenbucket and their connection strings, read as PL/Proxy reads them (foreign server options p<N> or partition_<N>, else plproxy.get_cluster_partitions)';

CREATE FUNCTION @extschema@.tb_partitions()
RETURNS int4
LANGUAGE sql STABLE STRICT PARALLEL RESTRICTED
AS $$
SELECT CAST(pg_catalog.count(*) AS pg_catalog.int4) FROM @extschema@.tb_cluster_partitions()
$$;

COMMENT ON FUNCTION @extschema@.tb_partitions() IS
	'how many partitions the cluster tokenbucket has, as PL/Proxy counts them (0 when there is no such cluster)';

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

CREATE FUNCTION @extschema@.tb_shard(name text)
RETURNS int4
LANGUAGE sql STABLE STRICT PARALLEL RESTRICTED
AS $$
	SELECT @extschema@.tb_partition_of(@extschema@.tb_shard_hash(name),
		(SELECT pg_catalog.count(*) FROM @extschema@.tb_each_partition())::int4,
		@extschema@.tb_modular_mapping())
$$;

COMMENT ON FUNCTION @extschema@.tb_shard(text) IS
	'the partition (p0 is 0) that holds a bucket, in the cluster as configured now, by the mapping PL/Proxy uses';

-- a template is made, changed and dropped on every partition; RUN ON gives
-- PL/Proxy hashes, which both mappings send to partition i for i < N
CREATE FUNCTION @extschema@.tb_route_each(name text)
RETURNS SETOF int4
LANGUAGE sql STABLE PARALLEL RESTRICTED
AS $$
SELECT @extschema@.tb_route(name)
WHERE name IS NULL OR pg_catalog.right(name, 1) OPERATOR(pg_catalog.<>) '*'
UNION ALL
SELECT @extschema@.tb_each_partition()
WHERE pg_catalog.right(name, 1) OPERATOR(pg_catalog.=) '*'
$$;

COMMENT ON FUNCTION @extschema@.tb_route_each(text) IS
	'PL/Proxy''s RUN ON for making, changing and dropping: every partition for a template, else the bucket''s';

--
-- The errors of the calls on buckets.  PL/Proxy drops its connection to a
-- shard after any error the shard raises (the next call opens a new one:
-- tens of milliseconds and a new backend on the shard), and reports a
-- connection that fails as XX000.  So a shard returns tokenbucket's error
-- as data (tokenbucket_shard's tb_routed_<f>, below), on a connection
-- PL/Proxy keeps, and the proxy raises it again with the shard's
-- SQLSTATE, message, detail and hint.  A call that fails on its way
-- (PL/Proxy's XX000, a session the shard ended, the statement's time
-- spent) goes to tb_routed_failed, which runs it once more when it did
-- nothing, and otherwise raises class 08: 08001 when no connection was
-- made (nothing done), 08006 when it was lost or the shard did not
-- answer, with a hint saying whether the call may have been done.
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
CREATE FUNCTION @extschema@.tb_routed_failed(name text, attempt int4, kind text,
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
-- The calls on one bucket, or on buckets of one shard key.  Each of
-- tokenbucket's functions that takes, looks, gives back, pauses or resets
-- is two functions here, both made from its line in the list below:
--   * tb_routed_<f>, a PL/Proxy function that calls tokenbucket_shard's
--     tb_routed_<f> on the shard of the bucket: tokenbucket's result, and
--     its error as data in the column error ({SQLSTATE, message, detail,
--     hint}, or NULL).  It names its statement, SELECT * FROM
--     tb_routed_<f>(...), where PL/Proxy would send SELECT col::type, ...
--     FROM ...: the shard parses every call anew, and each type named in a
--     cast is a catalog lookup (13,000 instructions, an eighth of a routed
--     tb_acquire on a memory bucket).  PL/Proxy still types the arguments
--     ($1::text) and takes the columns by name.  Those of the calls that
--     return nothing, whose one column is error, leave the statement to
--     PL/Proxy.  Those of tb_try and tb_peek name their columns, and take
--     denied_by from the shard's tb_routed_<f> where it has one
--     (tokenbucket_shard 1.1), else from a NULL outside it (a name is
--     looked for in the innermost query first): a shard still on 1.0
--     answers, without the level that refused.
--   * tb_<f>, with tokenbucket's signature, in plpgsql: it refuses a NULL
--     where tokenbucket 1.8 refuses one (22004, the same message), bounds
--     the call (tb_proxy_bound), calls tb_routed_<f>, twice at most
--     (tb_routed_failed says whether a call that failed on its way runs
--     once more), and raises an error returned as data with
--     tb_routed_raise.  It is never STRICT, as tokenbucket's are not.
--     A form whose last argument is reserved_at (tb_refund's and
--     tb_settle's, tokenbucket 1.9) runs, on a shard still on
--     tokenbucket_shard 1.0, which has no tb_routed_<f> with it (42883),
--     the form without it: that shard gives back to the bucket alone, as
--     tokenbucket does when the moment is not known.
-- The same statements make every pair, so that no two drift apart; made
-- by EXECUTE during CREATE EXTENSION, they belong to the extension like
-- any other object of this script.  Their text is, to the character, that
-- of tokenbucket_proxy--1.2--1.3.sql, which writes each pair out, and for
-- tb_<f> that of tokenbucket_proxy--1.3--1.4.sql, which makes them again
-- from this list, and for tb_try's and tb_peek's pairs and the forms with
-- reserved_at that of tokenbucket_proxy--1.4--1.5.sql, which makes them
-- (tb_try and tb_peek again, with denied_by):
-- proxy/test/errors.sh checks that a fresh install has the objects of an
-- update from each earlier version.
--
-- The columns of the list:
--   f           the function's name without tb_
--   args        tb_<f>'s arguments, defaults included (tb_routed_<f> has
--               them without).  The first routes: name through tb_route,
--               names through tb_route_all (names[1] then names the bucket
--               to tb_routed_failed).
--   nulls       the arguments that may be NULL (tokenbucket gives their
--               NULL a meaning); a STRICT tb_routed_<f> is given 0 for a
--               NULL reserve, which is none too
--   shape       what tb_<f> returns: 'value' (one, of the type result),
--               'row' (the columns result, as OUT arguments), 'rows' (a
--               table of the columns result), 'void'; tb_routed_<f>
--               returns the same with a column error text[] added (the
--               value in a column result)
--   result      that type, or those columns ("name type, ...")
--   strictness  'STRICT' or 'CALLED ON NULL INPUT', for tb_routed_<f>
--   kind        for tb_routed_failed: 'read' (tb_peek, run once more
--               after a lost connection), 'wait' (the calls that wait,
--               whose statement_timeout stays 57014, and whose bound
--               counts from their timeout), 'write' (the others)
--   comment     tb_<f>'s comment (tb_routed_<f>'s says the same of each)
--
DO $make$
DECLARE
	-- the columns of tb_try_all after the name, and of tb_try and tb_peek
	-- before denied_by
	answer constant text := 'granted boolean, remaining float8, retry_after interval, reset_after interval, retry_after_seconds float8, reset_after_seconds float8';
	c record;
	signature text;			-- the arguments without their defaults
	names text[];			-- the arguments' names
	routed text;			-- tb_routed_<f>(arg, ...), the call on both sides
	wrapped text;			-- the same, as tb_<f> calls it
	route text;				-- RUN ON's function
	bucket text;			-- what names the bucket to tb_routed_failed
	out_columns text;		-- result as OUT arguments
	routed_params text;		-- tb_routed_<f>'s arguments (and OUT columns)
	routed_returns text;
	routed_select text;		-- its statement, or none
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
		 'row', pg_catalog.format('%s, denied_by text', answer), 'STRICT', 'write',
		 'tb_acquire on the bucket''s shard, with the tokens remaining and how long until a retry can succeed and until the bucket is full'),
		('try', 'name text, cost float8, reserve float8', 'reserve',
		 'row', pg_catalog.format('%s, denied_by text', answer), 'STRICT', 'write',
		 'tb_acquire with a reserve on the bucket''s shard, with the tokens remaining and how long until a retry can succeed and until the bucket is full'),
		('peek', 'name text, cost float8 DEFAULT 1', '',
		 'row', pg_catalog.format('%s, denied_by text', answer), 'STRICT', 'read',
		 'what tb_try would answer now on the bucket''s shard, taking nothing'),
		('peek', 'name text, cost float8, reserve float8', 'reserve',
		 'row', pg_catalog.format('%s, denied_by text', answer), 'STRICT', 'read',
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
		('refund', 'name text, tokens float8, reserved_at timestamptz', 'reserved_at',
		 'value', 'float8', 'CALLED ON NULL INPUT', 'write',
		 'give unused tokens of a reservation made at reserved_at back to the bucket on its shard, up the parents it was charged to; returns the tokens it holds'),
		('settle', 'name text, reserved float8, used float8, reserved_at timestamptz', 'reserved_at',
		 'value', 'float8', 'CALLED ON NULL INPUT', 'write',
		 'settle a reservation made at reserved_at on the bucket''s shard, giving back up the parents it was charged to; returns the tokens it holds'),
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
		signature := pg_catalog.regexp_replace(c.args, ' DEFAULT [^,]*', '', 'g');
		names := pg_catalog.string_to_array(pg_catalog.regexp_replace(c.args, '([^ ,]+) [^,]*', '\1', 'g'), ', ');
		routed := pg_catalog.format('tb_routed_%s(%s)', c.f, pg_catalog.array_to_string(names, ', '));
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
		IF c.args OPERATOR(pg_catalog.~) '^name ' THEN
			route := 'tb_route(name)';
			bucket := 'name';
		ELSE
			route := 'tb_route_all(names)';
			bucket := 'names[1]';
		END IF;
		routed_select := pg_catalog.format(E'\tSELECT * FROM @extschema@.%s;\n', routed);

		-- what the shape changes; answers has a line "column := r.column;"
		-- for each column of result
		IF c.shape OPERATOR(pg_catalog.=) 'value' THEN
			routed_params := pg_catalog.format('%s, OUT result %s, OUT error text[]', signature, c.result);
			routed_returns := 'record';
			params := c.args;
			returns := c.result;
			declared := E'\tr record;\n';
			calling := pg_catalog.format(E'\t\t\tr := @extschema@.%s;\n', wrapped);
			failure := 'r.error';
			answers := E'\tRETURN r.result;\n';
			IF names[pg_catalog.array_length(names, 1)] OPERATOR(pg_catalog.=) 'reserved_at' THEN
				calling := pg_catalog.format($old$			BEGIN
				r := @extschema@.%s;
			EXCEPTION WHEN undefined_function THEN
				-- a shard on tokenbucket_shard 1.0: the form without reserved_at
				IF SQLERRM OPERATOR(pg_catalog.!~) %L THEN
					RAISE;
				END IF;
				r := @extschema@.tb_routed_%s(%s);
			END;
$old$, wrapped, pg_catalog.format('REMOTE ERROR: function [^ ]*tb_routed_%s\(', c.f), c.f,
					pg_catalog.array_to_string(names[1:pg_catalog.array_length(names, 1) - 1], ', '));
			END IF;
		ELSIF c.shape OPERATOR(pg_catalog.=) 'row' THEN
			out_columns := pg_catalog.regexp_replace(c.result, '([^ ,]+ [^,]+)', 'OUT \1', 'g');
			routed_params := pg_catalog.format('%s, %s, OUT error text[]', signature, out_columns);
			routed_returns := 'record';
			routed_select := pg_catalog.format(E'\tSELECT r.* FROM (SELECT NULL AS denied_by) AS fallback,\n\t\tLATERAL (SELECT %s, denied_by, s.error FROM @extschema@.%s AS s) AS r;\n',
				pg_catalog.regexp_replace(answer, '([^ ,]+) [^,]+', 's.\1', 'g'), routed);
			params := pg_catalog.format('%s, %s', c.args, out_columns);
			returns := 'record';
			declared := E'\tr record;\n';
			calling := pg_catalog.format(E'\t\t\tr := @extschema@.%s;\n', wrapped);
			failure := 'r.error';
			answers := pg_catalog.regexp_replace(c.result, '([^ ,]+) [^,]+(, |$)', E'\t\\1 := r.\\1;\n', 'g');
		ELSIF c.shape OPERATOR(pg_catalog.=) 'rows' THEN
			routed_params := signature;
			routed_returns := pg_catalog.format('TABLE (%s, error text[])', c.result);
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
			routed_params := pg_catalog.format('%s, OUT error text[]', signature);
			routed_returns := 'text[]';
			routed_select := '';
			params := c.args;
			returns := 'void';
			declared := E'\tfailure text[];\n';
			calling := pg_catalog.format(E'\t\t\tfailure := @extschema@.%s;\n', wrapped);
			failure := 'failure';
			answers := '';
		END IF;

		EXECUTE pg_catalog.format('CREATE FUNCTION @extschema@.tb_routed_%s(%s) RETURNS %s LANGUAGE plproxy VOLATILE %s AS %L',
			c.f, routed_params, routed_returns, c.strictness, pg_catalog.format($body$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.%s;
%s$body$, route, routed_select));
		EXECUTE pg_catalog.format('COMMENT ON FUNCTION @extschema@.tb_routed_%s(%s) IS %L', c.f, signature,
			pg_catalog.format('tokenbucket_shard''s tb_routed_%s on the shard of the bucket: tb_%s''s result, or its error as data', c.f, c.f));

		EXECUTE pg_catalog.format('CREATE FUNCTION @extschema@.tb_%s(%s) RETURNS %s LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT AS %L',
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
		EXECUTE pg_catalog.format('COMMENT ON FUNCTION @extschema@.tb_%s(%s) IS %L', c.f, signature, c.comment);
	END LOOP;
END
$make$;

--
-- Making, changing, dropping and purging.  A template, and tb_purge, act
-- on every partition: PL/Proxy sends the call to each at once, and each
-- commits its part on its own, so one that fails leaves the others done
-- (docs/more-than-one-server.md says how to finish the job).  PL/Proxy runs a call on several
-- partitions only as a set-returning function: the tb_shards_* functions
-- are those, and tb_create, tb_alter, tb_drop and tb_purge keep
-- tokenbucket's results around them.  None is STRICT: a NULL goes to the
-- shard (a bucket's NULL name to the first partition), whose tokenbucket
-- (1.8 or later) refuses it, as a direct call does.
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
LANGUAGE sql VOLATILE CALLED ON NULL INPUT
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
LANGUAGE sql VOLATILE CALLED ON NULL INPUT
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
LANGUAGE sql VOLATILE CALLED ON NULL INPUT
AS $$
SELECT pg_catalog.sum(purged)::pg_catalog.int8
FROM @extschema@.tb_shards_purge(idle) AS purged
$$;

COMMENT ON FUNCTION @extschema@.tb_purge(interval) IS
	'delete idle, full template-made buckets on every shard; returns how many in all';

--
-- Quotas, parents and alerts (tokenbucket 1.9), made as tb_create makes a
-- bucket: on the bucket's shard, a template's on every shard (the same
-- tb_shards_* functions around PL/Proxy).  A call charges a bucket's
-- parents on the bucket's shard, so tb_set_parent refuses a parent whose
-- shard key differs from its child's (22023, as tb_route_all refuses
-- buckets taken together), and a template's parent unless the template's
-- prefix holds a hash tag, which its keys then all share: give a child
-- and its parent one hash tag ('{acme}:user:*' and '{acme}:team').  The
-- rule is the key, not the partition two keys share today.  None is
-- STRICT: a NULL goes to the shard, whose tokenbucket refuses it.
--
CREATE FUNCTION @extschema@.tb_shards_create_quota(name text, budget float8, period interval,
	time_zone text, starts timestamp, carry_max float8, memory boolean)
RETURNS SETOF boolean
LANGUAGE plproxy VOLATILE
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route_each(name);
	SELECT true AS tb_shards_create_quota
	FROM @extschema@.tb_create_quota(name, budget, period, time_zone, starts, carry_max, memory);
$$;

COMMENT ON FUNCTION @extschema@.tb_shards_create_quota(text, float8, interval, text, timestamp, float8, boolean) IS
	'tb_create_quota on the shard of a quota, or on every shard for a template: a row per shard';

CREATE FUNCTION @extschema@.tb_create_quota(name text, budget float8, period interval,
	time_zone text DEFAULT 'UTC', starts timestamp DEFAULT NULL,
	carry_max float8 DEFAULT 0, memory boolean DEFAULT false)
RETURNS void
LANGUAGE sql VOLATILE CALLED ON NULL INPUT
AS $$
SELECT pg_catalog.count(*)
FROM @extschema@.tb_shards_create_quota(name, budget, period, time_zone, starts, carry_max, memory)
$$;

COMMENT ON FUNCTION @extschema@.tb_create_quota(text, float8, interval, text, timestamp, float8, boolean) IS
	'make a quota on its shard (a template of quotas on every shard): budget tokens back at each start of a calendar period';

CREATE FUNCTION @extschema@.tb_shards_set_parent(child text, parent text)
RETURNS SETOF boolean
LANGUAGE plproxy VOLATILE
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route_each(child);
	SELECT true AS tb_shards_set_parent FROM @extschema@.tb_set_parent(child, parent);
$$;

COMMENT ON FUNCTION @extschema@.tb_shards_set_parent(text, text) IS
	'tb_set_parent on the shard of a child, or on every shard for a template: a row per shard';

CREATE FUNCTION @extschema@.tb_set_parent(child text, parent text)
RETURNS void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
AS $$
DECLARE
	-- a template's keys share its prefix's hash tag, or have none in common
	child_key text := CASE WHEN pg_catalog.right(child, 1) OPERATOR(pg_catalog.=) '*'
		THEN pg_catalog.substring(pg_catalog.left(child, -1), '^[^{]*\{([^}]+)\}')
		ELSE @extschema@.tb_shard_key(child) END;
BEGIN
	IF child IS NOT NULL AND parent IS NOT NULL
	   AND child_key IS DISTINCT FROM @extschema@.tb_shard_key(parent) THEN
		RAISE EXCEPTION 'token buckets "%" and "%" are not kept on one shard', child, parent
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = pg_catalog.format('Through tokenbucket_proxy, a call charges a bucket''s parents on the bucket''s shard, so a child and its parent must share a shard key, the part of a name between the first { and the next }, or the whole name when there is none: "%s" has %s, "%s" has "%s".',
											 child, COALESCE(pg_catalog.format('"%s"', child_key),
															 'none its keys share (each is routed by its own name)'),
											 parent, @extschema@.tb_shard_key(parent)),
				  HINT = 'Give a child and its parent one hash tag, as in ''{acme}:user:*'' and ''{acme}:team'': names with the same tag are kept on one shard.';
	END IF;
	PERFORM pg_catalog.count(*) FROM @extschema@.tb_shards_set_parent(child, parent);
END
$$;

COMMENT ON FUNCTION @extschema@.tb_set_parent(text, text) IS
	'give a bucket, or each key of a template, a parent of the same shard key, charged with it on its shard (NULL: none)';

CREATE FUNCTION @extschema@.tb_shards_set_alerts(bucket text, thresholds float8[])
RETURNS SETOF boolean
LANGUAGE plproxy VOLATILE
AS $$
	CLUSTER 'tokenbucket';
	RUN ON @extschema@.tb_route_each(bucket);
	SELECT true AS tb_shards_set_alerts FROM @extschema@.tb_set_alerts(bucket, thresholds);
$$;

COMMENT ON FUNCTION @extschema@.tb_shards_set_alerts(text, float8[]) IS
	'tb_set_alerts on the shard of a quota, or on every shard for a template: a row per shard';

CREATE FUNCTION @extschema@.tb_set_alerts(bucket text, thresholds float8[])
RETURNS void
LANGUAGE sql VOLATILE CALLED ON NULL INPUT
AS $$
SELECT pg_catalog.count(*) FROM @extschema@.tb_shards_set_alerts(bucket, thresholds)
$$;

COMMENT ON FUNCTION @extschema@.tb_set_alerts(text, float8[]) IS
	'set the alert thresholds of a quota on its shard (of a quota template on every shard), replacing its others; the events are written on that shard';

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

-- each database once: partitions that share a connection string are read
-- once, under the lowest of their numbers
CREATE VIEW @extschema@.tb_status AS
SELECT p.shard, s.name, s.capacity, s.refill_rate, s.tokens, s.full_at, s.paused_until,
	   s.debt, s.template, s.is_template, s.memory
FROM @extschema@.tb_each_partition(true) AS p(shard),
	 LATERAL @extschema@.tb_shard_status(p.shard) AS s;

COMMENT ON VIEW @extschema@.tb_status IS
	'every shard''s tb_status, with the partition each row came from (one of those that share a database)';

-- tb_quotas likewise (the shards run tokenbucket 1.9)
CREATE FUNCTION @extschema@.tb_shard_quotas(shard int4,
	OUT name text, OUT budget float8, OUT capacity float8, OUT remaining float8,
	OUT spent float8, OUT period interval, OUT time_zone text, OUT period_start timestamptz,
	OUT period_end timestamptz, OUT memory boolean, OUT template text)
RETURNS SETOF record
LANGUAGE plproxy VOLATILE STRICT
AS $$
	CLUSTER 'tokenbucket';
	RUN ON shard;
	SELECT q.name, q.budget, q.capacity, q.remaining, q.spent, q.period, q.time_zone,
	       q.period_start, q.period_end, q.memory, q.template
	FROM @extschema@.tb_quotas AS q;
$$;

COMMENT ON FUNCTION @extschema@.tb_shard_quotas(int4) IS
	'tb_quotas of one partition (p0 is 0)';

CREATE VIEW @extschema@.tb_quotas AS
SELECT p.shard, q.name, q.budget, q.capacity, q.remaining, q.spent, q.period, q.time_zone,
	   q.period_start, q.period_end, q.memory, q.template
FROM @extschema@.tb_each_partition(true) AS p(shard),
	 LATERAL @extschema@.tb_shard_quotas(p.shard) AS q;

COMMENT ON VIEW @extschema@.tb_quotas IS
	'every shard''s tb_quotas (each quota''s budget, spend and period), with the partition each row came from (one of those that share a database)';

--
-- Counters across the shards.  tb_stats, tb_template_stats and
-- tb_limit_counters() have tokenbucket's columns, so that
-- prometheus/tokenbucket.yaml scrapes the proxy as it scrapes one server:
-- a bucket's or a limit's row comes from its shard; a template's sums its
-- rows of every database, and its since is the
-- latest of theirs (from then on, every shard counts).  PL/Proxy asks
-- every database at once (RUN ON ALL: each connection string once); a
-- shard that does not answer fails the call, with PL/Proxy's error naming
-- its database and server.  tb_stats ends with a quota's spent, remaining
-- and period_end, taken from a shard's tb_stats where it has them
-- (tokenbucket 1.9), else from NULLs outside it (a name is looked for in
-- the innermost query first): a shard still on 1.8 answers, without them.  Who may read them needs EXECUTE on the
-- tb_shards_* function behind each, and its user mapping's role what
-- tokenbucket asks on the shards.
--
CREATE FUNCTION @extschema@.tb_shards_stats(OUT name text, OUT memory boolean,
	OUT template text, OUT capacity float8, OUT refill_rate float8, OUT granted bigint,
	OUT granted_tokens float8, OUT denied bigint, OUT waited bigint,
	OUT wait_seconds float8, OUT timeouts bigint, OUT refunded_tokens float8,
	OUT pauses bigint, OUT since timestamptz, OUT tokens float8, OUT cancelled bigint,
	OUT max_in_flight integer, OUT in_flight integer, OUT released bigint,
	OUT ended bigint, OUT expired bigint, OUT spent float8, OUT remaining float8,
	OUT period_end timestamptz)
RETURNS SETOF record
LANGUAGE plproxy VOLATILE
AS $$
	CLUSTER 'tokenbucket';
	RUN ON ALL;
	SELECT r.* FROM (SELECT NULL AS spent, NULL AS remaining, NULL AS period_end) AS fallback,
		LATERAL (SELECT s.name, s.memory, s.template, s.capacity, s.refill_rate, s.granted,
		                s.granted_tokens, s.denied, s.waited, s.wait_seconds, s.timeouts,
		                s.refunded_tokens, s.pauses, s.since, s.tokens, s.cancelled,
		                s.max_in_flight, s.in_flight, s.released, s.ended, s.expired,
		                spent, remaining, period_end
		         FROM @extschema@.tb_stats AS s) AS r;
$$;

COMMENT ON FUNCTION @extschema@.tb_shards_stats() IS
	'tb_stats of every shard database, at once';

CREATE VIEW @extschema@.tb_stats AS
SELECT s.name, s.memory, s.template, s.capacity, s.refill_rate, s.granted,
	   s.granted_tokens, s.denied, s.waited, s.wait_seconds, s.timeouts,
	   s.refunded_tokens, s.pauses, s.since, s.tokens, s.cancelled,
	   s.max_in_flight, s.in_flight, s.released, s.ended, s.expired,
	   s.spent, s.remaining, s.period_end
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
				  HINT = 'Move the partition''s database by hand (docs/more-than-one-server.md, "Adding servers later: over-partition"), or drop its memory buckets first.';
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

--
-- What tokenbucket keeps from PUBLIC, kept from PUBLIC here too, with what
-- runs it: the tb_routed_* function behind tb_refund, tb_settle, tb_sync,
-- tb_pause, tb_pause_until and tb_reset (who may call one needs EXECUTE on
-- both), and the helpers behind tb_create, tb_alter, tb_drop, tb_purge,
-- tb_create_quota, tb_set_parent, tb_set_alerts, tb_status, tb_quotas, the
-- counters and tb_move_partition.  The shards check again,
-- as the role the user mapping names.
--
REVOKE ALL ON FUNCTION
	@extschema@.tb_refund(text, float8),
	@extschema@.tb_routed_refund(text, float8),
	@extschema@.tb_settle(text, float8, float8),
	@extschema@.tb_routed_settle(text, float8, float8),
	@extschema@.tb_refund(text, float8, timestamptz),
	@extschema@.tb_routed_refund(text, float8, timestamptz),
	@extschema@.tb_settle(text, float8, float8, timestamptz),
	@extschema@.tb_routed_settle(text, float8, float8, timestamptz),
	@extschema@.tb_sync(text, float8),
	@extschema@.tb_routed_sync(text, float8),
	@extschema@.tb_pause(text, interval),
	@extschema@.tb_routed_pause(text, interval),
	@extschema@.tb_pause_until(text, timestamptz),
	@extschema@.tb_routed_pause_until(text, timestamptz),
	@extschema@.tb_reset(text),
	@extschema@.tb_routed_reset(text),
	@extschema@.tb_create(text, float8, float8, interval, boolean),
	@extschema@.tb_shards_create(text, float8, float8, interval, boolean),
	@extschema@.tb_alter(text, float8, float8, interval),
	@extschema@.tb_shards_alter(text, float8, float8, interval),
	@extschema@.tb_drop(text),
	@extschema@.tb_shards_drop(text),
	@extschema@.tb_purge(interval),
	@extschema@.tb_shards_purge(interval),
	@extschema@.tb_create_quota(text, float8, interval, text, timestamp, float8, boolean),
	@extschema@.tb_shards_create_quota(text, float8, interval, text, timestamp, float8, boolean),
	@extschema@.tb_set_parent(text, text),
	@extschema@.tb_shards_set_parent(text, text),
	@extschema@.tb_set_alerts(text, float8[]),
	@extschema@.tb_shards_set_alerts(text, float8[]),
	@extschema@.tb_shard_status(int4),
	@extschema@.tb_shard_quotas(int4),
	@extschema@.tb_shards_stats(),
	@extschema@.tb_shards_template_stats(),
	@extschema@.tb_shards_limit_counters(),
	@extschema@.tb_limit_counters(),
	@extschema@.tb_shards_stats_reset(text),
	@extschema@.tb_stats_reset(text),
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
