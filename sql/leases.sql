--
-- leases: in-flight limits in one session: leasing, refusing, releasing,
-- holds, ttl, templates, lowering a limit, dropping, privileges and every
-- error.  (test/leases.sh: other sessions dying, waits; isolation specs
-- lease_*: two sessions.)  sql/leases_memory.sql runs it all again on
-- memory limits (:memory true).
--
\if :{?memory}
\else
\set memory false
\endif
CREATE EXTENSION tokenbucket;
SELECT tb_create_limit('llm', 3, :memory);
SELECT tb_create_limit('user:*', 2, :memory);

-- held(name): the slots of "name" held now, as tb_status reports them
CREATE FUNCTION pg_temp.held(n text) RETURNS integer LANGUAGE sql
	AS $$SELECT in_flight FROM tb_status WHERE name = n$$;

-- three slots: a lease of one, one of two, then nothing is left
SELECT tb_lease('llm') AS a \gset
SELECT tb_lease('llm', 2) AS b \gset
SELECT tb_lease('llm') IS NULL AS refused, pg_temp.held('llm') AS held;
-- ids are under 2^52 either way (every client's numbers hold them
-- exactly), above zero for a table limit, below for a memory limit
SELECT abs(:a) < 2::numeric ^ 52 AND abs(:b) < 2::numeric ^ 52
       AND (:a < 0) = :memory AND (:b < 0) = :memory AS ids_fit;
SELECT name, slots, hold, holder, pid = pg_backend_pid() AS mine, since <= now() AS since,
       expires, lease = :a AS is_a
FROM tb_leases ORDER BY slots;
-- released: true once, then false; the slot is free again
SELECT tb_release(:a) AS released, tb_release(:a) AS again, pg_temp.held('llm') AS held;
SELECT tb_lease('llm', 2) IS NULL AS two_refused, tb_lease('llm') AS c \gset
SELECT :'two_refused', :c IS NOT NULL AS one_granted;
SELECT tb_release(:b), tb_release(:c), pg_temp.held('llm') AS held;
-- a lease id nobody holds
SELECT tb_release(0) AS unknown;

-- hold => 'transaction': freed by the commit, or by the rollback
BEGIN;
SELECT tb_lease('llm', 3, 'transaction') IS NOT NULL AS granted, pg_temp.held('llm') AS held;
SELECT hold FROM tb_leases;
COMMIT;
SELECT pg_temp.held('llm') AS after_commit, count(*) AS leases FROM tb_leases;
BEGIN;
SELECT tb_lease('llm', 3, 'transaction') IS NOT NULL AS granted;
ROLLBACK;
SELECT pg_temp.held('llm') AS after_rollback;

-- a session lease taken in a transaction that rolls back was never held
BEGIN;
SELECT tb_lease('llm', 3) IS NOT NULL AS granted;
ROLLBACK;
SELECT pg_temp.held('llm') AS after_rollback, tb_lease('llm', 3) AS d \gset
SELECT :d IS NOT NULL AS granted_again, tb_release(:d);
-- nor one taken in a savepoint rolled back; one in a savepoint released is
BEGIN;
SAVEPOINT s;
SELECT tb_lease('llm', 2) IS NOT NULL AS granted;
ROLLBACK TO SAVEPOINT s;
SELECT pg_temp.held('llm') AS after_rollback_to;
SAVEPOINT t;
SELECT tb_lease('llm', 2) AS e \gset
RELEASE SAVEPOINT t;
COMMIT;
SELECT pg_temp.held('llm') AS kept, tb_release(:e) AS released;

-- ttl: a lease past its ttl holds nothing, and tb_release says so
SELECT tb_lease('llm', 3, ttl => '1 millisecond') AS f \gset
SELECT pg_sleep(0.01);
SELECT pg_temp.held('llm') AS expired, tb_release(:f) AS released;
SELECT tb_lease('llm', 1, ttl => '1 hour') AS g \gset
SELECT expires - since = '1 hour' AS expires_after_ttl FROM tb_leases;
SELECT tb_release(:g);

-- a template: each name after its prefix has its own two slots
SELECT tb_lease('user:1') IS NOT NULL AS u1, tb_lease('user:1') IS NOT NULL AS u1_again,
       tb_lease('user:1') IS NULL AS u1_refused, tb_lease('user:2') IS NOT NULL AS u2;
