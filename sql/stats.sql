--
-- stats: the counters of tb_stats and tb_template_stats (the test server
-- preloads the library).  Every call counts for each of its buckets when
-- its transaction ends: grants, refunds and pauses only if it commits,
-- denials, waits and timeouts either way.  Rates are slow (per hour) so
-- that no refill changes a decision.
--
CREATE EXTENSION tokenbucket;
SELECT tb_create('tab', 3, 1, '1 hour'), tb_create('mem', 3, 1, '1 hour', memory => true),
       tb_create('user:*', 2, 1, '1 hour'), tb_create('muser:*', 2, 1, '1 hour', memory => true),
       tb_create('quick', 1, 1);
SELECT clock_timestamp() AS t0 \gset

-- a bucket nobody used has a row of zeros, counting since the start (or
-- the last reset of every counter)
SELECT name, memory, template, granted, granted_tokens, denied, waited, wait_seconds,
       timeouts, refunded_tokens, pauses, since < :'t0' AS since_before, round(tokens::numeric, 2) AS tokens
FROM tb_stats ORDER BY name;

-- grants and denials, from every function that decides; tb_peek only looks
SELECT tb_acquire('tab'), tb_acquire('tab', 2), tb_acquire('tab');
SELECT granted FROM tb_try('mem', 2.5);
SELECT granted FROM tb_try('mem', 1);
SELECT granted FROM tb_peek('mem', 0.5);
SELECT tb_acquire('user:1'), tb_acquire('user:1'), tb_acquire('user:1'), tb_acquire('user:2', 2);
SELECT tb_acquire('muser:1', 2), tb_acquire('muser:1');
SELECT name, memory, template, granted, granted_tokens, denied, since >= :'t0' AS since_after
FROM tb_stats ORDER BY name;

-- all or nothing: a grant counts for every bucket, a denial only for the
-- buckets that held it back
SELECT tb_reset('tab'), tb_reset('mem');
SELECT tb_acquire_all('{tab,mem}', '{1,2}');
SELECT tb_acquire_all('{tab,mem}', '{1,2}');
SELECT name, granted FROM tb_try_all('{mem,tab}', '{0.5,0.5}');
SELECT name, granted, granted_tokens, denied FROM tb_stats WHERE name IN ('tab', 'mem') ORDER BY name;

-- the counts are those of committed transactions: a rollback gives the
-- grants back, but the caller did see its denials
SELECT tb_stats_reset();
SELECT tb_reset('tab'), tb_reset('mem');
BEGIN;
SELECT tb_acquire('tab', 3), tb_acquire('tab'), tb_acquire('mem', 2);
-- nothing shows before the transaction ends
SELECT name, granted, denied FROM tb_stats WHERE name IN ('tab', 'mem') ORDER BY name;
ROLLBACK;
SELECT name, granted, granted_tokens, denied FROM tb_stats WHERE name IN ('tab', 'mem') ORDER BY name;
BEGIN;
SELECT tb_acquire('mem');
SAVEPOINT s;
SELECT tb_acquire('mem'), tb_acquire('mem', 3);
ROLLBACK TO SAVEPOINT s;
SAVEPOINT t;
SELECT tb_acquire('mem');
RELEASE SAVEPOINT t;
COMMIT;
SELECT name, granted, granted_tokens, denied FROM tb_stats WHERE name = 'mem';

-- refunds, settlements both ways, pauses; tb_sync and tb_reset count nothing
SELECT tb_stats_reset();
SELECT round(tb_refund('tab', 1)::numeric, 2) AS refund, round(tb_settle('tab', 2, 0.5)::numeric, 2) AS settle_less,
       round(tb_settle('mem', 1, 2.5)::numeric, 2) AS settle_more;
SELECT tb_pause('mem', interval '1 minute'), tb_pause_until('tab', 'infinity'),
       tb_pause('tab', interval '-1 minute');
SELECT round(tb_sync('tab', 0)::numeric, 2) AS synced, tb_reset('tab');
SELECT name, granted, granted_tokens, refunded_tokens, pauses FROM tb_stats
WHERE name IN ('tab', 'mem') ORDER BY name;

-- waits: one that waits for its token (quick gains one a second), one that
-- times out after waiting, one with no time to wait
SELECT tb_stats_reset('quick');
SELECT tb_acquire('quick'), tb_acquire_wait('quick', 1, '10 s') AS after_waiting;
SELECT tb_acquire_wait('quick', 1, '300 ms') AS timed_out;
SELECT tb_acquire('quick'), tb_acquire_wait('quick', 1, '0') AS no_time;
SELECT granted, denied, waited, wait_seconds > 0.2 AND wait_seconds < 10 AS wait_seconds_plausible,
       timeouts
