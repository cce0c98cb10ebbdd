--
-- memory: buckets whose tokens live in shared memory (the test server
-- preloads the library).  Every function works on them with the results
-- of table buckets; rollback gives their grants back; changes to their
-- rows reach them at commit.  Rates are slow (per hour) so that no refill
-- shows in two decimals.
--
CREATE EXTENSION tokenbucket;
SELECT tb_create('mem', 3, 1, '1 hour', memory => true);
SELECT tb_create('tab', 3, 1, '1 hour');
SELECT tb_create('user:*', 2, 1, '1 hour', memory => true);

-- the same answers as a table bucket
SELECT tb_acquire('mem'), tb_acquire('mem', 2), tb_acquire('mem');
SELECT granted, round(remaining::numeric, 2) AS remaining,
       retry_after > '59 minutes' AS about_an_hour, ceil(retry_after_seconds / 60) AS minutes
FROM tb_try('mem');
SELECT tb_acquire('user:1'), tb_acquire('user:1'), tb_acquire('user:1'), tb_acquire('user:2', 2);
SELECT name, capacity, round(tokens::numeric, 2) AS tokens, template, is_template, memory
FROM tb_status ORDER BY name;
-- a bucket made from a memory template has no row: it lives in memory only
SELECT name, memory FROM tb_buckets ORDER BY name;

-- tb_peek looks and takes nothing
SELECT tb_reset('mem');
SELECT granted, round(remaining::numeric, 2) AS remaining FROM tb_peek('mem', 2);
SELECT granted, round(remaining::numeric, 2) AS remaining FROM tb_peek('user:new');
SELECT count(*) AS made_by_peek FROM tb_memory_buckets() WHERE name = 'user:new';

-- rollback gives grants back, savepoints included
BEGIN;
SELECT tb_acquire('mem', 2), tb_acquire('user:3', 2);
SELECT name, round(tokens::numeric, 2) AS tokens FROM tb_status WHERE name IN ('mem', 'user:3') ORDER BY name;
ROLLBACK;
SELECT name, round(tokens::numeric, 2) AS tokens FROM tb_status WHERE name IN ('mem', 'user:3') ORDER BY name;
BEGIN;
SELECT tb_acquire('mem');
SAVEPOINT s;
SELECT tb_acquire('mem');
ROLLBACK TO SAVEPOINT s;
SELECT tb_acquire('mem');
RELEASE SAVEPOINT s;
COMMIT;
SELECT round(tokens::numeric, 2) AS tokens FROM tb_status WHERE name = 'mem';
-- refunds, settlements and pauses are undone too
SELECT tb_reset('mem');
BEGIN;
SELECT round(tb_settle('mem', 0, 5)::numeric, 2) AS in_debt, tb_pause('mem', interval '1 hour');
ROLLBACK;
SELECT round(tokens::numeric, 2) AS tokens, paused_until FROM tb_status WHERE name = 'mem';

-- all or nothing across both kinds
SELECT tb_reset('mem'), tb_reset('tab');
SELECT tb_acquire_all('{mem,tab,user:4}', '{1,1,2}');
SELECT name, round(tokens::numeric, 2) AS tokens FROM tb_status
WHERE name IN ('mem', 'tab', 'user:4') ORDER BY name;
-- user:4 is empty now: nothing is taken from the others
SELECT tb_acquire_all('{mem,tab,user:4}', '{1,1,2}');
SELECT tb_acquire_all('{mem,tab,user:4}', '{1,1,3}');
SELECT name, granted, round(remaining::numeric, 2) AS remaining
FROM tb_try_all('{tab,mem}', '{1,2}');
SELECT name, round(tokens::numeric, 2) AS tokens FROM tb_status
WHERE name IN ('mem', 'tab', 'user:4') ORDER BY name;

-- refunds, settlements, syncs, pauses, reset
SELECT round(tb_refund('mem', 1)::numeric, 2) AS refunded,
       round(tb_settle('mem', 1, 4)::numeric, 2) AS settled,
       round(tb_sync('user:4', 0.5)::numeric, 2) AS synced;
SELECT tb_pause('mem', interval '1 hour'), tb_pause_until('user:4', 'infinity');
SELECT name, round(debt::numeric, 2) AS debt, paused_until IS NOT NULL AS paused
FROM tb_status WHERE name IN ('mem', 'user:4') ORDER BY name;
SELECT tb_reset('mem'), tb_reset('user:4');
SELECT tb_acquire('mem'), tb_acquire('user:4');

