/* tokenbucket--1.5--1.6.sql: in-flight limits, and leases that free
 * themselves when their holder is gone. */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION tokenbucket UPDATE TO '1.6'" to load this file. \quit

--
-- A limit: at most max_in_flight slots held at once.  A name ending in *
-- is a template: each name starting with its prefix has a limit of its
-- own with these settings.  The DBA's, like tb_buckets, and dumped.
--
CREATE TABLE @extschema@.tb_limits (
	name text PRIMARY KEY
		CHECK (pg_catalog.octet_length(name) OPERATOR(pg_catalog.>=) 1
			AND pg_catalog.octet_length(name) OPERATOR(pg_catalog.<=) 1024),
	max_in_flight integer NOT NULL CHECK (max_in_flight OPERATOR(pg_catalog.>) 0)
);

SELECT pg_catalog.pg_extension_config_dump('@extschema@.tb_limits', '');

-- the templates, for finding the longest prefix of a name
CREATE INDEX tb_limits_templates ON @extschema@.tb_limits (name)
	WHERE name OPERATOR(pg_catalog.~~) '%*';

--
-- The slots of each limit (of each name a template made), one row each,
-- made as they are first needed.  A slot is held by lease "lease" while
-- its holder exists (see tb_holder_alive: the backend of process "pid"
-- that started at "started", or with hold 'transaction', transaction
-- "xid") and "expires" has not passed; otherwise it is free, whatever the
-- row says, so a holder that is gone frees its slots at once.  "key" is a hash of the name,
-- also the top bits of every lease id of the name: tb_release finds a
-- lease's slots through it.  No index covers a column a lease changes, so
-- leasing and releasing are HOT updates (fillfactor leaves them room).
-- Not dumped: a restored database holds no leases.
--
CREATE TABLE @extschema@.tb_lease_slots (
	name text NOT NULL,
	slot integer NOT NULL,
	key integer NOT NULL,
	lease bigint,
	hold text,
	holder oid,
	pid integer,
	started timestamptz,
	xid xid8,
	since timestamptz,
	expires timestamptz,
	PRIMARY KEY (name, slot)
) WITH (fillfactor = 50);

CREATE INDEX tb_lease_slots_key ON @extschema@.tb_lease_slots (key);

--
-- Lease ids: a name's key times 2^37, plus this sequence's next value
-- modulo 2^37 (137 billion leases before it comes round), under 2^53 so
-- that every client's numbers hold them exactly (JavaScript's too).  It
-- starts at a random point, so that an id is unlikely to name a lease of
-- an earlier installation of the extension still held.
--
CREATE SEQUENCE @extschema@.tb_lease_ids;
SELECT pg_catalog.setval('@extschema@.tb_lease_ids',
	(pg_catalog.random() OPERATOR(pg_catalog.*) 137438953472)::bigint OPERATOR(pg_catalog.+) 1);

CREATE FUNCTION @extschema@.tb_holder_alive(pid integer, started timestamptz, xid xid8)
RETURNS boolean
AS 'MODULE_PATHNAME', 'tb_holder_alive'
LANGUAGE C VOLATILE PARALLEL RESTRICTED COST 10;

COMMENT ON FUNCTION @extschema@.tb_holder_alive(integer, timestamptz, xid8) IS
	'whether a lease''s holder exists: transaction xid in progress, or (xid NULL) the backend of process pid that started at started';

CREATE FUNCTION @extschema@.tb_create_limit(name text, max_in_flight integer)
RETURNS void
AS 'MODULE_PATHNAME', 'tb_create_limit'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION @extschema@.tb_create_limit(text, integer) IS
	'a limit of at most max_in_flight slots leased at once (a name ending in * is a template)';

CREATE FUNCTION @extschema@.tb_alter_limit(name text, max_in_flight integer)
RETURNS void
AS 'MODULE_PATHNAME', 'tb_alter_limit'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION @extschema@.tb_alter_limit(text, integer) IS
	'a new max_in_flight for the limit (a template: for every name it makes); leases held are kept';