FROM tb_stats WHERE name = 'quick';

-- a template sums its buckets, those purged included, and says how many
-- there are now
SELECT tb_stats_reset();
SELECT tb_acquire('user:3'), tb_acquire('user:4'), tb_acquire('user:4'), tb_acquire('user:4');
SELECT tb_acquire('muser:7'), tb_acquire('muser:8', 2);
SELECT template, memory, buckets, granted, granted_tokens, denied FROM tb_template_stats ORDER BY template;
SELECT tb_reset(name) FROM tb_status WHERE template = 'user:*';
SELECT tb_purge('0');
SELECT template, buckets, granted, denied FROM tb_template_stats WHERE template = 'user:*';
SELECT count(*) AS user_buckets_left FROM tb_stats WHERE template = 'user:*';

-- reset one bucket, a template (and its buckets), or everything; each row
-- says since when it counts
SELECT clock_timestamp() AS t1 \gset
SELECT tb_reset('tab'), tb_reset('mem');
SELECT tb_acquire('tab'), tb_acquire('mem'), tb_acquire('muser:7');
SELECT tb_stats_reset('tab');
SELECT name, granted, since >= :'t1' AS since_reset FROM tb_stats WHERE name IN ('tab', 'mem') ORDER BY name;
SELECT tb_stats_reset('muser:*');
SELECT name, granted, since >= :'t1' AS since_reset FROM tb_stats WHERE template = 'muser:*' ORDER BY name;
-- after a template's reset, its buckets count in it again
SELECT tb_acquire('muser:8'), tb_acquire('muser:9');
SELECT template, granted, denied, since >= :'t1' AS since_reset FROM tb_template_stats ORDER BY template;
SELECT tb_stats_reset();
SELECT count(*) AS rows, bool_and(since >= :'t1') AS all_since_reset,
       sum(granted + denied) AS counted
FROM tb_stats;
-- a name no bucket has, or too long to count, resets nothing and fails not
SELECT tb_stats_reset('no such bucket'), tb_stats_reset(repeat('x', 200));

-- tracking can be turned off, by a superuser (or in postgresql.conf)
SET tokenbucket.track_stats = off;
SELECT tb_acquire('tab');
RESET tokenbucket.track_stats;
SELECT tb_acquire('tab');
SELECT name, granted FROM tb_stats WHERE name = 'tab';

-- a bucket whose name is longer than an entry holds (128 bytes) is counted
-- under its first bytes and a hash of it all, which tb_stats joins on;
-- two such names that differ only after the 120th byte are two buckets
SELECT tb_create(repeat('l', 129), 5, 1, '1 hour'), tb_create(repeat('l', 200), 5, 1, '1 hour');
SELECT tb_acquire(repeat('l', 129)), tb_acquire(repeat('l', 200)), tb_acquire(repeat('l', 200));
SELECT length(name), granted FROM tb_stats WHERE name LIKE 'lll%' ORDER BY length(name);
SELECT length(tb_stats_key(repeat('l', 128))) AS short_kept, tb_stats_key(repeat('l', 129)) LIKE 'lll%...#%' AS long_keyed;

-- privileges: a monitoring role reads a view once granted SELECT on it,
-- nothing more: the functions behind the views are PUBLIC's and check
-- that their caller may read a view that shows what they show.  An
-- application role may not read them, nor reset the counters, nor turn
-- the tracking off
CREATE ROLE regress_tb_monitor;
CREATE ROLE regress_tb_stats_app;
CREATE ROLE regress_tb_templates_only;
CREATE ROLE regress_tb_status_only;
GRANT USAGE ON SCHEMA public TO regress_tb_monitor, regress_tb_stats_app, regress_tb_templates_only,
	regress_tb_status_only;