SELECT name, template, is_template, memory, max_in_flight, in_flight, capacity, tokens
FROM tb_status ORDER BY name;
-- a longer template wins for the names it covers
SELECT tb_create_limit('user:vip:*', 3, :memory);
SELECT tb_lease('user:vip:1', 3) IS NOT NULL AS vip;
SELECT name, template, max_in_flight, in_flight FROM tb_status WHERE name LIKE 'user:vip%' ORDER BY name;
-- a new maximum for a template is every name's
SELECT tb_alter_limit('user:*', 3);
SELECT tb_lease('user:1') IS NOT NULL AS third_slot, pg_temp.held('user:1') AS held;

-- tb_purge: the slots of names a template made that hold no lease, and
-- were not leased for idle, go; the next lease makes them again
SELECT tb_create_limit('p:*', 2, :memory);
SELECT tb_lease('p:held') AS ph \gset
SELECT tb_release(tb_lease('p:idle')) AS released;
SELECT tb_purge('1 hour') AS leased_recently_kept;
SELECT tb_purge('0') AS purged;
SELECT name, in_flight FROM tb_status WHERE name LIKE 'p:%' ORDER BY name;
SELECT tb_lease('p:idle', 2) IS NOT NULL AS made_again, pg_temp.held('p:idle') AS held;
SELECT tb_drop('p:*');

-- a lowered limit keeps its leases, and grants again only under the new maximum
SELECT tb_lease('llm') AS h1 \gset
SELECT tb_lease('llm') AS h2 \gset
SELECT tb_lease('llm') AS h3 \gset
SELECT tb_alter_limit('llm', 2);
SELECT tb_release(:h1), tb_lease('llm') IS NULL AS refused_while_above;
SELECT tb_release(:h3), tb_lease('llm') AS h4 \gset
SELECT :h4 IS NOT NULL AS granted_under_max, pg_temp.held('llm') AS held;
SELECT tb_lease('llm') IS NULL AS refused_at_max;
-- raised, the new slots are there at once
SELECT tb_alter_limit('llm', 4);
SELECT tb_lease('llm', 2) IS NOT NULL AS granted, pg_temp.held('llm') AS held;

-- tb_drop: the limit and its leases go; a template takes the names it made
SELECT tb_drop('llm') AS dropped, tb_release(:h2) AS released, tb_drop('llm') AS again;
SELECT tb_drop('user:*') AS dropped;
SELECT name, in_flight FROM tb_status ORDER BY name;
SELECT count(*) AS slots_left FROM tb_lease_slots WHERE name LIKE 'user:%' AND name NOT LIKE 'user:vip:%';
SELECT tb_drop('user:vip:*');
SELECT count(*) AS no_slots FROM tb_lease_slots;
-- a bucket and a limit of one name: tb_drop takes both
SELECT tb_create('both', 1, 1), tb_create_limit('both', 1, :memory);
SELECT tb_drop('both');
SELECT count(*) AS left FROM tb_status WHERE name = 'both';

-- tb_lease_all: one in flight, a request and its tokens, all or nothing
SELECT tb_create_limit('ai:inflight', 2, :memory), tb_create('ai:rpm', 3, 3, '1 day'),
       tb_create('ai:tpm', 5000, 5000, '1 day', memory => true);
SELECT tb_lease_all('ai:inflight', '{ai:rpm,ai:tpm}', '{1,2000}') IS NOT NULL AS first,
       tb_lease_all('ai:inflight', '{ai:rpm,ai:tpm}', '{1,2000}') IS NOT NULL AS second;
-- no slot left: nothing taken from the buckets
SELECT tb_lease_all('ai:inflight', '{ai:rpm,ai:tpm}', '{1,2000}') IS NULL AS refused;
SELECT name, round(tokens) AS tokens, in_flight FROM tb_status WHERE name LIKE 'ai:%' ORDER BY name;
SELECT count(tb_release(lease)) AS released FROM tb_leases WHERE name = 'ai:inflight';
-- too few tokens in one bucket: no slot taken, no token from the other
SELECT tb_lease_all('ai:inflight', '{ai:rpm,ai:tpm}', '{1,2000}') IS NULL AS refused;
SELECT name, round(tokens) AS tokens, in_flight FROM tb_status WHERE name LIKE 'ai:%' ORDER BY name;
-- costs default to 1; slots, hold and ttl as for tb_lease
BEGIN;
SELECT tb_lease_all('ai:inflight', '{ai:rpm}', slots => 2, hold => 'transaction', ttl => '1 hour')
       IS NOT NULL AS granted;
