-- proxy/test/same.sql: every function of tokenbucket_proxy, and its
-- errors, run once on a database with tokenbucket and once on the proxy;
-- proxy/test/proxy.sh compares the two outputs, which must be the same line for
-- line (the proxy's "[shard] REMOTE ERROR: " prefix taken out).  A
-- function returning void returns NULL through PL/Proxy, '' directly, so
-- only what else may be NULL is asked with IS NULL.  Buckets
-- refill once in 1000 hours unless they must refill, and numbers are
-- rounded, so the time a call takes never shows.
\set VERBOSITY verbose
\set SHOW_CONTEXT never

-- making: buckets, a template of table buckets, one of memory buckets
SELECT tb_create('api', 10, 1, '1000 hours');
SELECT tb_create('{u1}:rpm', 3, 1, '1000 hours'), tb_create('{u1}:tpm', 100, 1, '1000 hours');
SELECT tb_create('user:*', 2, 1, '1000 hours');
SELECT tb_create('muser:*', 2, 1, '1000 hours', memory => true);
SELECT tb_create('fast', 1, 1000);
SELECT tb_create('api', 1, 1);
SELECT tb_create('', 1, 1);
SELECT tb_create('bad', -1, 1);
SELECT tb_create(NULL, 1, 1);
SELECT tb_create('bad', 1, NULL);

-- spending
SELECT tb_acquire('api'), tb_acquire('api', 4), tb_acquire('api', 6), tb_acquire('api', 5);
SELECT granted, round(remaining::numeric, 2) AS remaining, retry_after_seconds > 3e6 AS far,
       round(reset_after_seconds / 3600) AS reset_hours
FROM tb_try('api', 1);
SELECT granted, round(remaining::numeric, 2) AS remaining FROM tb_try('api', 0);
SELECT granted, round(remaining::numeric, 2) AS remaining, round(retry_after_seconds / 3600) AS hours
FROM tb_peek('api', 3);
SELECT tb_acquire('user:' || k) FROM generate_series(1, 6) AS k, generate_series(1, 3) AS i ORDER BY k, i;
SELECT tb_acquire('muser:' || k) FROM generate_series(1, 6) AS k, generate_series(1, 3) AS i ORDER BY k, i;
SELECT tb_acquire('nope');
SELECT tb_acquire('user:*');
SELECT tb_acquire('api', 'NaN');
SELECT tb_acquire(NULL);
SELECT tb_acquire('api', NULL);
SELECT * FROM tb_try(NULL);
SELECT granted FROM tb_peek('api', NULL);

-- a reserve: granted while that share of the capacity is left after
SELECT tb_reset('api');
SELECT tb_acquire('api', 7, reserve => 0.2), tb_acquire('api', 1.5, reserve => 0.2),
       tb_acquire('api', 1, reserve => 0.2);
SELECT granted, round(remaining::numeric, 2) AS remaining, retry_after_seconds > 3e6 AS far
FROM tb_try('api', 0.5, reserve => 0.2);
SELECT granted, round(remaining::numeric, 2) AS remaining FROM tb_peek('api', 0.1, reserve => 0.2);
SELECT tb_acquire('api', 9, reserve => 0.2);
SELECT tb_acquire('api', 1, reserve => 1);
SELECT tb_acquire('api', 1, NULL), (SELECT granted FROM tb_try('api', 1, NULL));
SELECT tb_acquire_all(ARRAY['{u1}:rpm', '{u1}:tpm'], ARRAY[2, 80], reserve => 0.2),
       tb_acquire_all(ARRAY['{u1}:rpm', '{u1}:tpm'], ARRAY[1, 80], reserve => 0.2);
SELECT name, granted, round(remaining::numeric, 2) AS remaining
FROM tb_try_all(ARRAY['{u1}:rpm', '{u1}:tpm'], NULL, reserve => 0.5);
SELECT tb_acquire_all(ARRAY['{u1}:rpm'], NULL, reserve => 'NaN');
SELECT round(tb_sync('api', 0)::numeric, 2), tb_reset('{u1}:rpm'), tb_reset('{u1}:tpm');

-- waiting: 'fast' refills a token a millisecond
SELECT tb_acquire('fast'), tb_acquire_wait('fast', 1, '10 s'), tb_acquire_wait('fast');
SELECT tb_acquire_wait('api', 100, '1 ms');
SELECT tb_acquire_wait('api', 1, '-1 s');
SELECT tb_acquire_wait('nope', 1, '1 s');

-- several buckets at once, on one shard key
SELECT tb_acquire_all(ARRAY['{u1}:rpm', '{u1}:tpm'], ARRAY[1, 60]);
SELECT tb_acquire_all(ARRAY['{u1}:rpm', '{u1}:tpm'], ARRAY[1, 60]);
SELECT name, granted, round(remaining::numeric, 2) AS remaining, retry_after_seconds > 0 AS must_wait
FROM tb_try_all(ARRAY['{u1}:rpm', '{u1}:tpm'], ARRAY[1, 30]);
SELECT name, granted, round(remaining::numeric, 2) AS remaining
FROM tb_try_all(ARRAY['{u1}:tpm', '{u1}:rpm'], ARRAY[50, 2]);
SELECT tb_acquire_all_wait(ARRAY['{u1}:rpm', '{u1}:tpm'], ARRAY[1, 1], '1 ms');
SELECT tb_acquire_all_wait(ARRAY['{u1}:tpm'], ARRAY[1], '1 s');
SELECT tb_acquire_all(ARRAY['{u1}:rpm', '{u1}:rpm']);
SELECT tb_acquire_all(ARRAY['{u1}:rpm'], ARRAY[1, 2]);
SELECT tb_acquire_all(ARRAY['{u1}:nope']);
SELECT tb_acquire_all('{}');
SELECT tb_acquire_all(NULL);
SELECT tb_acquire_all_wait(NULL, NULL, '1 s');
SELECT * FROM tb_try_all(NULL);
SELECT * FROM tb_try_all(ARRAY['{u1}:tpm', NULL]);

-- giving back, settling, syncing, pausing, resetting
SELECT round(tb_refund('api', 2)::numeric, 2);
SELECT round(tb_settle('{u1}:tpm', 10, 4)::numeric, 2), round(tb_settle('{u1}:tpm', 0, 50)::numeric, 2);
SELECT round(tb_sync('api', 1)::numeric, 2), round(tb_sync('api', 5)::numeric, 2);
SELECT tb_refund('api', -1);
SELECT tb_settle('nope', 1, 1);
SELECT tb_settle('api', 1, NULL);
SELECT tb_refund(NULL, 1);
SELECT round(tb_settle('{u1}:tpm', 10, 4, now())::numeric, 2), round(tb_refund('api', 1, now())::numeric, 2);
SELECT round(tb_refund('api', 1, NULL)::numeric, 2), round(tb_settle('api', 1, 1, NULL)::numeric, 2);
SELECT tb_settle('api', 1, 1, 'infinity');
SELECT tb_settle('api', NULL, 1, now());
SELECT tb_refund(NULL, 1, now());
SELECT tb_settle('nope', 1, 1, now());
SELECT tb_pause('api', NULL);
SELECT tb_reset(NULL);
SELECT tb_pause('api', '1 hour');
SELECT granted, round(retry_after_seconds / 60) AS minutes FROM tb_try('api', 0);
SELECT tb_pause_until('api', 'infinity');
SELECT granted, round(retry_after_seconds / 86400 / 365) AS years FROM tb_peek('api', 0);
SELECT tb_pause('api', '-1 s');
SELECT tb_reset('api');
SELECT granted, round(remaining::numeric, 2) FROM tb_try('api');
SELECT tb_reset('user:*');
SELECT tb_reset('nope');

-- changing: a bucket on its shard, a template and its buckets everywhere
SELECT tb_alter('api', capacity => 20);
SELECT tb_alter('user:*', capacity => 5, refill => 1, per => '500 hours');
SELECT tb_alter('api', per => '1 s');
SELECT tb_alter('nope', 1);
SELECT tb_alter(NULL);

-- what there is: the proxy asks every shard; a template is on each, and
-- DISTINCT shows it once
SELECT DISTINCT name, capacity, round(refill_rate::numeric * 3600000, 2) AS per_1000h,
       round(tokens::numeric, 2) AS tokens, paused_until, round(debt::numeric, 2) AS debt,
       template, is_template, memory
FROM tb_status WHERE name <> 'fast' ORDER BY name;

-- tokenbucket 1.9: parents kept on their children's partition by one hash
-- tag (a named child, and each key of a template), the level that refused
-- in denied_by, quotas, their alerts and spend
SELECT tb_create('{acme}:team', 5, 1, '1000 hours'), tb_create('{acme}:ann', 4, 1, '1000 hours'),
       tb_create('{acme}:bob', 4, 1, '1000 hours'), tb_create('{acme}:user:*', 2, 1, '1000 hours');
SELECT tb_set_parent('{acme}:ann', '{acme}:team'), tb_set_parent('{acme}:bob', '{acme}:team'),
       tb_set_parent('{acme}:user:*', '{acme}:team');
SELECT granted, round(remaining::numeric, 2) AS remaining, denied_by FROM tb_try('{acme}:ann', 3);
SELECT granted, round(remaining::numeric, 2) AS remaining, denied_by FROM tb_try('{acme}:ann', 2);
SELECT granted, round(remaining::numeric, 2) AS remaining, round(retry_after_seconds / 3600) AS hours,
       denied_by FROM tb_try('{acme}:bob', 3);
SELECT granted, denied_by FROM tb_peek('{acme}:bob', 2);
SELECT granted, denied_by FROM tb_peek('{acme}:bob', 3);
SELECT granted, denied_by FROM tb_try('{acme}:bob', 2, reserve => 0.5);
SELECT granted, denied_by FROM tb_peek('{acme}:bob', 1, reserve => 0.5);
SELECT tb_acquire('{acme}:user:7', 2);
SELECT granted, round(remaining::numeric, 2) AS remaining, denied_by FROM tb_try('{acme}:user:8', 1);
SELECT name, granted FROM tb_try_all(ARRAY['{acme}:ann'], ARRAY[1]) ORDER BY name;
SELECT tb_set_parent('{acme}:bob', NULL);
SELECT granted, denied_by FROM tb_try('{acme}:bob', 3);
SELECT tb_set_parent(NULL, '{acme}:team');
SELECT tb_set_parent('{acme}:team', '{acme}:ann');
SELECT tb_set_parent('{acme}:ann', '{acme}:user:*');
SELECT tb_create_quota('{acme}:month', 100, '1 month', 'Europe/Paris');
SELECT tb_create_quota('{acme}:month', 100, '1 month');
SELECT tb_create_quota('{acme}:day', 10, '1 month 2 days');
SELECT tb_create_quota('{acme}:day', 10, '1 day', 'Mars/Olympus');
SELECT tb_create_quota(NULL, 10, '1 day');
SELECT tb_set_alerts('{acme}:month', ARRAY[0.5, 0.9]);
SELECT tb_set_alerts('{acme}:team', ARRAY[0.5]);
SELECT tb_set_alerts('{acme}:month', ARRAY[1.5]);
SELECT tb_set_alerts('{acme}:nope', ARRAY[0.5]);
SELECT tb_acquire('{acme}:month', 60), granted, denied_by FROM tb_try('{acme}:month', 50);
SELECT name, budget, capacity, remaining, spent, period, time_zone, period_end > period_start AS ends,
       memory, template
FROM tb_quotas ORDER BY name;
SELECT name, granted, denied, spent, remaining, period_end IS NOT NULL AS ends
FROM tb_stats WHERE name LIKE '{acme}%' ORDER BY name;

-- dropping and purging: per-key buckets of 'user:*' refill slowly, so
-- none is purged until the template is made fast and they fill
SELECT tb_purge('0 s');
SELECT tb_alter('user:*', refill => 1e6);
SELECT pg_sleep(0.01);
SELECT tb_purge('0 s');
SELECT tb_purge('-1 s');
SELECT tb_purge(NULL);
SELECT tb_drop(NULL);
SELECT tb_drop('api'), tb_drop('api'), tb_drop('muser:*'), tb_drop('user:*');
SELECT count(*) AS buckets_left FROM tb_status WHERE name IN ('api', 'user:*', 'muser:*')
   OR name LIKE 'user:%' OR name LIKE 'muser:%';
