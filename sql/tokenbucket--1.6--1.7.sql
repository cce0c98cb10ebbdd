/* tokenbucket--1.6--1.7.sql: a reserve for critical traffic (a call with
 * reserve => r is granted only if r of the capacity, or of the slots, is
 * left after it); memory limits, whose leases live in shared memory; and
 * counters of limits. */

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

--
-- A limit kept in memory: its leases live in shared memory (the library
-- preloaded), freed by their holder's transaction or session end, and all
-- of them by a crash.  Its configuration stays a row, as a table limit's.
--
ALTER TABLE @extschema@.tb_limits ADD COLUMN memory boolean NOT NULL DEFAULT false;

--
-- A change of limits, committed, makes every session read their
-- configuration again: a memory lease reads it from the table only then.
-- The statement trigger is the extension's own (not PUBLIC), and refuses
-- to fire for any other table.
--
CREATE FUNCTION @extschema@.tb_limits_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'tb_limits_changed'
LANGUAGE C;

COMMENT ON FUNCTION @extschema@.tb_limits_changed() IS
	'the trigger of tb_limits: tells every session, once the change commits, to read limits again';

REVOKE ALL ON FUNCTION @extschema@.tb_limits_changed() FROM PUBLIC;

CREATE TRIGGER tb_limits_changed
	AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.tb_limits
	FOR EACH STATEMENT
	EXECUTE FUNCTION @extschema@.tb_limits_changed();

--
-- tb_create_limit gains memory.  Replacing it drops the grants made on it,
-- so they are saved first, as the statements that give them again.
--
WITH grants (step, stmt) AS (
	SELECT 1, 'REVOKE ALL ON FUNCTION @extschema@.tb_create_limit(text, integer, boolean) FROM PUBLIC'
	UNION ALL
	SELECT 2, pg_catalog.format('GRANT EXECUTE ON FUNCTION @extschema@.tb_create_limit(text, integer, boolean) TO %s',
		CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
			ELSE pg_catalog.quote_ident(r.rolname) END)
	FROM pg_catalog.pg_proc AS p
	CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) AS a
	LEFT JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) a.grantee
	WHERE p.oid OPERATOR(pg_catalog.=) '@extschema@.tb_create_limit(text, integer)'::pg_catalog.regprocedure
		AND a.grantee OPERATOR(pg_catalog.<>) p.proowner)
SELECT pg_catalog.set_config('tokenbucket_upgrade.grants',
	pg_catalog.string_agg(stmt, E'\n' ORDER BY step), false)
FROM grants;

DROP FUNCTION @extschema@.tb_create_limit(text, integer);

CREATE FUNCTION @extschema@.tb_create_limit(name text, max_in_flight integer,
	memory boolean DEFAULT false)
