--
-- lease_kinds: the store a name's leases live in (the table, or shared
-- memory) does not change under leases held.  A limit's kind is its
-- row's, or its longest template's ('prefix*'): a statement on tb_limits
-- that would make a name holding leases in one store take its next ones
-- from the other (a row over a template of the other kind, a DELETE that
-- uncovers one, a template that becomes or stops being the longest
-- cover), or rename the limit its leases were taken under, is refused
-- (0A000) while they are held, and allowed once they are released;
-- tb_drop() of such a limit drops its leases.  Here templates are memory
-- limits and rows table limits; sql/lease_kinds_swapped.sql runs it all
-- the other way round.
--
\if :{?tmpl_memory}
\else
\set tmpl_memory true
\set row_memory false
\endif
CREATE EXTENSION tokenbucket;

-- kinds(name): the slots of "name" held now, by store ('' when none)
CREATE FUNCTION pg_temp.kinds(n text) RETURNS text LANGUAGE sql
	AS $$SELECT coalesce(string_agg(CASE WHEN lease < 0 THEN 'memory' ELSE 'table' END
		|| ' ' || slots, ', ' ORDER BY lease), '') FROM tb_leases WHERE name = n$$;

-- with no lease held, nothing is refused: a row over a template of the
-- other kind, a template that becomes the longest cover, renames, and
-- each undone
SELECT tb_create_limit('jobs:*', 1, :tmpl_memory);
INSERT INTO tb_limits VALUES ('jobs:1', 1, :row_memory);
DELETE FROM tb_limits WHERE name = 'jobs:1';
INSERT INTO tb_limits VALUES ('jobs:1*', 1, :row_memory);
DELETE FROM tb_limits WHERE name = 'jobs:1*';
UPDATE tb_limits SET name = 'work:*' WHERE name = 'jobs:*';
UPDATE tb_limits SET name = 'jobs:*' WHERE name = 'work:*';
SELECT name, max_in_flight, memory = :tmpl_memory AS template_kind FROM tb_limits;

-- a row of the other kind over a name the template's store holds leases
-- of: refused, by plain SQL and by the functions that make limits; the
-- lease stays held, and counted
SELECT tb_lease('jobs:1') AS t1 \gset
SELECT pg_temp.kinds('jobs:1');
INSERT INTO tb_limits VALUES ('jobs:1', 1, :row_memory);
\echo :SQLSTATE
SELECT tb_create_limit('jobs:1', 1, :row_memory);
\echo :SQLSTATE
SELECT tb_ensure_limit('jobs:1', 1, :row_memory);
\echo :SQLSTATE
SELECT tb_lease('jobs:1') IS NULL AS still_full, pg_temp.kinds('jobs:1');
-- a row of the same kind moves nothing: made as before, the lease
-- counted in it; dropped as before, the lease counted in the template
-- again, and still held
SELECT tb_create_limit('jobs:1', 1, :tmpl_memory);
SELECT tb_lease('jobs:1') IS NULL AS still_full;
DELETE FROM tb_limits WHERE name = 'jobs:1';
SELECT tb_lease('jobs:1') IS NULL AS still_full, pg_temp.kinds('jobs:1');
-- released, the row of the other kind is made
SELECT tb_release(:t1);
SELECT tb_create_limit('jobs:1', 1, :row_memory);

-- the row's store holds a lease of it now: a DELETE that would uncover
-- the template is refused, and so is a rename; the lease stays held
SELECT tb_lease('jobs:1') AS r1 \gset
SELECT pg_temp.kinds('jobs:1');
DELETE FROM tb_limits WHERE name = 'jobs:1';
\echo :SQLSTATE
UPDATE tb_limits SET name = 'jobs:2' WHERE name = 'jobs:1';
\echo :SQLSTATE
SELECT tb_lease('jobs:1') IS NULL AS still_full, pg_temp.kinds('jobs:1');
-- what moves no name with leases goes on: a new maximum (tb_alter_limit,
-- tb_ensure_limit, SQL), names set to themselves, other limits made,
-- renamed and dropped
SELECT tb_alter_limit('jobs:1', 2);
SELECT tb_ensure_limit('jobs:1', 1, :row_memory);
UPDATE tb_limits SET max_in_flight = 1 WHERE name = 'jobs:1';
UPDATE tb_limits SET name = name;
SELECT tb_create_limit('other', 1, :tmpl_memory);
UPDATE tb_limits SET name = 'other2' WHERE name = 'other';
DELETE FROM tb_limits WHERE name = 'other2';
-- tb_drop() of the row drops its lease with it: the template's store
-- leases the name from then on, from its one slot
SELECT tb_drop('jobs:1');
SELECT pg_temp.kinds('jobs:1') AS none_held, tb_release(:r1) AS released;
SELECT tb_lease('jobs:1') AS t1 \gset
SELECT tb_lease('jobs:1') IS NULL AS full, pg_temp.kinds('jobs:1');
SELECT tb_release(:t1);