-- new settings reach the bucket at commit, not before, never on rollback
SELECT tb_reset('mem');
BEGIN;
SELECT tb_alter('mem', capacity => 10);
SELECT capacity FROM tb_memory_buckets() WHERE name = 'mem';
ROLLBACK;
SELECT capacity FROM tb_memory_buckets() WHERE name = 'mem';
BEGIN;
UPDATE tb_buckets SET capacity = 2 WHERE name = 'mem';
SELECT capacity FROM tb_memory_buckets() WHERE name = 'mem';
COMMIT;
SELECT capacity, round(tokens::numeric, 2) AS tokens FROM tb_status WHERE name = 'mem';
-- a template passes its settings on to every bucket made from it
SELECT tb_alter('user:*', capacity => 5);
SELECT name, capacity FROM tb_status WHERE name LIKE 'user:%' ORDER BY name;
-- a bucket made from a memory template can be given its own
SELECT tb_alter('user:1', capacity => 7);
SELECT capacity FROM tb_status WHERE name = 'user:1';
-- a bucket made in a transaction starts full, less what it gave in it
BEGIN;
SELECT tb_create('fresh', 4, 1, '1 hour', memory => true);
SELECT tb_acquire('fresh', 3);
COMMIT;
SELECT round(tokens::numeric, 2) AS tokens FROM tb_status WHERE name = 'fresh';

-- dropping: a named bucket, a template-made one, a template and its buckets
SELECT tb_drop('fresh'), tb_drop('user:2'), tb_drop('user:2') AS again;
SELECT name FROM tb_status WHERE name LIKE 'user:%' ORDER BY name;
SELECT tb_drop('user:*');
SELECT count(*) AS left_from_template FROM tb_memory_buckets() WHERE template IS NOT NULL;
SELECT tb_acquire('user:1');

-- tb_purge removes template-made memory buckets that are full and idle
SELECT tb_create('k:*', 2, 1, '1 hour', memory => true);
SELECT tb_acquire('k:1'), tb_acquire('k:2'), round(tb_refund('k:2', 1)::numeric, 2) AS refunded;
SELECT tb_purge('0 seconds');
SELECT name FROM tb_memory_buckets() WHERE name LIKE 'k:%' ORDER BY name;

-- a bucket's kind is chosen when it is made
UPDATE tb_buckets SET memory = false WHERE name = 'mem';
UPDATE tb_buckets SET memory = true WHERE name = 'tab';
SELECT tb_create('mem', 1, 1, memory => true);
SELECT tb_create(repeat('x', 129), 1, 1, memory => true);
SELECT tb_create(repeat('x', 128) || '*', 1, 1, memory => true);
SELECT tb_create('long:*', 1, 1, memory => true);
SELECT tb_acquire('long:' || repeat('x', 124));
SELECT tb_acquire('mem:*');

-- a transaction that used memory buckets cannot be prepared
BEGIN;
SELECT tb_acquire('mem');
PREPARE TRANSACTION 'regress_tb_memory';
SELECT round(tokens::numeric, 2) AS tokens FROM tb_status WHERE name = 'mem';

-- TRUNCATE forgets every memory bucket with their rows
TRUNCATE tb_buckets;
SELECT count(*) AS left_in_memory FROM tb_memory_buckets();

-- a new key's template when there are more templates than a backend
-- copies (256): the longest prefix still wins ('manyz:*' over 'many*')
SELECT tb_create('many*', 2, 1, memory => true);
SELECT count(tb_create('many' || i || ':*', 1, 1, memory => true)) FROM generate_series(1, 300) AS i;
SELECT tb_create('manyz:*', 3, 1, memory => true);
SELECT tb_acquire('manyz:a'), tb_acquire('many7:b'), tb_acquire('manyq');
SELECT name, capacity, template FROM tb_status WHERE name IN ('manyz:a', 'many7:b', 'manyq') ORDER BY name;
-- and with fewer, as each backend copies them
SELECT count(tb_drop('many' || i || ':*')) FROM generate_series(1, 300) AS i;
SELECT tb_acquire('manyz:c'), tb_acquire('many7:d');
SELECT name, capacity, template FROM tb_status WHERE name IN ('manyz:c', 'many7:d') ORDER BY name;
SELECT tb_drop('many*'), tb_drop('manyz:*');

-- the size is set at server start
SET tokenbucket.max_memory_buckets = 5;
SELECT current_setting('tokenbucket.max_memory_buckets')::int > 100 AS sized;

-- what tb_status shows of memory buckets, only to those who may read it
CREATE ROLE regress_tb_memory_app;
SET ROLE regress_tb_memory_app;
SELECT * FROM tb_memory_buckets();
RESET ROLE;
DROP ROLE regress_tb_memory_app;

DROP EXTENSION tokenbucket;