CREATE FUNCTION @extschema@.tb_lease(name text, slots integer DEFAULT 1,
	hold text DEFAULT 'session', ttl interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'tb_lease'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION @extschema@.tb_lease(text, integer, text, interval) IS
	'lease slots of a limit: the lease id, or NULL (nothing taken) when they are not free; freed by tb_release, the end of the session (hold => ''session'') or transaction (''transaction''), or after ttl';

CREATE FUNCTION @extschema@.tb_lease_wait(name text, slots integer DEFAULT 1,
	hold text DEFAULT 'session', ttl interval DEFAULT NULL,
	timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'tb_lease_wait'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION @extschema@.tb_lease_wait(text, integer, text, interval, interval) IS
	'tb_lease, waiting in the server in arrival order until the slots are free (the lease id) or timeout passes (NULL)';

CREATE FUNCTION @extschema@.tb_release(lease bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'tb_release'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION @extschema@.tb_release(bigint) IS
	'free a lease''s slots; false when it held none (released, expired, or its holder gone)';

REVOKE ALL ON FUNCTION @extschema@.tb_create_limit(text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.tb_alter_limit(text, integer) FROM PUBLIC;

--
-- A row per lease held now: the limit (or the name a template made), the
-- slots, who holds it and since when, until when at most.
--
CREATE VIEW @extschema@.tb_leases AS
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
GROUP BY s.name, s.lease, s.hold, s.holder, s.pid, s.since, s.expires;

COMMENT ON VIEW @extschema@.tb_leases IS
	'each lease held now: its limit, slots, hold, holder role and backend pid, since when, and when its ttl ends';

--
-- tb_status: a row per limit too (bucket columns NULL), with its
-- max_in_flight and the slots held now; and a row per name a template
-- made that has slots.
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
	b.memory,
	NULL::integer AS max_in_flight,
	NULL::integer AS in_flight
FROM b,
	LATERAL (SELECT @extschema@.tb_tokens(b.capacity, b.refill_rate, b.deficit,
			b.updated_at, c.at) AS tokens, c.at
		FROM (SELECT pg_catalog.clock_timestamp() AS at) AS c) AS s
UNION ALL
SELECT l.name, NULL, NULL, NULL, NULL, NULL, NULL, l.template,
	l.name OPERATOR(pg_catalog.~~) '%*', false, l.max_in_flight,
	(SELECT pg_catalog.count(*) FROM @extschema@.tb_lease_slots AS h
		WHERE h.name OPERATOR(pg_catalog.=) l.name AND h.lease IS NOT NULL
			AND (h.expires IS NULL OR h.expires OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp())
			AND @extschema@.tb_holder_alive(h.pid, h.started, h.xid))::integer
FROM (
	-- limits and templates of limits
	SELECT n.name, NULL::text AS template, n.max_in_flight
	FROM @extschema@.tb_limits AS n
	UNION ALL
	-- names templates made, with their template's settings
	SELECT k.name, t.name, t.max_in_flight
	FROM (SELECT DISTINCT s.name FROM @extschema@.tb_lease_slots AS s) AS k
	CROSS JOIN LATERAL (
		SELECT t.name, t.max_in_flight FROM @extschema@.tb_limits AS t
		WHERE t.name OPERATOR(pg_catalog.~~) '%*'
			AND pg_catalog.starts_with(k.name, pg_catalog.left(t.name, -1))
		ORDER BY pg_catalog.octet_length(t.name) DESC LIMIT 1) AS t
	WHERE NOT EXISTS (SELECT FROM @extschema@.tb_limits AS o
		WHERE o.name OPERATOR(pg_catalog.=) k.name)
) AS l;

COMMENT ON VIEW @extschema@.tb_status IS
	'each bucket''s settings, the tokens it holds now, when it is full, its pause, its debt, its template, whether it is a memory bucket; and each limit''s max_in_flight and the slots held now';

--
-- tb_stats: buckets only, as before (limits have no token counters).
--
CREATE OR REPLACE VIEW @extschema@.tb_stats AS
WITH c AS MATERIALIZED (
	SELECT * FROM @extschema@.tb_stats_counters()
	UNION ALL
	SELECT * FROM @extschema@.tb_memory_counters()
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
	coalesce(c.cancelled, 0) AS cancelled
FROM @extschema@.tb_status AS s
CROSS JOIN (SELECT c.since FROM c WHERE c.name IS NULL) AS i
LEFT JOIN c ON c.name OPERATOR(pg_catalog.=) CASE
	WHEN pg_catalog.octet_length(s.name) OPERATOR(pg_catalog.<=) 128 THEN s.name
	ELSE @extschema@.tb_stats_key(s.name) END
WHERE NOT s.is_template AND s.max_in_flight IS NULL;

CREATE FUNCTION @extschema@.tb_lease_all(name text, buckets text[],
	costs float8[] DEFAULT NULL, slots integer DEFAULT 1,
	hold text DEFAULT 'session', ttl interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'tb_lease_all'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION @extschema@.tb_lease_all(text, text[], float8[], integer, text, interval) IS
	'a lease of a limit and tokens from every bucket named, all or nothing: the lease id, or NULL with nothing taken';