-- a template of the other kind that would become the longest cover of a
-- name with leases: refused; of the same kind, made and dropped as
-- before; released, made
SELECT tb_lease('jobs:12') AS t12 \gset
INSERT INTO tb_limits VALUES ('jobs:1*', 1, :row_memory);
\echo :SQLSTATE
SELECT tb_create_limit('jobs:1*', 5, :tmpl_memory);
SELECT tb_drop('jobs:1*');
SELECT pg_temp.kinds('jobs:12') AS held_still;
SELECT tb_release(:t12);
SELECT tb_create_limit('jobs:1*', 1, :row_memory);
-- that template's store holds a lease of a name it makes: a DELETE of it
-- (the shorter template of the other kind would make the name) is
-- refused, and so is a rename
SELECT tb_lease('jobs:12') AS r12 \gset
SELECT pg_temp.kinds('jobs:12');
DELETE FROM tb_limits WHERE name = 'jobs:1*';
\echo :SQLSTATE
UPDATE tb_limits SET name = 'jobs:3*' WHERE name = 'jobs:1*';
\echo :SQLSTATE
-- tb_drop() of the template drops the leases of the names it made
SELECT tb_drop('jobs:1*');
SELECT pg_temp.kinds('jobs:12') AS none_held, tb_release(:r12) AS released;
SELECT tb_lease('jobs:12') IS NOT NULL AS granted, tb_lease('jobs:12') IS NULL AS full,
       pg_temp.kinds('jobs:12');
SELECT tb_release(lease) FROM tb_leases;

-- a rename of a limit with leases, and of the template that made a name
-- with leases: refused (the leases would stay under their names, counted
-- by no limit, or another); released, renamed
SELECT tb_create_limit('solo', 2, :row_memory);
SELECT tb_lease('solo', 2) AS s2 \gset
UPDATE tb_limits SET name = 'solo2' WHERE name = 'solo';
\echo :SQLSTATE
SELECT tb_release(:s2);
UPDATE tb_limits SET name = 'solo2' WHERE name = 'solo';
SELECT tb_drop('solo2');
SELECT tb_lease('jobs:5') AS t5 \gset
UPDATE tb_limits SET name = 'work:*' WHERE name = 'jobs:*';
\echo :SQLSTATE
SELECT tb_release(:t5);
UPDATE tb_limits SET name = 'work:*' WHERE name = 'jobs:*';
UPDATE tb_limits SET name = 'jobs:*' WHERE name = 'work:*';

-- only live leases count: one whose ttl passed holds nothing
SELECT tb_lease('jobs:1', ttl => '10 milliseconds') IS NOT NULL AS granted;
SELECT pg_sleep(0.2);
SELECT tb_create_limit('jobs:1', 1, :row_memory);
SELECT tb_drop('jobs:1');

-- in one transaction: a lease released, then the change (the release
-- commits with it); a limit dropped with its lease, then made again as
-- the other kind (the lease goes with the drop)
SELECT tb_lease('jobs:1') AS t1 \gset
BEGIN;
SELECT tb_release(:t1);
SELECT tb_create_limit('jobs:1', 1, :row_memory);
COMMIT;
SELECT tb_lease('jobs:1') AS r1 \gset
BEGIN;
SELECT tb_drop('jobs:1');
SELECT tb_create_limit('jobs:1', 1, :tmpl_memory);
COMMIT;
SELECT tb_release(:r1) AS released;
SELECT tb_lease('jobs:1') IS NOT NULL AS granted, tb_lease('jobs:1') IS NULL AS full,
       pg_temp.kinds('jobs:1');
SELECT tb_release(lease) FROM tb_leases;
-- a refused change in a transaction rolls back with it; the lease stays
SELECT tb_drop('jobs:1');
SELECT tb_lease('jobs:1') AS t1 \gset
BEGIN;
SELECT tb_create_limit('jobs:1', 1, :row_memory);
ROLLBACK;
SELECT pg_temp.kinds('jobs:1'), tb_release(:t1) AS released;

-- a TRUNCATE leaves every name with leases made by no limit: nothing
-- moves; a row of the other kind made for one of them afterwards does
SELECT tb_lease('jobs:1') AS t1 \gset
TRUNCATE tb_limits;
INSERT INTO tb_limits VALUES ('jobs:1', 1, :row_memory);
\echo :SQLSTATE
INSERT INTO tb_limits VALUES ('jobs:1', 1, :tmpl_memory);
SELECT tb_lease('jobs:1') IS NULL AS full, tb_release(:t1) AS released;

DROP EXTENSION tokenbucket;
