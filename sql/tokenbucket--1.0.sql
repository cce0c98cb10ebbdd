/* tokenbucket--1.0.sql: the base install script. */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION tokenbucket" to load this file. \quit

--
-- The buckets.  A bucket stores how many tokens it was short of full
-- (deficit) at updated_at; refill pays that back at refill_rate tokens per
-- second.  The defaults describe a full bucket, so a plain
--   INSERT INTO tb_buckets (name, capacity, refill_rate) VALUES ('x', 10, 2)
-- makes one that works at once.  NaN fails "< 'Infinity'", so these checks
-- reject NaN as well as infinities.
--
CREATE TABLE @extschema@.tb_buckets (
	name text PRIMARY KEY
		CONSTRAINT tb_buckets_name_check
		CHECK (name <> '' AND pg_catalog.octet_length(name) <= 1024),
	capacity float8 NOT NULL
		CONSTRAINT tb_buckets_capacity_check
		CHECK (capacity > 0 AND capacity < 'Infinity'),
	refill_rate float8 NOT NULL
		CONSTRAINT tb_buckets_refill_rate_check
		CHECK (refill_rate > 0 AND refill_rate < 'Infinity'),
	deficit float8 NOT NULL DEFAULT 0
		CONSTRAINT tb_buckets_deficit_check
		CHECK (deficit >= 0 AND deficit < 'Infinity'),
	updated_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
		CONSTRAINT tb_buckets_updated_at_check
		CHECK (pg_catalog.isfinite(updated_at))
);

COMMENT ON TABLE @extschema@.tb_buckets IS
	'token buckets: settings and state, one row per bucket';
COMMENT ON COLUMN @extschema@.tb_buckets.name IS 'bucket name, the key every call uses';
COMMENT ON COLUMN @extschema@.tb_buckets.capacity IS 'most tokens the bucket holds';
COMMENT ON COLUMN @extschema@.tb_buckets.refill_rate IS 'tokens added per second';
COMMENT ON COLUMN @extschema@.tb_buckets.deficit IS 'tokens short of full at updated_at (0: full)';
COMMENT ON COLUMN @extschema@.tb_buckets.updated_at IS 'when deficit was last written';

-- pg_dump keeps the buckets the DBA configured
SELECT pg_catalog.pg_extension_config_dump('@extschema@.tb_buckets', '');

--
-- The arithmetic, as pure functions of a bucket's columns.  The acquire
-- UPDATE and the tb_status view use them; they are also there for the
-- DBA's own queries.  They read no table, so anyone may call them.
--
CREATE FUNCTION @extschema@.tb_take(capacity float8, refill_rate float8,
	deficit float8, updated_at timestamptz, cost float8, at timestamptz)
RETURNS float8
AS 'MODULE_PATHNAME', 'tb_take'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.tb_take(float8, float8, float8, timestamptz, float8, timestamptz) IS
	'deficit after taking cost tokens at a moment, or NULL when the bucket does not hold them';

CREATE FUNCTION @extschema@.tb_tokens(capacity float8, refill_rate float8,
	deficit float8, updated_at timestamptz, at timestamptz)
RETURNS float8
AS 'MODULE_PATHNAME', 'tb_tokens'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.tb_tokens(float8, float8, float8, timestamptz, timestamptz) IS
	'tokens a bucket holds at a moment';

CREATE FUNCTION @extschema@.tb_full_at(capacity float8, refill_rate float8,
	deficit float8, updated_at timestamptz)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'tb_full_at'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.tb_full_at(float8, float8, float8, timestamptz) IS
	'when a bucket is, or was, full';

--
-- Taking tokens.  SECURITY DEFINER so that a role with EXECUTE and no right
-- on tb_buckets can use them; the C code qualifies every name it uses.
--
CREATE FUNCTION @extschema@.tb_acquire(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'tb_acquire'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.tb_acquire(text) IS
	'take one token if the bucket holds it: true, or false and nothing taken';

CREATE FUNCTION @extschema@.tb_acquire(name text, cost float8)
RETURNS boolean
AS 'MODULE_PATHNAME', 'tb_acquire'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.tb_acquire(text, float8) IS
	'take cost tokens if the bucket holds them: true, or false and nothing taken';

CREATE FUNCTION @extschema@.tb_try(name text, cost float8 DEFAULT 1,
	OUT granted boolean, OUT remaining float8,
	OUT retry_after interval, OUT reset_after interval)
RETURNS record
AS 'MODULE_PATHNAME', 'tb_try'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.tb_try(text, float8) IS
	'tb_acquire with the tokens left, the wait until cost tokens are there, and the wait until full';

--
-- Managing buckets.  These change what every client may do, so only the
-- owner may call them until the DBA grants them (see README).
--
CREATE FUNCTION @extschema@.tb_create(name text, capacity float8, refill float8,
	per interval DEFAULT '1 second')
RETURNS void
AS 'MODULE_PATHNAME', 'tb_create'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.tb_create(text, float8, float8, interval) IS
	'create a full bucket holding at most capacity tokens that gains refill tokens every per';

CREATE FUNCTION @extschema@.tb_alter(name text, capacity float8 DEFAULT NULL,
	refill float8 DEFAULT NULL, per interval DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'tb_alter'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.tb_alter(text, float8, float8, interval) IS
	'change the settings given (NULL keeps one), keeping the tokens held, capped at capacity';

CREATE FUNCTION @extschema@.tb_reset(name text)
RETURNS void
AS 'MODULE_PATHNAME', 'tb_reset'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.tb_reset(text) IS 'fill the bucket';

CREATE FUNCTION @extschema@.tb_drop(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'tb_drop'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.tb_drop(text) IS
	'remove the bucket: true, or false when there was none';

REVOKE ALL ON FUNCTION @extschema@.tb_create(text, float8, float8, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.tb_alter(text, float8, float8, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.tb_reset(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.tb_drop(text) FROM PUBLIC;

--
-- One row per bucket as of the moment it is read.  Like tb_buckets, only
-- the owner reads it until the DBA grants SELECT.
--
CREATE VIEW @extschema@.tb_status AS
SELECT b.name,
	b.capacity,
	b.refill_rate,
	@extschema@.tb_tokens(b.capacity, b.refill_rate, b.deficit, b.updated_at,
		pg_catalog.clock_timestamp()) AS tokens,
	@extschema@.tb_full_at(b.capacity, b.refill_rate, b.deficit, b.updated_at) AS full_at
FROM @extschema@.tb_buckets AS b;

COMMENT ON VIEW @extschema@.tb_status IS
	'each bucket''s settings, the tokens it holds now, and when it is full';
