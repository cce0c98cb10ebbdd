/* tokenbucket--1.3--1.4.sql: counters of what each bucket did (grants,
 * denials, waits, timeouts, refunds, pauses), kept in shared memory. */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION tokenbucket UPDATE TO '1.4'" to load this file. \quit

--
-- The counters of every bucket and template of this installation that has
-- some, and a row with a NULL name whose since holds for the others.
-- Whoever may read tb_stats or tb_template_stats may call it; anyone else
-- gets an error.
--
CREATE FUNCTION @extschema@.tb_stats_counters(OUT name text, OUT granted bigint,
	OUT granted_tokens float8, OUT denied bigint, OUT waited bigint,
	OUT wait_seconds float8, OUT timeouts bigint, OUT refunded_tokens float8,
	OUT pauses bigint, OUT since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'tb_stats_counters'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.tb_stats_counters() IS
	'the counters kept in shared memory for this installation''s buckets and templates';

CREATE FUNCTION @extschema@.tb_stats_reset(name text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'tb_stats_reset'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.tb_stats_reset(text) IS
	'start the counters of a bucket (of a template: and of its buckets), or with NULL of every bucket, from zero';

REVOKE ALL ON FUNCTION @extschema@.tb_stats_reset(text) FROM PUBLIC;

--
-- A row per bucket (templates excepted): its counters, since when they
-- count, and beside them its limit and the tokens it holds now.
--
CREATE VIEW @extschema@.tb_stats AS
WITH c AS MATERIALIZED (
	SELECT * FROM @extschema@.tb_stats_counters()
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
	s.tokens
FROM @extschema@.tb_status AS s
CROSS JOIN (SELECT c.since FROM c WHERE c.name IS NULL) AS i
LEFT JOIN c ON c.name OPERATOR(pg_catalog.=) s.name
WHERE NOT s.is_template;

COMMENT ON VIEW @extschema@.tb_stats IS
	'each bucket''s counters (grants, denials, waits, timeouts, refunds, pauses), since when they count, its limit and its tokens now';

--
-- A row per template: the counters of every bucket made from it, purged
-- ones included, and how many there are now.
--
CREATE VIEW @extschema@.tb_template_stats AS
WITH c AS MATERIALIZED (
	SELECT * FROM @extschema@.tb_stats_counters()
), s AS MATERIALIZED (
	SELECT name, memory, template, is_template FROM @extschema@.tb_status
), made AS (
	SELECT template, pg_catalog.count(*) AS buckets FROM s
	WHERE template IS NOT NULL GROUP BY template
)
SELECT t.name AS template,
	t.memory,
	coalesce(made.buckets, 0) AS buckets,
	coalesce(c.granted, 0) AS granted,
	coalesce(c.granted_tokens, 0) AS granted_tokens,
	coalesce(c.denied, 0) AS denied,
	coalesce(c.waited, 0) AS waited,
	coalesce(c.wait_seconds, 0) AS wait_seconds,
	coalesce(c.timeouts, 0) AS timeouts,
	coalesce(c.refunded_tokens, 0) AS refunded_tokens,
	coalesce(c.pauses, 0) AS pauses,
	coalesce(c.since, i.since) AS since
FROM s AS t
CROSS JOIN (SELECT c.since FROM c WHERE c.name IS NULL) AS i
LEFT JOIN c ON c.name OPERATOR(pg_catalog.=) t.name
LEFT JOIN made ON made.template OPERATOR(pg_catalog.=) t.name
WHERE t.is_template;

COMMENT ON VIEW @extschema@.tb_template_stats IS
	'each template''s counters: the sums over every bucket made from it, and how many there are now';
