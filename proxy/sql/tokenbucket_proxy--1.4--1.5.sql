/* tokenbucket_proxy--1.4--1.5.sql: tokenbucket 1.9 through the proxy:
 * tb_try's and tb_peek's denied_by, tb_refund and tb_settle with
 * reserved_at, tb_create_quota, tb_set_parent, tb_set_alerts, tb_quotas,
 * tb_stats' spend. */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION tokenbucket_proxy UPDATE TO '1.5'" to load this file. \quit

--
-- The functions made again with another result (tb_try and tb_peek, and
-- their tb_routed_try and tb_routed_peek, end with denied_by;
-- tb_shards_stats with a quota's spend): replacing a function drops the
-- grants made on it, so they are saved first, as the statements that give
-- them again, and given at the end.
--
WITH replaced (f) AS (VALUES
	('@extschema@.tb_try(text, float8)'),
	('@extschema@.tb_try(text, float8, float8)'),
	('@extschema@.tb_peek(text, float8)'),
	('@extschema@.tb_peek(text, float8, float8)'),
	('@extschema@.tb_routed_try(text, float8)'),
	('@extschema@.tb_routed_try(text, float8, float8)'),
	('@extschema@.tb_routed_peek(text, float8)'),
	('@extschema@.tb_routed_peek(text, float8, float8)'),
	('@extschema@.tb_shards_stats()')),
grants (step, stmt) AS (
	SELECT 1, pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f.f)
	FROM replaced AS f
	JOIN pg_catalog.pg_proc AS p ON p.oid OPERATOR(pg_catalog.=) CAST(f.f AS pg_catalog.regprocedure)
	WHERE p.proacl IS NOT NULL
	UNION ALL
	SELECT 2, pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', f.f,
		CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
			ELSE pg_catalog.quote_ident(r.rolname) END)
	FROM replaced AS f
	JOIN pg_catalog.pg_proc AS p ON p.oid OPERATOR(pg_catalog.=) CAST(f.f AS pg_catalog.regprocedure)
	CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) AS a
	LEFT JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) a.grantee
	WHERE a.grantee OPERATOR(pg_catalog.<>) p.proowner)
SELECT pg_catalog.set_config('tokenbucket_proxy_upgrade.grants',
	COALESCE(pg_catalog.string_agg(stmt, E'\n' ORDER BY step), ''), false)
FROM grants;

--
-- tb_try and tb_peek (both forms) end with denied_by, the level that
-- refused, as tokenbucket 1.9's do: their pairs are made again from their
-- lines of the list of tokenbucket_proxy--1.5.sql, by the same statements
-- (a view or BEGIN ATOMIC function of your own that uses tb_try or tb_peek
-- must be dropped first).  A shard still on tokenbucket_shard 1.0 answers
-- NULL there; tokenbucket_shard 1.1's tb_routed_try and tb_routed_peek give
-- it.  tokenbucket 1.9's tb_refund and tb_settle told when the reservation
-- was made (reserved_at) are made from their lines too: a shard still on
-- tokenbucket_shard 1.0 has no tb_routed_refund or tb_routed_settle with
-- it, and is given the form without it (to the bucket alone).
--
DROP FUNCTION @extschema@.tb_try(text, float8);
DROP FUNCTION @extschema@.tb_try(text, float8, float8);
DROP FUNCTION @extschema@.tb_peek(text, float8);
DROP FUNCTION @extschema@.tb_peek(text, float8, float8);
DROP FUNCTION @extschema@.tb_routed_try(text, float8);
DROP FUNCTION @extschema@.tb_routed_try(text, float8, float8);
DROP FUNCTION @extschema@.tb_routed_peek(text, float8);
DROP FUNCTION @extschema@.tb_routed_peek(text, float8, float8);

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
		('refund', 'name text, tokens float8, reserved_at timestamptz', 'reserved_at',
		 'value', 'float8', 'CALLED ON NULL INPUT', 'write',
		 'give unused tokens of a reservation made at reserved_at back to the bucket on its shard, up the parents it was charged to; returns the tokens it holds'),
		('settle', 'name text, reserved float8, used float8, reserved_at timestamptz', 'reserved_at',
		 'value', 'float8', 'CALLED ON NULL INPUT', 'write',
		 'settle a reservation made at reserved_at on the bucket''s shard, giving back up the parents it was charged to; returns the tokens it holds')
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
-- tb_stats ends with a quota's spent, remaining and period_end.  The view
-- is replaced (its grants, and views of yours on it, are kept); the
-- function behind it is made anew beside the old one, which goes once the
-- view no longer uses it.
--
ALTER FUNCTION @extschema@.tb_shards_stats() RENAME TO tb_shards_stats_1_4;

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

CREATE OR REPLACE VIEW @extschema@.tb_stats AS
SELECT s.name, s.memory, s.template, s.capacity, s.refill_rate, s.granted,
	   s.granted_tokens, s.denied, s.waited, s.wait_seconds, s.timeouts,
	   s.refunded_tokens, s.pauses, s.since, s.tokens, s.cancelled,
	   s.max_in_flight, s.in_flight, s.released, s.ended, s.expired,
	   s.spent, s.remaining, s.period_end
FROM @extschema@.tb_shards_stats() AS s;

DROP FUNCTION @extschema@.tb_shards_stats_1_4();

-- the hint of a move refused for memory buckets names the guide's section
CREATE OR REPLACE FUNCTION @extschema@.tb_move_copy(source text, target text, partition int4,
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

-- what tokenbucket keeps from PUBLIC, kept here too, with what runs it
REVOKE ALL ON FUNCTION
	@extschema@.tb_refund(text, float8, timestamptz),
	@extschema@.tb_routed_refund(text, float8, timestamptz),
	@extschema@.tb_settle(text, float8, float8, timestamptz),
	@extschema@.tb_routed_settle(text, float8, float8, timestamptz),
	@extschema@.tb_create_quota(text, float8, interval, text, timestamp, float8, boolean),
	@extschema@.tb_shards_create_quota(text, float8, interval, text, timestamp, float8, boolean),
	@extschema@.tb_set_parent(text, text),
	@extschema@.tb_shards_set_parent(text, text),
	@extschema@.tb_set_alerts(text, float8[]),
	@extschema@.tb_shards_set_alerts(text, float8[]),
	@extschema@.tb_shard_quotas(int4)
FROM PUBLIC;

-- the grants saved above, given again to the functions made again
DO $$
DECLARE
	stmt text;
BEGIN
	FOREACH stmt IN ARRAY pg_catalog.string_to_array(
		pg_catalog.current_setting('tokenbucket_proxy_upgrade.grants'), E'\n')
	LOOP
		EXECUTE stmt;
	END LOOP;
END
$$;
