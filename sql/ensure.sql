--
-- ensure: tb_ensure and tb_ensure_limit, the set-up a deploy script can
-- run on every release.  A whole set-up (table and memory buckets,
-- templates of both, limits of both kinds and a limit template) run twice
-- says 'created', then 'unchanged'; a changed setting says 'changed' and
-- keeps the tokens held (capped at the new capacity), the leases held, and
-- a template's buckets follow it; a change of kind cannot be made in place
-- (0A000); arguments are checked as tb_create's are; only the owner may
-- call them until granted.  Buckets refill once in 1000 hours, so the
-- clock never shows.
--
CREATE EXTENSION tokenbucket;

-- deploy(): the set-up, one call each, in order
CREATE FUNCTION pg_temp.deploy() RETURNS TABLE (object text, did text) LANGUAGE plpgsql AS $$
BEGIN
	object := 'api'; did := tb_ensure('api', 10, 1, '1000 hours'); RETURN NEXT;
	object := 'tpm'; did := tb_ensure('tpm', 90000, 90000, '1 minute'); RETURN NEXT;
	object := 'gateway'; did := tb_ensure('gateway', 50, 1, '1000 hours', memory => true); RETURN NEXT;
	object := 'user:*'; did := tb_ensure('user:*', 5, 1, '1000 hours'); RETURN NEXT;
	object := 'muser:*'; did := tb_ensure('muser:*', 5, 1, '1000 hours', true); RETURN NEXT;
	object := 'inflight'; did := tb_ensure_limit('inflight', 3); RETURN NEXT;
	object := 'minflight'; did := tb_ensure_limit('minflight', 4, memory => true); RETURN NEXT;
	object := 'tenant:*'; did := tb_ensure_limit('tenant:*', 2); RETURN NEXT;
END $$;

-- the first run makes everything, the second nothing
SELECT * FROM pg_temp.deploy();
SELECT name, capacity, round(refill_rate::numeric * 3600000, 3) AS per_1000h, memory,
       max_in_flight, is_template
FROM tb_status ORDER BY name;
SELECT * FROM pg_temp.deploy();
-- the same settings written another way are the same (90000 a minute is
-- 1500 a second)
SELECT tb_ensure('tpm', 90000, 1500), tb_ensure('tpm', 90000, 5400000, '1 hour');

-- a changed setting: changed, the tokens kept, capped at a lower capacity
SELECT tb_acquire('api', 4), tb_acquire('gateway', 20), tb_acquire('user:1', 2),
       tb_acquire('muser:1', 2);
SELECT tb_ensure('api', 20, 1, '1000 hours'), tb_ensure('gateway', 100, 1, '1000 hours', true);
SELECT name, capacity, round(tokens::numeric, 3) AS tokens FROM tb_status
WHERE name IN ('api', 'gateway') ORDER BY name;
SELECT tb_ensure('api', 3, 1, '1000 hours');
SELECT tb_ensure('api', 3, 2, '1000 hours');
SELECT name, capacity, round(refill_rate::numeric * 3600000, 3) AS per_1000h,
       round(tokens::numeric, 3) AS tokens
FROM tb_status WHERE name = 'api';
-- a template changed: its buckets follow, keeping their tokens
SELECT tb_ensure('user:*', 8, 1, '1000 hours'), tb_ensure('muser:*', 8, 1, '1000 hours', true);
SELECT name, capacity, round(tokens::numeric, 3) AS tokens, template FROM tb_status
WHERE template IS NOT NULL ORDER BY name;
-- a limit changed: the leases held are kept
SELECT tb_lease('inflight') IS NOT NULL AS leased, tb_lease('minflight') IS NOT NULL AS leased;
SELECT tb_ensure_limit('inflight', 5), tb_ensure_limit('minflight', 4, true),
       tb_ensure_limit('tenant:*', 1);
SELECT name, max_in_flight, in_flight FROM tb_status WHERE max_in_flight IS NOT NULL
ORDER BY name;
-- and a run of the set-up puts every setting back
SELECT * FROM pg_temp.deploy();
SELECT * FROM pg_temp.deploy();

-- in a transaction that rolls back, nothing was made
BEGIN;
SELECT tb_ensure('later', 1, 1), tb_ensure_limit('later', 1);
ROLLBACK;
SELECT tb_ensure('later', 1, 1), tb_ensure_limit('later', 1);
SELECT tb_ensure('later', 1, 1), tb_ensure_limit('later', 1);

-- a bucket or a limit cannot move between the table and memory in place
\set VERBOSITY default
SELECT tb_ensure('api', 10, 1, '1000 hours', memory => true);
SELECT tb_ensure('gateway', 50, 1, '1000 hours');
SELECT tb_ensure('muser:*', 5, 1, '1000 hours');
SELECT tb_ensure_limit('minflight', 4);
SELECT tb_ensure_limit('inflight', 3, memory => true);
-- the arguments are checked as tb_create's and tb_create_limit's are
SELECT tb_ensure('', 1, 1);
SELECT tb_ensure('bad', 0, 1);
SELECT tb_ensure('bad', 1, 'NaN');
SELECT tb_ensure('bad', 1, 1, '0 s');
SELECT tb_ensure_limit('bad', 0);
SELECT tb_ensure_limit('', 1);
SELECT tb_ensure(NULL, 1, 1);
SELECT tb_ensure('bad', 1, 1, NULL);
SELECT tb_ensure_limit('bad', NULL);
\set VERBOSITY terse
SELECT count(*) AS made FROM tb_status WHERE name = 'bad';

-- like tb_create: not PUBLIC's; the owner grants them
CREATE ROLE regress_tb_ensure_app;
SET ROLE regress_tb_ensure_app;
SELECT tb_ensure('api', 10, 1, '1000 hours');
SELECT tb_ensure_limit('inflight', 3);
RESET ROLE;
GRANT EXECUTE ON FUNCTION tb_ensure(text, float8, float8, interval, boolean),
      tb_ensure_limit(text, integer, boolean) TO regress_tb_ensure_app;
SET ROLE regress_tb_ensure_app;
SELECT tb_ensure('api', 10, 1, '1000 hours'), tb_ensure_limit('inflight', 3);
RESET ROLE;

DROP EXTENSION tokenbucket;
DROP ROLE regress_tb_ensure_app;
