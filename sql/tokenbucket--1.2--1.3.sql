/* tokenbucket--1.2--1.3.sql: memory buckets, whose tokens live in shared
 * memory (the library preloaded), beside the table's. */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION tokenbucket UPDATE TO '1.3'" to load this file. \quit

--
-- A memory bucket's row holds its settings; its tokens and pause live in
-- shared memory, so its deficit, updated_at and paused_until columns are
-- not used.  A template with memory makes memory buckets, which have no
-- row at all.
--
ALTER TABLE @extschema@.tb_buckets
	ADD COLUMN memory boolean NOT NULL DEFAULT false;

COMMENT ON COLUMN @extschema@.tb_buckets.memory IS
	'whether the bucket keeps its tokens in shared memory (chosen when it is made)';

--
-- Changes to a memory bucket's row (tb_create, tb_alter, tb_drop, or the
-- DBA's own INSERT, UPDATE, DELETE, TRUNCATE) reach its tokens in shared
-- memory when the transaction commits.  Rows of table buckets never fire,
-- and a grant's UPDATE, which sets none of the columns a memory bucket's
-- settings are, does not even evaluate the condition (an UPDATE trigger
-- on every column cost a table grant 6% more instructions).
--
CREATE FUNCTION @extschema@.tb_buckets_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'tb_buckets_changed'
LANGUAGE C;

COMMENT ON FUNCTION @extschema@.tb_buckets_changed() IS
	'trigger: hands changes to memory buckets'' rows to shared memory at commit';

CREATE TRIGGER tb_buckets_memory_insert
	AFTER INSERT ON @extschema@.tb_buckets
	FOR EACH ROW WHEN (NEW.memory)
	EXECUTE FUNCTION @extschema@.tb_buckets_changed();
CREATE TRIGGER tb_buckets_memory_update
	AFTER UPDATE OF name, capacity, refill_rate, memory ON @extschema@.tb_buckets
	FOR EACH ROW WHEN (OLD.memory OR NEW.memory)
	EXECUTE FUNCTION @extschema@.tb_buckets_changed();
CREATE TRIGGER tb_buckets_memory_delete
	AFTER DELETE ON @extschema@.tb_buckets
	FOR EACH ROW WHEN (OLD.memory)
	EXECUTE FUNCTION @extschema@.tb_buckets_changed();
CREATE TRIGGER tb_buckets_memory_truncate
	AFTER TRUNCATE ON @extschema@.tb_buckets
	FOR EACH STATEMENT
	EXECUTE FUNCTION @extschema@.tb_buckets_changed();

--
-- tb_create gains memory.  Replacing it drops the grants made on it, so
-- they are saved first, as the statements that give them again.
--
WITH grants (step, stmt) AS (
	SELECT 1, 'REVOKE ALL ON FUNCTION @extschema@.tb_create(text, float8, float8, interval, boolean) FROM PUBLIC'
	UNION ALL
	SELECT 2, pg_catalog.format('GRANT EXECUTE ON FUNCTION @extschema@.tb_create(text, float8, float8, interval, boolean) TO %s',
		CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
			ELSE pg_catalog.quote_ident(r.rolname) END)
	FROM pg_catalog.pg_proc AS p
	CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) AS a
	LEFT JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) a.grantee
	WHERE p.oid OPERATOR(pg_catalog.=) '@extschema@.tb_create(text, float8, float8, interval)'::pg_catalog.regprocedure
		AND a.grantee OPERATOR(pg_catalog.<>) p.proowner)
SELECT pg_catalog.set_config('tokenbucket_upgrade.grants',
	pg_catalog.string_agg(stmt, E'\n' ORDER BY step), false)
FROM grants;

DROP FUNCTION @extschema@.tb_create(text, float8, float8, interval);

CREATE FUNCTION @extschema@.tb_create(name text, capacity float8, refill float8,
	per interval DEFAULT '1 second', memory boolean DEFAULT false)