SELECT slots, hold, expires IS NOT NULL AS ttl FROM tb_leases WHERE name = 'ai:inflight';
SELECT name, round(tokens) AS tokens, in_flight FROM tb_status WHERE name LIKE 'ai:%' ORDER BY name;
COMMIT;
SELECT pg_temp.held('ai:inflight') AS after_commit;
SELECT tb_lease_all('nope', '{ai:rpm}');
SELECT tb_lease_all('ai:inflight', '{nope}');
SELECT tb_lease_all('ai:inflight', '{}');
SELECT tb_lease_all('ai:inflight', '{ai:rpm,ai:rpm}');
SELECT tb_lease_all('ai:inflight', '{ai:rpm}', '{1,2}');
SELECT tb_lease_all('ai:inflight', '{ai:rpm}', slots => 3);
SELECT tb_lease_all(NULL, '{ai:rpm}');
SELECT tb_lease_all('ai:inflight', NULL);
SELECT tb_drop('ai:inflight'), tb_drop('ai:rpm'), tb_drop('ai:tpm');

-- counters: a row per limit in tb_stats (leases, their slots, refusals,
-- and the slots freed by a release, by their holder's end, by their ttl)
SELECT tb_create_limit('cnt', 2, :memory);
SELECT tb_lease('cnt') AS c1 \gset
SELECT tb_lease('cnt', 1, ttl => '1 millisecond') IS NOT NULL AS ttl, tb_lease('cnt') IS NULL AS refused;
SELECT tb_release(:c1);
SELECT pg_sleep(0.01);
-- takes over the slot whose ttl passed, and ends with its transaction
BEGIN;
SELECT tb_lease('cnt', 2, 'transaction') IS NOT NULL AS granted;
COMMIT;
SELECT tb_lease('cnt', 2) AS c2 \gset
SELECT tb_release(:c2);
SELECT name, memory, granted AS leases, granted_tokens AS slots, denied AS refused,
       released, ended, expired, in_flight, max_in_flight, capacity, tokens
FROM tb_stats WHERE name = 'cnt';
SELECT tb_stats_reset('cnt');
SELECT granted AS leases, released FROM tb_stats WHERE name = 'cnt';
SELECT tb_drop('cnt');

-- errors
SELECT tb_create_limit('api', 2, :memory);
SELECT tb_create_limit('api', 5, :memory);
SELECT tb_create_limit('api2', 0, :memory);
SELECT tb_create_limit('', 1, :memory);
SELECT tb_create_limit(repeat('x', 1025), 1, :memory);
SELECT tb_alter_limit('nope', 1);
SELECT tb_alter_limit('api', -1);
SELECT tb_lease('nope');
SELECT tb_lease('user:*');
SELECT tb_lease('api', 3);
SELECT tb_lease('api', 0);
SELECT tb_lease('api', 1, 'statement');
SELECT tb_lease('api', 1, 'session', '0');
SELECT tb_lease('api', 1, 'session', '-1 second');
SELECT tb_lease_wait('api', 1, 'session', NULL, '-1 second');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT tb_lease_wait('api');
ROLLBACK;
-- a NULL where a value is needed is an error naming the argument
SELECT tb_lease(NULL);
SELECT tb_lease('api', NULL);
SELECT tb_lease('api', 1, NULL);
SELECT tb_release(NULL);
SELECT tb_lease_wait(NULL);
SELECT pg_temp.held('api') AS nothing_taken;
-- a wait with a timeout of zero on a full limit is a refusal
SELECT tb_lease('api', 2) AS full \gset
SELECT tb_lease_wait('api', 1, timeout => '0') IS NULL AS refused;
SELECT tb_release(:full);
-- and a wait that need not wait is a lease
SELECT tb_lease_wait('api', 2, timeout => '1 hour') AS waited \gset
SELECT pg_temp.held('api') AS held, tb_release(:waited);

-- a holder is a backend (a pid and when it started: a later backend with
-- the pid is another), or a transaction in progress
SELECT tb_holder_alive(pg_backend_pid(), pg_catalog.pg_postmaster_start_time(), NULL) AS wrong_start,
       tb_holder_alive(pg_backend_pid(), (SELECT backend_start FROM pg_stat_activity
                                          WHERE pid = pg_backend_pid()), NULL) AS me,
       tb_holder_alive(NULL, NULL, pg_current_xact_id()) AS my_transaction,
       tb_holder_alive(NULL, NULL, '3') AS long_over,
       tb_holder_alive(2147483647, now(), NULL) AS no_such_pid;

-- a session's leases outlive what poolers run between clients
SELECT tb_lease('api') AS pooled \gset
SELECT pg_advisory_unlock_all();
DISCARD ALL;
SELECT in_flight AS held_after_discard_all FROM tb_status WHERE name = 'api';
SELECT tb_release(:pooled);
CREATE FUNCTION pg_temp.held(n text) RETURNS integer LANGUAGE sql
	AS $$SELECT in_flight FROM tb_status WHERE name = n$$;

-- privileges: a worker leases and releases its own leases only; the DBA
-- (the extension's owner) releases any
CREATE ROLE regress_tb_lease_worker;
CREATE ROLE regress_tb_lease_other;
GRANT USAGE ON SCHEMA public TO regress_tb_lease_worker, regress_tb_lease_other;
SET ROLE regress_tb_lease_worker;
SELECT tb_lease('api') AS w \gset
SELECT tb_lease('api') AS gone \gset
SELECT tb_release(:gone) AS released;
SELECT tb_create_limit('mine', 100, :memory);
SELECT tb_alter_limit('api', 100);
SELECT * FROM tb_leases;
SELECT * FROM tb_limits;
-- whether a holder exists tells nothing of any limit: PUBLIC, for the views
SELECT tb_holder_alive(NULL, NULL, NULL) AS nobody;
-- a lease that is not the caller's to release answers as an id that holds
-- nothing: false, no error, nothing that tells which ids are held (nor
-- its limit's name); the lease stays held
SET ROLE regress_tb_lease_other;
SELECT tb_release(:w) AS not_mine, tb_release(:gone) AS released_before;
RESET ROLE;
SELECT pg_temp.held('api') AS still_held;
SET ROLE regress_tb_lease_worker;
SELECT tb_release(:w) AS own;
SELECT tb_lease('api') AS w2 \gset
RESET ROLE;
SELECT holder FROM tb_leases;
SELECT tb_release(:w2) AS by_the_dba;
DROP OWNED BY regress_tb_lease_worker, regress_tb_lease_other;
DROP ROLE regress_tb_lease_worker, regress_tb_lease_other;

-- tb_limits_changed() is tb_limits' trigger and nothing else's
CREATE TEMP TABLE not_limits (name text);
CREATE TRIGGER x AFTER INSERT ON not_limits FOR EACH STATEMENT EXECUTE FUNCTION tb_limits_changed();
INSERT INTO not_limits VALUES ('x');
DROP TABLE not_limits;

-- a limit made with plain SQL works at once
INSERT INTO tb_limits VALUES ('plain', 1, :memory);
SELECT tb_lease('plain') IS NOT NULL AS granted, tb_lease('plain') IS NULL AS refused;
-- and the table checks what it is given
INSERT INTO tb_limits VALUES ('zero', 0, :memory);
INSERT INTO tb_limits VALUES ('', 1, :memory);

-- a limit's kind is chosen when it is made: an UPDATE of memory is
-- refused (0A000), with leases held (the other kind would start empty
-- beside them) or none, and whichever way; the leases stay held
SELECT tb_create_limit('kind', 2, :memory);
SELECT tb_lease('kind', 2) AS kind_held \gset
UPDATE tb_limits SET memory = NOT memory WHERE name = 'kind';
\echo :SQLSTATE
SELECT memory = :memory AS same_kind FROM tb_limits WHERE name = 'kind';
SELECT tb_lease('kind') IS NULL AS still_full, pg_temp.held('kind') AS held;
SELECT tb_release(:kind_held);
UPDATE tb_limits SET memory = NOT memory WHERE name = 'kind';
UPDATE tb_limits SET max_in_flight = 3, memory = NOT memory;
SELECT memory = :memory AS same_kind FROM tb_limits WHERE name = 'kind';
-- the rest of a limit's row changes as before
UPDATE tb_limits SET max_in_flight = 1 WHERE name = 'kind';
SELECT tb_lease('kind') IS NOT NULL AS granted, tb_lease('kind') IS NULL AS refused;

DROP EXTENSION tokenbucket;
