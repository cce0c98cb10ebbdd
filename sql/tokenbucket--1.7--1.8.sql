/* tokenbucket--1.7--1.8.sql: NULL is an error wherever it would be
 * silently wrong; tb_ensure and tb_ensure_limit, a set-up that can be run
 * again; SELECT on a view is enough to read it. */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION tokenbucket UPDATE TO '1.8'" to load this file. \quit

--
-- No function that takes, gives, settles, syncs, pauses, makes or changes
-- buckets or limits is STRICT any more: a NULL gave NULL and did nothing,
-- silently (a settlement left charged, a bucket never made).  Each fails
-- with 22004 naming the argument, except where NULL has a meaning.  The
-- functions are altered, not replaced: grants made on them are kept.
--
ALTER FUNCTION @extschema@.tb_acquire(text) CALLED ON NULL INPUT;
ALTER FUNCTION @extschema@.tb_acquire(text, float8) CALLED ON NULL INPUT;
ALTER FUNCTION @extschema@.tb_acquire(text, float8, float8) CALLED ON NULL INPUT;
ALTER FUNCTION @extschema@.tb_try(text, float8) CALLED ON NULL INPUT;
ALTER FUNCTION @extschema@.tb_try(text, float8, float8) CALLED ON NULL INPUT;
ALTER FUNCTION @extschema@.tb_peek(text, float8) CALLED ON NULL INPUT;
ALTER FUNCTION @extschema@.tb_peek(text, float8, float8) CALLED ON NULL INPUT;
ALTER FUNCTION @extschema@.tb_refund(text, float8) CALLED ON NULL INPUT;
ALTER FUNCTION @extschema@.tb_settle(text, float8, float8) CALLED ON NULL INPUT;
ALTER FUNCTION @extschema@.tb_sync(text, float8) CALLED ON NULL INPUT;
ALTER FUNCTION @extschema@.tb_pause(text, interval) CALLED ON NULL INPUT;
ALTER FUNCTION @extschema@.tb_pause_until(text, timestamptz) CALLED ON NULL INPUT;
ALTER FUNCTION @extschema@.tb_purge(interval) CALLED ON NULL INPUT;
ALTER FUNCTION @extschema@.tb_create(text, float8, float8, interval, boolean) CALLED ON NULL INPUT;
ALTER FUNCTION @extschema@.tb_reset(text) CALLED ON NULL INPUT;
ALTER FUNCTION @extschema@.tb_drop(text) CALLED ON NULL INPUT;
ALTER FUNCTION @extschema@.tb_create_limit(text, integer, boolean) CALLED ON NULL INPUT;
ALTER FUNCTION @extschema@.tb_alter_limit(text, integer) CALLED ON NULL INPUT;
ALTER FUNCTION @extschema@.tb_release(bigint) CALLED ON NULL INPUT;

--
-- A set-up that can be run again (a deploy script's, on every release):
-- each makes what is missing, changes what differs, and says which it
-- did.  Not PUBLIC's, like tb_create and tb_create_limit.
--
CREATE FUNCTION @extschema@.tb_ensure(name text, capacity float8, refill float8,
	per interval DEFAULT '1 second', memory boolean DEFAULT false)
RETURNS text
AS 'MODULE_PATHNAME', 'tb_ensure'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.tb_ensure(text, float8, float8, interval, boolean) IS
	'tb_create''s bucket, made if missing (''created''), given these settings if it has others, keeping its tokens (''changed''), or left as it is (''unchanged'')';

CREATE FUNCTION @extschema@.tb_ensure_limit(name text, max_in_flight integer,
	memory boolean DEFAULT false)
RETURNS text
AS 'MODULE_PATHNAME', 'tb_ensure_limit'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.tb_ensure_limit(text, integer, boolean) IS
	'tb_create_limit''s limit, made if missing (''created''), given this max_in_flight if it has another, keeping its leases (''changed''), or left as it is (''unchanged'')';

REVOKE ALL ON FUNCTION @extschema@.tb_ensure(text, float8, float8, interval, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.tb_ensure_limit(text, integer, boolean) FROM PUBLIC;

--
-- The functions behind the views are PUBLIC's, as any function is: each
-- checks that its caller may read a view that shows what it shows, so
-- SELECT on a view is all a role needs to read it.  (The grants made on
-- them for roles that read the views are kept, and change nothing.)
--
GRANT EXECUTE ON FUNCTION @extschema@.tb_memory_buckets() TO PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.tb_memory_leases() TO PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.tb_stats_counters() TO PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.tb_memory_counters() TO PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.tb_template_counters() TO PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.tb_memory_templates() TO PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.tb_limit_counters() TO PUBLIC;