RETURNS void
AS 'MODULE_PATHNAME', 'tb_create'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.tb_create(text, float8, float8, interval, boolean) IS
	'create a full bucket holding at most capacity tokens that gains refill tokens every per; with memory, in shared memory';

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
-- The functions switch to the extension's owner, search_path =
-- pg_catalog, pg_temp and enable_seqscan = off themselves, in C, around
-- the table work only (store_connect()): as SECURITY DEFINER functions with
-- those settings, fmgr changed user and set both for every call, which cost
-- a call answered from shared memory a fifth of its time.
--
ALTER FUNCTION @extschema@.tb_acquire(text) SECURITY INVOKER RESET ALL;
ALTER FUNCTION @extschema@.tb_acquire(text, float8) SECURITY INVOKER RESET ALL;
ALTER FUNCTION @extschema@.tb_try(text, float8) SECURITY INVOKER RESET ALL;
ALTER FUNCTION @extschema@.tb_peek(text, float8) SECURITY INVOKER RESET ALL;
ALTER FUNCTION @extschema@.tb_acquire_wait(text, float8, interval) SECURITY INVOKER RESET ALL;
ALTER FUNCTION @extschema@.tb_acquire_all(text[], float8[]) SECURITY INVOKER RESET ALL;
ALTER FUNCTION @extschema@.tb_acquire_all_wait(text[], float8[], interval) SECURITY INVOKER RESET ALL;
ALTER FUNCTION @extschema@.tb_try_all(text[], float8[]) SECURITY INVOKER RESET ALL;
ALTER FUNCTION @extschema@.tb_refund(text, float8) SECURITY INVOKER RESET ALL;
ALTER FUNCTION @extschema@.tb_settle(text, float8, float8) SECURITY INVOKER RESET ALL;
ALTER FUNCTION @extschema@.tb_sync(text, float8) SECURITY INVOKER RESET ALL;
ALTER FUNCTION @extschema@.tb_pause(text, interval) SECURITY INVOKER RESET ALL;
ALTER FUNCTION @extschema@.tb_pause_until(text, timestamptz) SECURITY INVOKER RESET ALL;
ALTER FUNCTION @extschema@.tb_purge(interval) SECURITY INVOKER RESET ALL;
ALTER FUNCTION @extschema@.tb_alter(text, float8, float8, interval) SECURITY INVOKER RESET ALL;
ALTER FUNCTION @extschema@.tb_reset(text) SECURITY INVOKER RESET ALL;
ALTER FUNCTION @extschema@.tb_drop(text) SECURITY INVOKER RESET ALL;

--
-- What tb_status shows of memory buckets.  Whoever may read tb_status may
-- call them; anyone else gets an error.
--
CREATE FUNCTION @extschema@.tb_memory_buckets(OUT name text, OUT capacity float8,
	OUT refill_rate float8, OUT deficit float8, OUT updated_at timestamptz,
	OUT paused_until timestamptz, OUT template text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'tb_memory_buckets'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.tb_memory_buckets() IS
	'the state of every memory bucket of this database held in shared memory';

CREATE FUNCTION @extschema@.tb_memory_empty_at()
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'tb_memory_empty_at'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.tb_memory_empty_at() IS
	'when a memory bucket not held in shared memory was empty (-infinity: it is full; NULL: no memory buckets here)';

--
-- tb_status gains memory buckets, and a column saying which they are.
--
CREATE OR REPLACE VIEW @extschema@.tb_status AS
WITH m AS MATERIALIZED (
	SELECT * FROM @extschema@.tb_memory_buckets()
), e AS (
	SELECT @extschema@.tb_memory_empty_at() AS empty_at
), b AS (
	-- table buckets, and every template
	SELECT b.name, b.capacity, b.refill_rate, b.deficit, b.updated_at,
		b.paused_until, b.template, b.memory
	FROM @extschema@.tb_buckets AS b
	WHERE NOT b.memory OR b.name OPERATOR(pg_catalog.~~) '%*'
	UNION ALL
	-- named memory buckets: their state, or the state they would start with
	SELECT b.name, b.capacity, b.refill_rate,
		CASE WHEN m.name IS NOT NULL THEN m.deficit
			WHEN e.empty_at OPERATOR(pg_catalog.=) '-infinity' THEN 0
			ELSE b.capacity END,
		CASE WHEN m.name IS NOT NULL THEN m.updated_at
			WHEN e.empty_at OPERATOR(pg_catalog.=) '-infinity' THEN b.updated_at
			ELSE e.empty_at END,
		coalesce(m.paused_until, '-infinity'), NULL, true
	FROM @extschema@.tb_buckets AS b
	CROSS JOIN e
	LEFT JOIN m ON m.name OPERATOR(pg_catalog.=) b.name
	WHERE b.memory AND b.name OPERATOR(pg_catalog.!~~) '%*'
	UNION ALL
	-- buckets made from memory templates
	SELECT m.name, m.capacity, m.refill_rate, m.deficit, m.updated_at,
		m.paused_until, m.template, true
	FROM m
	WHERE m.template IS NOT NULL
)
SELECT b.name,
	b.capacity,
	b.refill_rate,
	s.tokens,
	@extschema@.tb_full_at(b.capacity, b.refill_rate, b.deficit, b.updated_at) AS full_at,
	CASE WHEN b.paused_until OPERATOR(pg_catalog.>) s.at THEN b.paused_until END AS paused_until,
	GREATEST(0, OPERATOR(pg_catalog.-) s.tokens) AS debt,
	b.template,
	b.name OPERATOR(pg_catalog.~~) '%*' AS is_template,
	b.memory
FROM b,
	LATERAL (SELECT @extschema@.tb_tokens(b.capacity, b.refill_rate, b.deficit,
			b.updated_at, c.at) AS tokens, c.at
		FROM (SELECT pg_catalog.clock_timestamp() AS at) AS c) AS s;

COMMENT ON VIEW @extschema@.tb_status IS
	'each bucket''s settings, the tokens it holds now, when it is full, its pause, its debt, its template, and whether it is a memory bucket';