GRANT SELECT ON tb_stats, tb_template_stats TO regress_tb_monitor;
-- one that may read only the templates' counters reads no key's name
GRANT SELECT ON tb_template_stats TO regress_tb_templates_only;
SET ROLE regress_tb_templates_only;
SELECT template, granted FROM tb_template_stats ORDER BY template;
SELECT * FROM tb_memory_buckets();
SELECT * FROM tb_stats_counters();
SELECT * FROM tb_memory_counters();
SELECT * FROM tb_limit_counters();
SELECT * FROM tb_memory_leases();
SELECT * FROM tb_stats;
RESET ROLE;
-- SELECT on tb_status and on tb_leases is enough to read them too
GRANT SELECT ON tb_status, tb_leases TO regress_tb_status_only;
SET ROLE regress_tb_status_only;
SELECT name, memory FROM tb_status WHERE name IN ('tab', 'mem') ORDER BY name;
SELECT count(*) FROM tb_leases;
SELECT * FROM tb_template_counters();
RESET ROLE;
SET ROLE regress_tb_monitor;
SELECT name, granted FROM tb_stats WHERE name IN ('tab', 'mem') ORDER BY name;
SELECT template, granted FROM tb_template_stats ORDER BY template;
SELECT tb_stats_reset('tab');
RESET ROLE;
SET ROLE regress_tb_stats_app;
SELECT tb_acquire('tab') IS NOT NULL AS called;
SELECT * FROM tb_stats;
SELECT * FROM tb_template_stats;
SELECT * FROM tb_stats_counters();
SELECT tb_stats_reset();
SELECT tb_stats_reset('tab');
SET tokenbucket.track_stats = off;
RESET ROLE;
-- the owner can hand resetting on
GRANT EXECUTE ON FUNCTION tb_stats_reset(text) TO regress_tb_monitor;
SET ROLE regress_tb_monitor;
SELECT tb_stats_reset('tab');
SELECT name, granted FROM tb_stats WHERE name = 'tab';
RESET ROLE;

-- a session keeps what it counted in last for its next transaction (the
-- same bucket, again, needs no lookup): savepoints released or rolled back
-- over it, other buckets between, rollbacks, and a key that becomes a
-- named bucket of its own all count as ever
SELECT tb_stats_reset();
SELECT tb_create('k1', 100, 1, '1 hour', memory => true), tb_create('k2', 100, 1, '1 hour'),
       tb_create('kt:*', 100, 1, '1 hour', memory => true);
SELECT tb_acquire('k1');
BEGIN; SAVEPOINT s; SELECT tb_acquire('k1'); RELEASE s; SELECT tb_acquire('k1'); COMMIT;
BEGIN; SAVEPOINT s; SELECT tb_acquire('k1'); ROLLBACK TO s; COMMIT;
BEGIN; SELECT tb_acquire('k1'); ROLLBACK;
SELECT tb_acquire('k2');
SELECT tb_acquire('k1', 2);
BEGIN; SAVEPOINT s; SELECT tb_acquire('k2'); ROLLBACK TO s; SELECT tb_acquire('k1'); COMMIT;
SELECT tb_acquire('kt:1');
SELECT tb_acquire('kt:1');
SELECT tb_create('kt:1', 5, 1, '1 hour', memory => true);
SELECT tb_acquire('kt:1');
SELECT tb_acquire('kt:1', 5);
SELECT name, template, granted, granted_tokens, denied FROM tb_stats
WHERE name IN ('k1', 'k2', 'kt:1', 'kt:*') ORDER BY name;
SELECT template, granted, denied FROM tb_template_stats WHERE template = 'kt:*';

-- a key of a memory template counts a grant for itself in the record of
-- what a rollback gives back (one per key and savepoint, counted at
-- commit), and for its template as any other count: savepoints nested,
-- released and rolled back, a rollback, keys between, a cost of 0, a
-- denial, refunds and an all-or-nothing call in the same transaction
SELECT tb_stats_reset();
SELECT tb_create('mu:*', 3, 1, '1 hour', memory => true);
SELECT tb_acquire('mu:1');
BEGIN;
SAVEPOINT a;
SELECT tb_acquire('mu:2');
SAVEPOINT b;
SELECT tb_acquire('mu:1');
ROLLBACK TO b;
RELEASE a;
SELECT tb_acquire('mu:2');
COMMIT;
BEGIN; SELECT tb_acquire('mu:1'), tb_acquire('mu:3'); ROLLBACK;
SELECT tb_acquire('mu:3', 0);
SELECT tb_acquire('mu:2', 2);
SELECT round(tb_refund('mu:2', 1)::numeric, 3) AS tokens;
BEGIN;
SELECT tb_acquire('mu:2');
SELECT round(tb_refund('mu:2', 1)::numeric, 3) AS tokens;
SELECT tb_acquire_all(ARRAY['mu:2', 'mu:4']);
COMMIT;
SELECT name, granted, granted_tokens, denied, refunded_tokens FROM tb_stats
WHERE template = 'mu:*' ORDER BY name;
SELECT template, granted, granted_tokens, denied, refunded_tokens FROM tb_template_stats
WHERE template = 'mu:*';
SELECT name, round(tokens) AS tokens FROM tb_status WHERE name LIKE 'mu:_' ORDER BY name;

DROP EXTENSION tokenbucket;
DROP OWNED BY regress_tb_monitor, regress_tb_stats_app, regress_tb_templates_only,
	regress_tb_status_only;
DROP ROLE regress_tb_monitor, regress_tb_stats_app, regress_tb_templates_only, regress_tb_status_only;
