--
-- deny: a table bucket's denial decided from its row as committed (a read
-- by the primary key, without the UPDATE) answers as the UPDATE did: the
-- same errors (a cost the bucket could never grant, a read-only
-- transaction), the same state for retry_after, the same counters (its
-- template's included, learned from the row), this transaction's own
-- changes seen, and nothing written.
--
CREATE EXTENSION tokenbucket;
SELECT tb_create('d', 2, 1, '1 hour'), tb_create('t:*', 2, 1, '1 hour'),
       tb_create('debt', 2, 1, '1 hour'), tb_create('paused', 2, 1, '1 hour');
SELECT tb_acquire('d', 2), tb_acquire('t:1', 2), tb_acquire('paused');
SELECT round(tb_settle('debt', 0, 5)::numeric, 2) AS debt_tokens;
SELECT tb_pause_until('paused', '2999-01-01 00:00:00+00');

-- denials: nothing written, no transaction id taken
BEGIN;
SELECT tb_acquire('d') AS d, tb_acquire('t:1') AS t1, tb_acquire('debt') AS debt,
       tb_acquire('paused') AS paused, tb_acquire('d', 1, 0.5) AS with_reserve;
SELECT pg_current_xact_id_if_assigned() IS NULL AS nothing_written;
COMMIT;

-- retry_after counts down to the moment the row says: a refill of an
-- hour a token, the debt paid back, the end of the pause
SELECT retry_after BETWEEN interval '59 minutes' AND interval '1 hour' AS an_hour,
       retry_after_seconds = extract(epoch FROM retry_after)::float8 AS exact
FROM tb_try('d');
SELECT retry_after BETWEEN interval '3 hours 59 minutes' AND interval '4 hours' AS four_hours,
       round(remaining::numeric, 2) AS remaining FROM tb_try('debt');
SELECT clock_timestamp() + retry_after - '2999-01-01 00:00:00+00' BETWEEN interval '-1 second' AND interval '1 second'
       AS until_the_pause_ends FROM tb_try('paused');

-- a cost no bucket of that capacity grants is an error, as it was
\set VERBOSITY terse
SELECT tb_acquire('d', 3);
SELECT tb_acquire('d', 2, 0.5);
\set VERBOSITY default

-- a read-only transaction cannot take, even where the row denies
\set VERBOSITY terse
BEGIN READ ONLY;
SELECT tb_acquire('d');
ROLLBACK;
BEGIN READ ONLY;
SELECT granted FROM tb_try('t:1');
ROLLBACK;
\set VERBOSITY default

-- this transaction's own refund is seen at once
BEGIN;
SELECT round(tb_refund('d', 1)::numeric, 2) AS refunded;
SELECT tb_acquire('d') AS granted, tb_acquire('d') AS denied;
ROLLBACK;

-- the counters: each denial counted once, the template's key's for its
-- template too
SELECT name, granted, denied FROM tb_stats ORDER BY name;
SELECT template, granted, denied FROM tb_template_stats ORDER BY template;

DROP EXTENSION tokenbucket;
