--
-- templates: per-key buckets.  A name ending in '*' is a template; the
-- first call naming a missing bucket that starts with a template's prefix
-- makes that bucket from it, full.  tb_purge removes the idle ones.
--
CREATE EXTENSION tokenbucket;
SELECT tb_create('user:*', 3, 1, '1 hour');
SELECT tb_create('user:vip:*', 10, 1, '1 hour');
SELECT tb_create('*', 1, 1, '1 hour');

-- the longest matching prefix wins; '*' matches any name
SELECT tb_acquire('user:alice'), tb_acquire('user:vip:bob', 10), tb_acquire('anything');
SELECT name, capacity, round(tokens::numeric, 2) AS tokens, template, is_template
FROM tb_status ORDER BY name;
-- each key has its own bucket
SELECT tb_acquire('user:alice', 2), tb_acquire('user:alice'), tb_acquire('user:carol', 3);

-- every call that changes a bucket makes it: try, refund, settle, sync, pause,
-- reset, alter; a call that changes nothing (a pause already over, an alter
-- with no setting) only checks that the template would make it
SELECT granted FROM tb_try('user:t1');
SELECT tb_refund('user:t2', 1), tb_settle('user:t3', 1, 0), tb_sync('user:t4', 5);
SELECT tb_pause('user:t5', interval '1 minute'), tb_pause('user:t6', interval '-1 minute'),
       tb_reset('user:t7'), tb_alter('user:t8', 7), tb_alter('user:t9');
SELECT name, capacity, template FROM tb_buckets WHERE name LIKE 'user:t%' ORDER BY name;
-- but tb_drop does not; a name ending in * is a template's, never a bucket's
SELECT tb_drop('user:t10'), count(*) FROM tb_buckets WHERE name = 'user:t10';
SELECT tb_drop('*');
SELECT tb_acquire('user:x*');

-- a name that matches no template is still unknown
SELECT tb_drop('user:*'), tb_drop('user:vip:*');
SELECT tb_acquire('user:dave');
SELECT tb_acquire('admin:1');

-- tb_alter of a template applies to every bucket made from it, in one
-- statement, each keeping the tokens it holds, capped at the new capacity
SELECT tb_create('key:*', 5, 1, '1 hour');
SELECT tb_acquire('key:1'), tb_acquire('key:2', 5), tb_acquire('key:3', 5),
       round(tb_settle('key:3', 0, 2)::numeric) AS in_debt;
SELECT tb_alter('key:*', 50);
SELECT tb_acquire('key:4');
SELECT name, capacity, refill_rate * 3600 AS per_hour, round(tokens::numeric, 2) AS tokens
FROM tb_status WHERE name LIKE 'key:%' ORDER BY name;
SELECT tb_alter('key:*', 3, refill => 2, per => '1 hour');
SELECT name, capacity, refill_rate * 3600 AS per_hour, round(tokens::numeric, 2) AS tokens
FROM tb_status WHERE name LIKE 'key:%' ORDER BY name;
-- so tb_purge changes no decision: a purged key comes back with the same
-- settings; and dropping the template drops the buckets made from it
SELECT tb_drop('key:*');
SELECT count(*) AS left_behind FROM tb_buckets WHERE template = 'key:*';
SELECT tb_acquire('key:1');

-- tb_purge: template-made buckets that are full and idle go; the rest stay
SELECT tb_create('p:*', 2, 100);            -- refills in 20 ms
SELECT tb_create('plain', 2, 100);
SELECT tb_acquire('p:used'), tb_acquire('p:idle'), tb_acquire('plain');
SELECT tb_create('p:slow:*', 2, 1, '1 hour');
SELECT tb_acquire('p:slow:empty', 2);       -- stays empty for two hours
SELECT tb_pause('p:paused', interval '1 hour');
SELECT pg_sleep(1);
SELECT tb_acquire('p:used');                -- written just now
SELECT tb_purge('500 ms');  -- a stall of half a second between these two would purge p:used
SELECT name FROM tb_buckets WHERE name LIKE 'p%' ORDER BY name;
-- a purged key comes back full on its next use
SELECT tb_acquire('p:idle', 2);
-- zero idle time purges every full one; a negative one is an error
SELECT pg_sleep(0.05);
SELECT tb_purge('0');
SELECT tb_purge('-1 s');
SELECT name FROM tb_buckets WHERE name LIKE 'p%' ORDER BY name;
-- more than a batch at once
SELECT count(tb_acquire('p:many:' || i)) FROM generate_series(1, 2500) AS i;
SELECT pg_sleep(0.05);
SELECT tb_purge('0');

DROP EXTENSION tokenbucket;
