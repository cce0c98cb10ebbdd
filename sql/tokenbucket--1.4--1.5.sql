/* tokenbucket--1.4--1.5.sql: memory buckets safe under untrusted keys,
 * rolled-back changes, cancelled waits and failed saves. */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION tokenbucket UPDATE TO '1.5'" to load this file. \quit

--
-- The trigger function is the trigger of tb_buckets alone: no role may
-- call it, or make a trigger of it (it refuses to run for any other
-- table, too).
--
REVOKE ALL ON FUNCTION @extschema@.tb_buckets_changed() FROM PUBLIC;

--
-- The insert trigger also fires for named table buckets and for templates
-- of either kind (not for the rows table templates make): a table
-- bucket's name is no memory bucket's any more, and a new template takes
-- the keys its prefix covers from shorter ones.
--
DROP TRIGGER tb_buckets_memory_insert ON @extschema@.tb_buckets;
CREATE TRIGGER tb_buckets_memory_insert
	AFTER INSERT ON @extschema@.tb_buckets
	FOR EACH ROW WHEN (NEW.memory OR NEW.template IS NULL)
	EXECUTE FUNCTION @extschema@.tb_buckets_changed();

--
-- Counters: a cancelled wait is counted (cancelled); a long name is
-- counted under tb_stats_key(name); template rows come from
-- tb_template_counters(), keys of memory templates from
-- tb_memory_counters() and tb_memory_templates().  The views over them
-- are made again, keeping the grants on them; whoever may read them gets
-- EXECUTE on the functions they need, which are no longer PUBLIC: a role
-- that may read only tb_template_stats cannot list per-key names.
--
SELECT pg_catalog.set_config('tokenbucket_upgrade.grants', coalesce(pg_catalog.string_agg(
		c.relname || ' ' || a.privilege_type || ' ' ||
		CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
			ELSE pg_catalog.quote_ident(r.rolname) END, E'\n'), ''), true)
FROM pg_catalog.pg_class AS c
CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) AS a
LEFT JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) a.grantee
WHERE c.relnamespace OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
	AND c.relname OPERATOR(pg_catalog.=) ANY (ARRAY['tb_stats', 'tb_template_stats', 'tb_status'])
	AND a.grantee OPERATOR(pg_catalog.<>) c.relowner;

DROP VIEW @extschema@.tb_template_stats;
DROP VIEW @extschema@.tb_stats;
DROP FUNCTION @extschema@.tb_stats_counters();

CREATE FUNCTION @extschema@.tb_stats_key(name text)
RETURNS text
AS 'MODULE_PATHNAME', 'tb_stats_key'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.tb_stats_key(text) IS
	'the name a bucket''s counters are listed under: the name, or for one over 128 bytes its start and a hash';

