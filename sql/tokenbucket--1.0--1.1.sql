/* tokenbucket--1.0--1.1.sql: waiting, several buckets at once, refunds and
 * settlement, shared pauses, provider sync, per-key template buckets. */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION tokenbucket UPDATE TO '1.1'" to load this file. \quit

--
-- New state.  paused_until: no grants before it ('-infinity': not paused).
-- template: for a bucket made from a template ('user:*'), that template's
-- name.  A deficit above capacity is now possible: debt from tb_settle.
--
ALTER TABLE @extschema@.tb_buckets
	ADD COLUMN paused_until timestamptz NOT NULL DEFAULT '-infinity',
	ADD COLUMN template text;

COMMENT ON COLUMN @extschema@.tb_buckets.deficit IS
	'tokens short of full at updated_at (0: full; above capacity: in debt)';
COMMENT ON COLUMN @extschema@.tb_buckets.paused_until IS
	'no grants before this moment (-infinity: not paused)';
COMMENT ON COLUMN @extschema@.tb_buckets.template IS
	'the template this bucket was made from, or NULL';

--
-- One CHECK constraint in C instead of five in SQL: every UPDATE parses and
-- compiles its table's CHECK expressions afresh, and the five took a sixth
-- of a grant's time.  It checks the same things and names the bad column.
--
CREATE FUNCTION @extschema@.tb_check_bucket(name text, capacity float8,
	refill_rate float8, deficit float8, updated_at timestamptz)
RETURNS boolean
AS 'MODULE_PATHNAME', 'tb_check_bucket'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.tb_check_bucket(text, float8, float8, float8, timestamptz) IS
	'the CHECK constraint of tb_buckets: true, or an error naming the bad column';

ALTER TABLE @extschema@.tb_buckets
	DROP CONSTRAINT tb_buckets_name_check,
	DROP CONSTRAINT tb_buckets_capacity_check,
	DROP CONSTRAINT tb_buckets_refill_rate_check,
	DROP CONSTRAINT tb_buckets_deficit_check,
	DROP CONSTRAINT tb_buckets_updated_at_check,
	ADD CONSTRAINT tb_buckets_check CHECK (@extschema@.tb_check_bucket(name,
		capacity, refill_rate, deficit, updated_at));

-- templates are names ending in '*'; this index finds them without a scan
CREATE INDEX tb_buckets_templates ON @extschema@.tb_buckets (name)
	WHERE name OPERATOR(pg_catalog.~~) '%*';

CREATE FUNCTION @extschema@.tb_take(capacity float8, refill_rate float8,
	deficit float8, updated_at timestamptz, paused_until timestamptz,
	cost float8, at timestamptz)
RETURNS float8
AS 'MODULE_PATHNAME', 'tb_take'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.tb_take(float8, float8, float8, timestamptz, timestamptz, float8, timestamptz) IS
	'deficit after taking cost tokens at a moment, or NULL when the bucket is paused or does not hold them';

--
-- Waiting, and several buckets at once.  Not STRICT: a NULL timeout means
-- no limit, and NULL costs mean 1 each; a NULL name gives NULL.
--
CREATE FUNCTION @extschema@.tb_acquire_wait(name text, cost float8 DEFAULT 1,
	timeout interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'tb_acquire_wait'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.tb_acquire_wait(text, float8, interval) IS
	'wait, in arrival order, until cost tokens can be taken (true) or timeout passes (false)';

CREATE FUNCTION @extschema@.tb_acquire_all(names text[], costs float8[] DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'tb_acquire_all'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.tb_acquire_all(text[], float8[]) IS
	'take costs (1 each by default) from every bucket named, or from none';

CREATE FUNCTION @extschema@.tb_acquire_all_wait(names text[], costs float8[] DEFAULT NULL,
	timeout interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'tb_acquire_all_wait'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.tb_acquire_all_wait(text[], float8[], interval) IS
	'tb_acquire_all, waiting in arrival order until all can be taken or timeout passes';

CREATE FUNCTION @extschema@.tb_try_all(names text[], costs float8[] DEFAULT NULL)
RETURNS TABLE (name text, granted boolean, remaining float8,
	retry_after interval, reset_after interval)
AS 'MODULE_PATHNAME', 'tb_try_all'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE ROWS 2
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.tb_try_all(text[], float8[]) IS
	'tb_acquire_all with a row per bucket: the decision, tokens left, and each bucket''s wait';

--
-- Giving back, settling, pausing, syncing: what workers do after a call.
--
CREATE FUNCTION @extschema@.tb_refund(name text, tokens float8)
RETURNS float8
AS 'MODULE_PATHNAME', 'tb_refund'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.tb_refund(text, float8) IS
	'give unused tokens back (capped at capacity); returns the tokens held';

CREATE FUNCTION @extschema@.tb_settle(name text, reserved float8, used float8)
RETURNS float8
AS 'MODULE_PATHNAME', 'tb_settle'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.tb_settle(text, float8, float8) IS
	'refund reserved - used, or take used - reserved more, into debt if need be; returns the tokens held';

CREATE FUNCTION @extschema@.tb_pause(name text, until timestamptz)
RETURNS void
AS 'MODULE_PATHNAME', 'tb_pause_until'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.tb_pause(text, timestamptz) IS
	'no grants until then, for every caller (a pause already ended changes nothing)';

CREATE FUNCTION @extschema@.tb_pause(name text, duration interval)
RETURNS void
AS 'MODULE_PATHNAME', 'tb_pause_for'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.tb_pause(text, interval) IS
	'no grants for this long, for every caller: a provider''s Retry-After, shared';

CREATE FUNCTION @extschema@.tb_sync(name text, remaining float8)
RETURNS float8
AS 'MODULE_PATHNAME', 'tb_sync'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.tb_sync(text, float8) IS
	'lower the tokens held to what the provider reports remaining (never raise them); returns the tokens held';

--
-- Housekeeping for per-key buckets: the DBA's, like tb_create.
--
CREATE FUNCTION @extschema@.tb_purge(idle interval DEFAULT '1 hour')
RETURNS bigint
AS 'MODULE_PATHNAME', 'tb_purge'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.tb_purge(interval) IS
	'delete template-made buckets that are full and unused for idle; returns how many';

REVOKE ALL ON FUNCTION @extschema@.tb_purge(interval) FROM PUBLIC;

--
-- tb_status gains the pause, the debt and where the bucket came from.
--
CREATE OR REPLACE VIEW @extschema@.tb_status AS
SELECT b.name,
	b.capacity,
	b.refill_rate,
	s.tokens,
	@extschema@.tb_full_at(b.capacity, b.refill_rate, b.deficit, b.updated_at) AS full_at,
	CASE WHEN b.paused_until OPERATOR(pg_catalog.>) s.at THEN b.paused_until END AS paused_until,
	GREATEST(0, OPERATOR(pg_catalog.-) s.tokens) AS debt,
	b.template,
	b.name OPERATOR(pg_catalog.~~) '%*' AS is_template
FROM @extschema@.tb_buckets AS b,
	LATERAL (SELECT @extschema@.tb_tokens(b.capacity, b.refill_rate, b.deficit,
			b.updated_at, c.at) AS tokens, c.at
		FROM (SELECT pg_catalog.clock_timestamp() AS at) AS c) AS s;

COMMENT ON VIEW @extschema@.tb_status IS
	'each bucket''s settings, the tokens it holds now, when it is full, its pause, its debt, and its template';
