--
-- all: several limits at once (requests per minute and tokens per minute),
-- taken all-or-nothing.
--
CREATE EXTENSION tokenbucket;
SELECT tb_create('rpm', 3, 1, '1 hour');
SELECT tb_create('tpm', 1000, 1, '1 hour');
CREATE FUNCTION pg_temp.levels() RETURNS TABLE (name text, tokens numeric) LANGUAGE sql
	AS $$ SELECT name, round(tokens::numeric, 2) FROM tb_status ORDER BY name $$;

-- both granted: one request, 400 tokens
SELECT tb_acquire_all('{rpm,tpm}', '{1,400}');
SELECT * FROM pg_temp.levels();
-- tpm holds 600: a request for 700 takes nothing from either
SELECT tb_acquire_all('{rpm,tpm}', '{1,700}');
SELECT * FROM pg_temp.levels();
-- the order named does not matter; NULL costs are 1 each
SELECT tb_acquire_all('{tpm,rpm}', '{600,1}');
SELECT tb_acquire_all('{rpm}');
SELECT * FROM pg_temp.levels();

-- tb_try_all: a row per bucket, in the order named, the shared decision,
-- and which bucket holds the request back (the one with a wait)
SELECT tb_reset('rpm'), tb_reset('tpm');
SELECT name, granted, round(remaining::numeric, 2) AS remaining,
       retry_after, reset_after > '0' AS refilling
FROM tb_try_all('{tpm,rpm}', '{250,1}');
SELECT name, granted, round(remaining::numeric, 2) AS remaining,
       retry_after > '0' AS holds_it_back
FROM tb_try_all('{tpm,rpm}', '{900,1}');
SELECT tb_acquire('rpm', 2);
SELECT name, granted, retry_after > '0' AS holds_it_back
FROM tb_try_all('{tpm,rpm}', '{1,1}');

-- a denial takes no xid when the first bucket (by name) is the one short
SELECT tb_reset('rpm'), tb_reset('tpm');
SELECT tb_acquire('rpm', 3);
BEGIN;
SELECT tb_acquire_all('{tpm,rpm}', '{1,1}');
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid;
COMMIT;
SELECT * FROM pg_temp.levels();

-- per-key templates work here too
SELECT tb_create('user:*', 2, 1, '1 hour');
SELECT tb_acquire_all('{user:7,tpm}', '{2,10}'), tb_acquire_all('{user:7,tpm}', '{1,10}');
SELECT name, round(tokens::numeric, 2) AS tokens, template FROM tb_status WHERE name LIKE 'user:%' ORDER BY 1;

-- inside a transaction that rolls back, every bucket gets its tokens back
SELECT tb_reset('rpm'), tb_reset('tpm');
BEGIN;
SELECT tb_acquire_all('{rpm,tpm}', '{2,500}');
ROLLBACK;
SELECT * FROM pg_temp.levels() WHERE name IN ('rpm', 'tpm');

-- NULL names are an error (NULL costs are 1 each)
SELECT tb_acquire_all(NULL);
SELECT * FROM tb_try_all(NULL);

DROP EXTENSION tokenbucket;
