/* tokenbucket--1.8--1.9.sql: what 1.9 changes (see CHANGELOG.md). */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION tokenbucket UPDATE TO '1.9'" to load this file. \quit

--
-- 1.9: tb_buckets' rows are checked by its triggers rather than by its
-- CHECK constraint, which PostgreSQL parses anew for every statement that
-- writes a row: a sixth of a grant's instructions, for a check the
-- grant's C code has made.  tb_buckets_changed() checks the row as
-- tb_check_bucket() did (the same errors, 23514): before every INSERT
-- (tb_buckets_check), and after every UPDATE that sets a setting (name,
-- capacity, refill_rate, memory), which a grant does not, so its trigger
-- now fires for every row (its C code hands only memory buckets' changes
-- to shared memory, as its WHEN did).  An AFTER trigger there: any BEFORE
-- UPDATE trigger would lock each row before every UPDATE of it, grants
-- included.
--
ALTER TABLE @extschema@.tb_buckets DROP CONSTRAINT tb_buckets_check;
CREATE TRIGGER tb_buckets_check
	BEFORE INSERT ON @extschema@.tb_buckets
	FOR EACH ROW EXECUTE FUNCTION @extschema@.tb_buckets_changed('check');
CREATE OR REPLACE TRIGGER tb_buckets_memory_update
	AFTER UPDATE OF name, capacity, refill_rate, memory ON @extschema@.tb_buckets
	FOR EACH ROW EXECUTE FUNCTION @extschema@.tb_buckets_changed();
COMMENT ON FUNCTION @extschema@.tb_check_bucket(text, float8, float8, float8, timestamptz) IS
	'the check of a row of tb_buckets (its triggers): true, or an error naming the bad column';
COMMENT ON FUNCTION @extschema@.tb_buckets_changed() IS
	'trigger: checks the rows written and hands changes to memory buckets'' rows to shared memory at commit';
