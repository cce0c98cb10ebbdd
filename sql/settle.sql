--
-- settle: what a worker does after its call.  Refund unused tokens, settle
-- the estimate against the reported usage (into debt if need be), pause
-- every worker on a 429, lower the level to the provider's own count.
-- Buckets refill a token an hour, so the clock changes nothing printed.
--
CREATE EXTENSION tokenbucket;
SELECT tb_create('tpm', 1000, 1, '1 hour');
CREATE FUNCTION pg_temp.level(bucket text) RETURNS numeric LANGUAGE sql
	AS $$ SELECT round(tokens::numeric, 2) FROM tb_status WHERE name = bucket $$;

-- tb_refund gives back, capped at capacity, and returns the level
SELECT tb_acquire('tpm', 600);
SELECT round(tb_refund('tpm', 100)::numeric, 2) AS level;
SELECT round(tb_refund('tpm', 5000)::numeric, 2) AS capped_at_capacity;
SELECT round(tb_refund('tpm', 0)::numeric, 2) AS nothing_to_give;

-- tb_settle: reserve the estimate, settle with the usage reported
SELECT tb_acquire('tpm', 800);                                  -- max_tokens
SELECT round(tb_settle('tpm', 800, 350)::numeric, 2) AS level;  -- used 350: 450 back
-- used more than reserved: the difference is taken, into debt
SELECT tb_acquire('tpm', 500);
SELECT round(tb_settle('tpm', 500, 1600)::numeric, 2) AS in_debt;
SELECT round(tokens::numeric, 2) AS tokens, round(debt::numeric, 2) AS debt
FROM tb_status WHERE name = 'tpm';
-- in debt, nothing is granted, not even a cost of zero, until refill pays it back
SELECT tb_acquire('tpm', 0), tb_acquire('tpm', 1);
SELECT granted, retry_after > '100 hours' AS waits_for_the_debt FROM tb_try('tpm', 1);
SELECT tb_reset('tpm');

-- settling in the same transaction as your own usage record: a retried
-- request finds its record and does not settle twice
CREATE TABLE usage (request_id text PRIMARY KEY, tokens int);
CREATE FUNCTION pg_temp.record(id text, reserved int, used int) RETURNS float8
LANGUAGE sql AS $$
	WITH recorded AS (
		INSERT INTO usage VALUES (id, used) ON CONFLICT DO NOTHING RETURNING tokens)
	SELECT tb_settle('tpm', reserved, tokens) FROM recorded $$;
SELECT tb_acquire('tpm', 100);
SELECT round(pg_temp.record('req-1', 100, 40)::numeric, 2) AS settled;
SELECT round(pg_temp.record('req-1', 100, 40)::numeric, 2) AS retried_settles_nothing;
SELECT pg_temp.level('tpm');
SELECT tb_reset('tpm');

-- tb_sync lowers the level to what the provider reports, never raises it
SELECT round(tb_sync('tpm', 250)::numeric, 2) AS lowered;
SELECT round(tb_sync('tpm', 900)::numeric, 2) AS not_raised;
SELECT round(tb_sync('tpm', 0)::numeric, 2) AS emptied;
SELECT tb_reset('tpm');

-- tb_pause: no grants for anyone until then; retry_after says when
SELECT tb_pause('tpm', interval '10 minutes');
SELECT tb_acquire('tpm'), tb_acquire('tpm', 0);
SELECT granted, retry_after BETWEEN '9 min 59 s' AND '10 min' AS retry_in_ten_minutes,
       reset_after AS full_meanwhile
FROM tb_try('tpm');
SELECT paused_until BETWEEN clock_timestamp() + '9 min 59 s' AND clock_timestamp() + '10 min'
       AS paused_for_ten_minutes
FROM tb_status WHERE name = 'tpm';
-- a shorter pause does not cut a longer one short
SELECT tb_pause('tpm', interval '1 minute');
SELECT retry_after > '9 min' AS still_ten_minutes FROM tb_try('tpm');
-- a pause that already ended changes nothing, and writes nothing
SELECT xmin AS before FROM tb_buckets WHERE name = 'tpm' \gset
SELECT tb_pause_until('tpm', now() - interval '1 second'), tb_pause('tpm', interval '-5 minutes'),
       tb_pause('tpm', interval '0'), tb_pause_until('tpm', '-infinity');
SELECT xmin = :'before' AS unchanged FROM tb_buckets WHERE name = 'tpm';
-- the level refills during a pause; tb_reset lifts it
SELECT tb_reset('tpm');
SELECT tb_acquire('tpm'), paused_until IS NULL AS not_paused FROM tb_status WHERE name = 'tpm';
-- a pause until a moment works the same way
SELECT tb_pause_until('tpm', clock_timestamp() + interval '1 hour');
SELECT granted, retry_after > '59 min' AS retry_in_an_hour FROM tb_try('tpm');
-- a short pause really ends
SELECT tb_reset('tpm');
SELECT tb_pause('tpm', interval '2 s');
SELECT tb_acquire('tpm');
SELECT pg_sleep(2.05);
SELECT tb_acquire('tpm');

-- each of these is one row version: they lock the row and write once
SELECT tb_create('one', 10, 1, '1 hour');
BEGIN;
SELECT n_tup_upd AS before FROM pg_stat_xact_user_tables WHERE relname = 'tb_buckets' \gset
SELECT tb_refund('one', 1) IS NOT NULL, tb_settle('one', 1, 2) IS NOT NULL,
       tb_sync('one', 5) IS NOT NULL;
SELECT tb_pause('one', interval '1 s');
SELECT n_tup_upd - :before AS row_versions
FROM pg_stat_xact_user_tables WHERE relname = 'tb_buckets';
COMMIT;

DROP TABLE usage;
DROP EXTENSION tokenbucket;
