/* tokenbucket--1.6--1.7.sql: a reserve for critical traffic: a call with
 * reserve => r is granted only if r of the capacity (or of the slots) is
 * left after it, so batch jobs cannot drain the last of it. */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION tokenbucket UPDATE TO '1.7'" to load this file. \quit

--
-- The table store's grant with a reserve: tb_take's form that leaves
-- reserve x capacity in the bucket (the form without it is unchanged, and
-- so is the statement of a grant without a reserve).
--
CREATE FUNCTION @extschema@.tb_take(capacity float8, refill_rate float8,
	deficit float8, updated_at timestamptz, paused_until timestamptz,
	cost float8, at timestamptz, reserve float8)
RETURNS float8
AS 'MODULE_PATHNAME', 'tb_take'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.tb_take(float8, float8, float8, timestamptz, timestamptz, float8, timestamptz, float8) IS
	'deficit after taking cost tokens at a moment, or NULL when the bucket is paused or does not hold them and reserve x capacity besides';

--
-- Buckets: a form with reserve beside each form that takes or looks.  New
-- overloads, not new defaults: each takes exactly one more argument than
-- any call of the old forms can pass, so no existing call changes meaning
-- or becomes ambiguous (a defaulted reserve after cost DEFAULT 1 would make
-- tb_try('x') match two functions).  The STRICT ones give NULL for a NULL
-- reserve, as for any NULL argument; the others take NULL as none.
--
CREATE FUNCTION @extschema@.tb_acquire(name text, cost float8, reserve float8)
RETURNS boolean
AS 'MODULE_PATHNAME', 'tb_acquire'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.tb_acquire(text, float8, float8) IS
	'take cost tokens if the bucket holds them and reserve x capacity besides: true, or false and nothing taken';

CREATE FUNCTION @extschema@.tb_try(name text, cost float8, reserve float8,
	OUT granted boolean, OUT remaining float8,
	OUT retry_after interval, OUT reset_after interval,
	OUT retry_after_seconds float8, OUT reset_after_seconds float8)
RETURNS record
AS 'MODULE_PATHNAME', 'tb_try'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.tb_try(text, float8, float8) IS
	'tb_acquire with a reserve, with the tokens left, the wait until cost tokens and the reserve are there, and the wait until full';

CREATE FUNCTION @extschema@.tb_peek(name text, cost float8, reserve float8,
	OUT granted boolean, OUT remaining float8,
	OUT retry_after interval, OUT reset_after interval,
	OUT retry_after_seconds float8, OUT reset_after_seconds float8)
RETURNS record
AS 'MODULE_PATHNAME', 'tb_peek'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.tb_peek(text, float8, float8) IS
	'what tb_try with a reserve would answer now, without taking, locking or writing anything';

CREATE FUNCTION @extschema@.tb_acquire_all(names text[], costs float8[], reserve float8)
RETURNS boolean
AS 'MODULE_PATHNAME', 'tb_acquire_all'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.tb_acquire_all(text[], float8[], float8) IS
	'take costs (1 each when NULL) from every bucket named, each keeping reserve x its capacity, or from none';

CREATE FUNCTION @extschema@.tb_try_all(names text[], costs float8[], reserve float8)
RETURNS TABLE (name text, granted boolean, remaining float8,
	retry_after interval, reset_after interval,
	retry_after_seconds float8, reset_after_seconds float8)
AS 'MODULE_PATHNAME', 'tb_try_all'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE ROWS 2;

COMMENT ON FUNCTION @extschema@.tb_try_all(text[], float8[], float8) IS
	'tb_acquire_all with a reserve, with a row per bucket: the decision, tokens left, and each bucket''s waits';

--
-- Leases: tb_lease, tb_lease_wait and tb_lease_all gain a last argument
-- reserve DEFAULT NULL (none), so that tb_lease('x', reserve => 0.2)
-- reads as it should.  An overload could not do it: one with reserve
-- second would take an untyped slots argument ($2 from a driver) as a
-- reserve.  Replacing a function drops the grants made on it, so they are
-- saved first, as the statements that give them again.
--
WITH replaced (old, new) AS (VALUES
	('@extschema@.tb_lease(text, integer, text, interval)'::pg_catalog.regprocedure,
		'@extschema@.tb_lease(text, integer, text, interval, float8)'),
	('@extschema@.tb_lease_wait(text, integer, text, interval, interval)',
		'@extschema@.tb_lease_wait(text, integer, text, interval, interval, float8)'),
	('@extschema@.tb_lease_all(text, text[], float8[], integer, text, interval)',
		'@extschema@.tb_lease_all(text, text[], float8[], integer, text, interval, float8)')),
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

DROP FUNCTION @extschema@.tb_lease(text, integer, text, interval);
DROP FUNCTION @extschema@.tb_lease_wait(text, integer, text, interval, interval);
DROP FUNCTION @extschema@.tb_lease_all(text, text[], float8[], integer, text, interval);

CREATE FUNCTION @extschema@.tb_lease(name text, slots integer DEFAULT 1,
	hold text DEFAULT 'session', ttl interval DEFAULT NULL,
	reserve float8 DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'tb_lease'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION @extschema@.tb_lease(text, integer, text, interval, float8) IS
	'lease slots of a limit: the lease id, or NULL (nothing taken) when they are not free or would leave fewer than reserve x max_in_flight free; freed by tb_release, the end of the session (hold => ''session'') or transaction (''transaction''), or after ttl';

CREATE FUNCTION @extschema@.tb_lease_wait(name text, slots integer DEFAULT 1,
	hold text DEFAULT 'session', ttl interval DEFAULT NULL,
	timeout interval DEFAULT NULL, reserve float8 DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'tb_lease_wait'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION @extschema@.tb_lease_wait(text, integer, text, interval, interval, float8) IS
	'tb_lease, waiting in the server in arrival order until the slots are free (the lease id) or timeout passes (NULL)';

CREATE FUNCTION @extschema@.tb_lease_all(name text, buckets text[],
	costs float8[] DEFAULT NULL, slots integer DEFAULT 1,
	hold text DEFAULT 'session', ttl interval DEFAULT NULL,
	reserve float8 DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'tb_lease_all'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION @extschema@.tb_lease_all(text, text[], float8[], integer, text, interval, float8) IS
	'a lease of a limit and tokens from every bucket named, all or nothing, each keeping its reserve: the lease id, or NULL with nothing taken';

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