CREATE FUNCTION @extschema@.tb_stats_counters(OUT name text, OUT granted bigint,
	OUT granted_tokens float8, OUT denied bigint, OUT waited bigint,
	OUT wait_seconds float8, OUT timeouts bigint, OUT refunded_tokens float8,
	OUT pauses bigint, OUT cancelled bigint, OUT since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'tb_stats_counters'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.tb_stats_counters() IS
	'the counters of this installation''s named buckets and table templates'' keys, and since when buckets without any count';

CREATE FUNCTION @extschema@.tb_memory_counters(OUT name text, OUT granted bigint,
	OUT granted_tokens float8, OUT denied bigint, OUT waited bigint,
	OUT wait_seconds float8, OUT timeouts bigint, OUT refunded_tokens float8,
	OUT pauses bigint, OUT cancelled bigint, OUT since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'tb_memory_counters'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.tb_memory_counters() IS
	'the counters of the keys of this installation''s memory templates, kept with each key';

CREATE FUNCTION @extschema@.tb_template_counters(OUT name text, OUT granted bigint,
	OUT granted_tokens float8, OUT denied bigint, OUT waited bigint,
	OUT wait_seconds float8, OUT timeouts bigint, OUT refunded_tokens float8,
	OUT pauses bigint, OUT cancelled bigint, OUT since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'tb_template_counters'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.tb_template_counters() IS
	'the counters of this installation''s templates: the sums over every bucket made from each';

CREATE FUNCTION @extschema@.tb_memory_templates(OUT template text, OUT keys bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'tb_memory_templates'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.tb_memory_templates() IS
	'how many keys each memory template of this installation has in shared memory now';

--
-- A row per bucket (templates excepted): its counters, since when they
-- count, its limit and the tokens it holds now; cancelled waits last.
--
CREATE VIEW @extschema@.tb_stats AS
WITH c AS MATERIALIZED (
	SELECT * FROM @extschema@.tb_stats_counters()
	UNION ALL
	SELECT * FROM @extschema@.tb_memory_counters()
)
SELECT s.name,
	s.memory,
	s.template,
	s.capacity,
	s.refill_rate,
	coalesce(c.granted, 0) AS granted,
	coalesce(c.granted_tokens, 0) AS granted_tokens,
	coalesce(c.denied, 0) AS denied,
	coalesce(c.waited, 0) AS waited,
	coalesce(c.wait_seconds, 0) AS wait_seconds,
	coalesce(c.timeouts, 0) AS timeouts,
	coalesce(c.refunded_tokens, 0) AS refunded_tokens,
	coalesce(c.pauses, 0) AS pauses,
	coalesce(c.since, i.since) AS since,
	s.tokens,
	coalesce(c.cancelled, 0) AS cancelled
FROM @extschema@.tb_status AS s
CROSS JOIN (SELECT c.since FROM c WHERE c.name IS NULL) AS i
LEFT JOIN c ON c.name OPERATOR(pg_catalog.=) CASE
	WHEN pg_catalog.octet_length(s.name) OPERATOR(pg_catalog.<=) 128 THEN s.name
	ELSE @extschema@.tb_stats_key(s.name) END
WHERE NOT s.is_template;

COMMENT ON VIEW @extschema@.tb_stats IS
	'each bucket''s counters (grants, denials, waits, timeouts, refunds, pauses, cancelled waits), since when they count, its limit and its tokens now';

--
-- A row per template: the counters of every bucket made from it, purged
-- ones included, and how many there are now; one look per template,
-- whatever the number of keys.
--
CREATE VIEW @extschema@.tb_template_stats AS
WITH c AS MATERIALIZED (
	SELECT * FROM @extschema@.tb_template_counters()
), made AS (
	SELECT b.template, pg_catalog.count(*) AS buckets FROM @extschema@.tb_buckets AS b
	WHERE b.template IS NOT NULL GROUP BY b.template
)
SELECT t.name AS template,
	t.memory,
	coalesce(CASE WHEN t.memory THEN k.keys ELSE made.buckets END, 0) AS buckets,
	coalesce(c.granted, 0) AS granted,
	coalesce(c.granted_tokens, 0) AS granted_tokens,
	coalesce(c.denied, 0) AS denied,
	coalesce(c.waited, 0) AS waited,
	coalesce(c.wait_seconds, 0) AS wait_seconds,
	coalesce(c.timeouts, 0) AS timeouts,
	coalesce(c.refunded_tokens, 0) AS refunded_tokens,
	coalesce(c.pauses, 0) AS pauses,
	coalesce(c.since, i.since) AS since,
	coalesce(c.cancelled, 0) AS cancelled
FROM @extschema@.tb_buckets AS t
CROSS JOIN (SELECT c.since FROM c WHERE c.name IS NULL) AS i
LEFT JOIN c ON c.name OPERATOR(pg_catalog.=) t.name
LEFT JOIN made ON made.template OPERATOR(pg_catalog.=) t.name
LEFT JOIN @extschema@.tb_memory_templates() AS k ON k.template OPERATOR(pg_catalog.=) t.name
WHERE t.name OPERATOR(pg_catalog.~~) '%*';

COMMENT ON VIEW @extschema@.tb_template_stats IS
	'each template''s counters: the sums over every bucket made from it, and how many there are now';

REVOKE ALL ON FUNCTION @extschema@.tb_memory_buckets() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.tb_stats_counters() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.tb_memory_counters() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.tb_template_counters() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.tb_memory_templates() FROM PUBLIC;

-- the views' grants again, and the functions each reader needs
DO $$
DECLARE
	line text;
	g text[];
BEGIN
	FOREACH line IN ARRAY pg_catalog.string_to_array(
		pg_catalog.current_setting('tokenbucket_upgrade.grants'), E'\n')
	LOOP
		g := pg_catalog.string_to_array(line, ' ');	-- view, privilege, grantee
		IF g[1] OPERATOR(pg_catalog.<>) 'tb_status' THEN
			EXECUTE pg_catalog.format('GRANT %s ON @extschema@.%I TO %s', g[2], g[1], g[3]);
		END IF;
		IF g[2] OPERATOR(pg_catalog.<>) 'SELECT' THEN
			CONTINUE;
		ELSIF g[1] OPERATOR(pg_catalog.=) 'tb_stats' THEN
			EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION @extschema@.tb_stats_counters(),'
				' @extschema@.tb_memory_counters(), @extschema@.tb_memory_buckets() TO %s', g[3]);
		ELSIF g[1] OPERATOR(pg_catalog.=) 'tb_template_stats' THEN
			EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION @extschema@.tb_template_counters(),'
				' @extschema@.tb_memory_templates() TO %s', g[3]);
		ELSE
			EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION @extschema@.tb_memory_buckets() TO %s',
				g[3]);
		END IF;
	END LOOP;
END $$;
