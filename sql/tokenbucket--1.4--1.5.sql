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