RETURNS void
AS 'MODULE_PATHNAME', 'tb_create_limit'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION @extschema@.tb_create_limit(text, integer, boolean) IS
	'a limit of at most max_in_flight slots leased at once (a name ending in * is a template); with memory, its leases live in shared memory';

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
-- The leases of memory limits held now, for the views below; each reader
-- of a view needs it (see README, Privileges), and it checks that its
-- caller may read one.
--
CREATE FUNCTION @extschema@.tb_memory_leases(OUT name text, OUT lease bigint,
	OUT slots integer, OUT hold text, OUT holder oid, OUT pid integer,
	OUT since timestamptz, OUT expires timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'tb_memory_leases'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED ROWS 100;

COMMENT ON FUNCTION @extschema@.tb_memory_leases() IS
	'every lease of a memory limit held now: its limit, id, slots, hold, holder role and pid, since when, and when its ttl ends';

REVOKE ALL ON FUNCTION @extschema@.tb_memory_leases() FROM PUBLIC;

CREATE OR REPLACE VIEW @extschema@.tb_leases AS
SELECT s.name,
	s.lease,
	pg_catalog.count(*)::integer AS slots,
	s.hold,
	s.holder::pg_catalog.regrole AS holder,
	s.pid,
	s.since,
	s.expires
FROM @extschema@.tb_lease_slots AS s
WHERE s.lease IS NOT NULL
	AND (s.expires IS NULL OR s.expires OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp())
	AND @extschema@.tb_holder_alive(s.pid, s.started, s.xid)
GROUP BY s.name, s.lease, s.hold, s.holder, s.pid, s.since, s.expires
UNION ALL
SELECT m.name, m.lease, m.slots, m.hold, m.holder::pg_catalog.regrole, m.pid,
	m.since, m.expires
FROM @extschema@.tb_memory_leases() AS m;

--
-- tb_status: a memory limit's slots held are its memory leases'.
--
CREATE OR REPLACE VIEW @extschema@.tb_status AS
WITH m AS MATERIALIZED (
	SELECT * FROM @extschema@.tb_memory_buckets()
), ml AS MATERIALIZED (
	SELECT * FROM @extschema@.tb_memory_leases()
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
	b.memory,
	NULL::integer AS max_in_flight,
	NULL::integer AS in_flight
FROM b,
	LATERAL (SELECT @extschema@.tb_tokens(b.capacity, b.refill_rate, b.deficit,
			b.updated_at, c.at) AS tokens, c.at
		FROM (SELECT pg_catalog.clock_timestamp() AS at) AS c) AS s
UNION ALL
SELECT l.name, NULL, NULL, NULL, NULL, NULL, NULL, l.template,
	l.name OPERATOR(pg_catalog.~~) '%*', l.memory, l.max_in_flight,
	CASE WHEN l.memory THEN
		coalesce((SELECT pg_catalog.sum(h.slots) FROM ml AS h
			WHERE h.name OPERATOR(pg_catalog.=) l.name), 0)::integer
	ELSE
		(SELECT pg_catalog.count(*) FROM @extschema@.tb_lease_slots AS h
			WHERE h.name OPERATOR(pg_catalog.=) l.name AND h.lease IS NOT NULL
				AND (h.expires IS NULL OR h.expires OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp())
				AND @extschema@.tb_holder_alive(h.pid, h.started, h.xid))::integer
	END
FROM (
	-- limits and templates of limits
	SELECT n.name, NULL::text AS template, n.max_in_flight, n.memory
	FROM @extschema@.tb_limits AS n
	UNION ALL
	-- names templates made, with their template's settings
	SELECT k.name, t.name, t.max_in_flight, t.memory
	FROM (SELECT DISTINCT s.name FROM @extschema@.tb_lease_slots AS s
		UNION SELECT h.name FROM ml AS h) AS k
	CROSS JOIN LATERAL (
		SELECT t.name, t.max_in_flight, t.memory FROM @extschema@.tb_limits AS t
		WHERE t.name OPERATOR(pg_catalog.~~) '%*'
			AND pg_catalog.starts_with(k.name, pg_catalog.left(t.name, -1))
		ORDER BY pg_catalog.octet_length(t.name) DESC LIMIT 1) AS t
	WHERE NOT EXISTS (SELECT FROM @extschema@.tb_limits AS o
		WHERE o.name OPERATOR(pg_catalog.=) k.name)
) AS l;

--
-- Counters of limits: leases granted and refused, lease waits, and the
-- slots freed by tb_release, by their holder's end, by their ttl.  Kept
-- under the installation's tb_limits, apart from its buckets' (a limit
-- and a bucket may share a name).
--
CREATE FUNCTION @extschema@.tb_limit_counters(OUT name text, OUT granted bigint,
	OUT slots bigint, OUT refused bigint, OUT waited bigint, OUT wait_seconds float8,
	OUT timeouts bigint, OUT cancelled bigint, OUT released bigint, OUT ended bigint,
	OUT expired bigint, OUT since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'tb_limit_counters'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED ROWS 100;

COMMENT ON FUNCTION @extschema@.tb_limit_counters() IS
	'the counters of every limit, limit template and name a limit template made that has them, and a row with a NULL name whose since holds for the others';

REVOKE ALL ON FUNCTION @extschema@.tb_limit_counters() FROM PUBLIC;

--
-- tb_stats: a row per limit too (and per name a limit template made):
-- granted, granted_tokens and denied count leases, their slots and the
-- leases refused; released, ended and expired the slots freed each way;
-- max_in_flight and in_flight as tb_status shows them.  Bucket rows have
-- these NULL.
--
CREATE OR REPLACE VIEW @extschema@.tb_stats AS
WITH c AS MATERIALIZED (
	SELECT * FROM @extschema@.tb_stats_counters()
	UNION ALL
	SELECT * FROM @extschema@.tb_memory_counters()
), l AS MATERIALIZED (
	SELECT * FROM @extschema@.tb_limit_counters()
), s AS MATERIALIZED (
	SELECT * FROM @extschema@.tb_status AS s WHERE NOT s.is_template
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
	coalesce(c.cancelled, 0) AS cancelled,
	NULL::integer AS max_in_flight,
	NULL::integer AS in_flight,
	NULL::bigint AS released,
	NULL::bigint AS ended,
	NULL::bigint AS expired
FROM s
CROSS JOIN (SELECT c.since FROM c WHERE c.name IS NULL) AS i
LEFT JOIN c ON c.name OPERATOR(pg_catalog.=) CASE
	WHEN pg_catalog.octet_length(s.name) OPERATOR(pg_catalog.<=) 128 THEN s.name
	ELSE @extschema@.tb_stats_key(s.name) END
WHERE s.max_in_flight IS NULL
UNION ALL
SELECT s.name,
	s.memory,
	s.template,
	NULL,
	NULL,
	coalesce(l.granted, 0),
	coalesce(l.slots, 0)::float8,
	coalesce(l.refused, 0),
	coalesce(l.waited, 0),
	coalesce(l.wait_seconds, 0),
	coalesce(l.timeouts, 0),
	0::float8,
	0::bigint,
	coalesce(l.since, i.since),
	NULL,
	coalesce(l.cancelled, 0),
	s.max_in_flight,
	s.in_flight,
	coalesce(l.released, 0),
	coalesce(l.ended, 0),
	coalesce(l.expired, 0)
FROM s
CROSS JOIN (SELECT l.since FROM l WHERE l.name IS NULL) AS i
LEFT JOIN l ON l.name OPERATOR(pg_catalog.=) CASE
	WHEN pg_catalog.octet_length(s.name) OPERATOR(pg_catalog.<=) 128 THEN s.name
	ELSE @extschema@.tb_stats_key(s.name) END
WHERE s.max_in_flight IS NOT NULL;

COMMENT ON VIEW @extschema@.tb_stats IS
	'each bucket''s and limit''s counters since the server started (kept across a clean restart) or tb_stats_reset, with its settings and what it holds now';

-- whoever may read tb_leases, tb_status or tb_stats (over tb_status) may
-- call what they are built on now
DO $$
DECLARE
	grantee text;
BEGIN
	FOR grantee IN
		SELECT DISTINCT CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
			ELSE pg_catalog.quote_ident(r.rolname) END
		FROM pg_catalog.pg_class AS c
		CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) AS a
		LEFT JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) a.grantee
		WHERE c.oid OPERATOR(pg_catalog.=) ANY (ARRAY['@extschema@.tb_leases'::pg_catalog.regclass,
				'@extschema@.tb_status'::pg_catalog.regclass, '@extschema@.tb_stats'::pg_catalog.regclass])
			AND a.privilege_type OPERATOR(pg_catalog.=) 'SELECT'
			AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
	LOOP
		EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION @extschema@.tb_memory_leases() TO %s',
			grantee);
	END LOOP;
	-- and whoever may read tb_stats, what it shows of limits
	FOR grantee IN
		SELECT DISTINCT CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
			ELSE pg_catalog.quote_ident(r.rolname) END
		FROM pg_catalog.pg_class AS c
		CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) AS a
		LEFT JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) a.grantee
		WHERE c.oid OPERATOR(pg_catalog.=) '@extschema@.tb_stats'::pg_catalog.regclass
			AND a.privilege_type OPERATOR(pg_catalog.=) 'SELECT'
			AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
	LOOP
		EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION @extschema@.tb_limit_counters() TO %s',
			grantee);
	END LOOP;
END $$;
