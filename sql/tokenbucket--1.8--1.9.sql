/* tokenbucket--1.8--1.9.sql: tb_held, the rows open transactions hold
 * (a wait for one is bounded by tokenbucket.row_lock_timeout). */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION tokenbucket UPDATE TO '1.9'" to load this file. \quit

--
-- What open transactions hold: a call on a table bucket or a limit's row
-- locks it until its transaction ends, and another transaction's caller
-- waits for it at most tokenbucket.row_lock_timeout (55P03 naming the
-- holder).  tb_held shows the DBA each such row, held by a call of
-- tokenbucket's in a transaction still open, with who holds it and how
-- many sessions wait for that transaction.  Its function shows the rows to
-- whoever may read the view.
--
CREATE FUNCTION @extschema@.tb_held_rows(OUT kind text, OUT name text, OUT pid integer,
	OUT since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'tb_held_rows'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.tb_held_rows() IS
	'each bucket and limit whose row an open transaction holds by a call of tokenbucket''s: what tb_held shows, to whoever may read it';

CREATE VIEW @extschema@.tb_held AS
SELECT h.kind,
	h.name,
	h.pid,
	a.usename AS role,
	a.application_name,
	a.client_addr,
	a.state,
	h.since AS held_since,
	a.xact_start,
	CASE WHEN a.state OPERATOR(pg_catalog.~~) 'idle in transaction%'
		THEN pg_catalog.now() OPERATOR(pg_catalog.-) a.state_change END AS idle_for,
	(SELECT pg_catalog.count(*)::integer FROM pg_catalog.pg_stat_activity AS w
	 WHERE h.pid OPERATOR(pg_catalog.=) ANY (pg_catalog.pg_blocking_pids(w.pid))) AS waiting
FROM @extschema@.tb_held_rows() AS h
LEFT JOIN pg_catalog.pg_stat_activity AS a ON a.pid OPERATOR(pg_catalog.=) h.pid;

COMMENT ON VIEW @extschema@.tb_held IS
	'each bucket and limit whose row an open transaction holds by a call of tokenbucket''s: its holder''s pid, role, application, state, since when, how long idle in transaction, and how many sessions wait for it';
