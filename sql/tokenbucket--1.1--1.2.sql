/* tokenbucket--1.1--1.2.sql: seconds for every client, a read-only look,
 * templates that are not buckets, least privilege for what gives tokens,
 * and values that always dump and restore. */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION tokenbucket UPDATE TO '1.2'" to load this file. \quit

--
-- 1.1 could store a pause past the last timestamptz PostgreSQL can print
-- (294276 AD): pg_dump wrote it and a restore failed on it.  Such a pause
-- is a pause for ever.
--
UPDATE @extschema@.tb_buckets SET paused_until = 'infinity'
WHERE paused_until OPERATOR(pg_catalog.>) '294276-12-31 23:59:59.999999+00'::timestamptz
	AND paused_until OPERATOR(pg_catalog.<>) 'infinity'::timestamptz;

--
-- tb_try and tb_try_all gain their waits in seconds, and tb_pause's
-- timestamptz form becomes tb_pause_until (an untyped '20 seconds' matched
-- both forms of tb_pause).  Replacing a function drops the grants made on
-- it, so they are saved first, as the statements that give them again.
--
WITH replaced (old, new) AS (VALUES
	('@extschema@.tb_try(text, float8)'::pg_catalog.regprocedure, '@extschema@.tb_try(text, float8)'),
	('@extschema@.tb_try_all(text[], float8[])', '@extschema@.tb_try_all(text[], float8[])'),
	('@extschema@.tb_pause(text, timestamptz)', '@extschema@.tb_pause_until(text, timestamptz)')),
grants (step, stmt) AS (
	SELECT 1, pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f.new)
	FROM replaced AS f JOIN pg_catalog.pg_proc AS p ON p.oid OPERATOR(pg_catalog.=) f.old
	WHERE p.proacl IS NOT NULL
	UNION ALL
	SELECT 2, pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', f.new,
		CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
			ELSE pg_catalog.quote_ident(r.rolname) END)
	FROM replaced AS f JOIN pg_catalog.pg_proc AS p ON p.oid OPERATOR(pg_catalog.=) f.old
	CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) AS a
	LEFT JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) a.grantee
	WHERE a.grantee OPERATOR(pg_catalog.<>) p.proowner)
SELECT pg_catalog.set_config('tokenbucket_upgrade.grants',
	coalesce(pg_catalog.string_agg(stmt, E'\n' ORDER BY step), ''), false)
FROM grants;

DROP FUNCTION @extschema@.tb_try(text, float8);
DROP FUNCTION @extschema@.tb_try_all(text[], float8[]);
DROP FUNCTION @extschema@.tb_pause(text, timestamptz);

CREATE FUNCTION @extschema@.tb_try(name text, cost float8 DEFAULT 1,
	OUT granted boolean, OUT remaining float8,
	OUT retry_after interval, OUT reset_after interval,
	OUT retry_after_seconds float8, OUT reset_after_seconds float8)
RETURNS record
AS 'MODULE_PATHNAME', 'tb_try'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.tb_try(text, float8) IS
	'tb_acquire with the tokens left, the wait until cost tokens are there, and the wait until full (as intervals and in seconds)';

CREATE FUNCTION @extschema@.tb_try_all(names text[], costs float8[] DEFAULT NULL)
RETURNS TABLE (name text, granted boolean, remaining float8,
	retry_after interval, reset_after interval,
	retry_after_seconds float8, reset_after_seconds float8)
AS 'MODULE_PATHNAME', 'tb_try_all'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE ROWS 2
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.tb_try_all(text[], float8[]) IS
	'tb_acquire_all with a row per bucket: the decision, tokens left, and each bucket''s waits';

CREATE FUNCTION @extschema@.tb_pause_until(name text, until timestamptz)
RETURNS void
AS 'MODULE_PATHNAME', 'tb_pause_until'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.tb_pause_until(text, timestamptz) IS
	'no grants until then, for every caller (a pause already ended changes nothing)';

--
-- The read-only look: what tb_try would answer, taking nothing, locking
-- and writing nothing.  For everyone, like tb_try.
--
CREATE FUNCTION @extschema@.tb_peek(name text, cost float8 DEFAULT 1,
	OUT granted boolean, OUT remaining float8,
	OUT retry_after interval, OUT reset_after interval,
	OUT retry_after_seconds float8, OUT reset_after_seconds float8)
RETURNS record
AS 'MODULE_PATHNAME', 'tb_peek'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.tb_peek(text, float8) IS
	'what tb_try would answer now, without taking, locking or writing anything';

-- the grants saved above, given again to the replaced functions
DO $$
DECLARE
	stmt text;
BEGIN
	FOREACH stmt IN ARRAY pg_catalog.string_to_array(
		pg_catalog.current_setting('tokenbucket_upgrade.grants'), E'\n')
	LOOP
		EXECUTE stmt;
	END LOOP;
END $$;

--
-- What gives tokens back, takes them for others or stops everyone is not
-- for PUBLIC any more: one compromised login could lift or stop every
-- limit.  The DBA grants them to the roles that settle calls (README).
--
REVOKE ALL ON FUNCTION @extschema@.tb_refund(text, float8) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.tb_settle(text, float8, float8) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.tb_sync(text, float8) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.tb_pause(text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.tb_pause_until(text, timestamptz) FROM PUBLIC;

--
-- The moment retry_after counts down to, as a pure helper like tb_full_at:
-- exact to the microsecond at any capacity and rate.
--
CREATE FUNCTION @extschema@.tb_ready_at(capacity float8, refill_rate float8,
	deficit float8, updated_at timestamptz, paused_until timestamptz,
	cost float8, at timestamptz)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'tb_ready_at'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.tb_ready_at(float8, float8, float8, timestamptz, timestamptz, float8, timestamptz) IS
	'the first moment, not before at, at which a bucket grants cost tokens';

--
-- tb_alter of a template gives its new settings to every bucket made from
-- it, each keeping its tokens, capped: this is the arithmetic it uses.
--
CREATE FUNCTION @extschema@.tb_resize(capacity float8, refill_rate float8,
	deficit float8, updated_at timestamptz, new_capacity float8, at timestamptz)
RETURNS float8
AS 'MODULE_PATHNAME', 'tb_resize'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.tb_resize(float8, float8, float8, timestamptz, float8, timestamptz) IS
	'deficit after giving a bucket a new capacity at a moment, keeping its tokens, capped';

--
-- The functions find a bucket by its primary key.  A plan kept by a
-- session may have been made while the table was small, when a scan of the
-- whole table is cheapest; it would stay that way as the table grows
-- within a call (20,000 new per-key buckets took time quadratic in their
-- number).  Without sequential scans the plan is an index lookup whatever
-- the size.  tb_purge, which reads the whole table, keeps them.
--
ALTER FUNCTION @extschema@.tb_acquire(text) SET enable_seqscan = off;
ALTER FUNCTION @extschema@.tb_acquire(text, float8) SET enable_seqscan = off;
ALTER FUNCTION @extschema@.tb_try(text, float8) SET enable_seqscan = off;
ALTER FUNCTION @extschema@.tb_peek(text, float8) SET enable_seqscan = off;
ALTER FUNCTION @extschema@.tb_acquire_wait(text, float8, interval) SET enable_seqscan = off;
ALTER FUNCTION @extschema@.tb_acquire_all(text[], float8[]) SET enable_seqscan = off;
ALTER FUNCTION @extschema@.tb_acquire_all_wait(text[], float8[], interval) SET enable_seqscan = off;
ALTER FUNCTION @extschema@.tb_try_all(text[], float8[]) SET enable_seqscan = off;
ALTER FUNCTION @extschema@.tb_refund(text, float8) SET enable_seqscan = off;
ALTER FUNCTION @extschema@.tb_settle(text, float8, float8) SET enable_seqscan = off;
ALTER FUNCTION @extschema@.tb_sync(text, float8) SET enable_seqscan = off;
ALTER FUNCTION @extschema@.tb_pause(text, interval) SET enable_seqscan = off;
ALTER FUNCTION @extschema@.tb_pause_until(text, timestamptz) SET enable_seqscan = off;
ALTER FUNCTION @extschema@.tb_create(text, float8, float8, interval) SET enable_seqscan = off;
ALTER FUNCTION @extschema@.tb_alter(text, float8, float8, interval) SET enable_seqscan = off;
ALTER FUNCTION @extschema@.tb_reset(text) SET enable_seqscan = off;
ALTER FUNCTION @extschema@.tb_drop(text) SET enable_seqscan = off;
