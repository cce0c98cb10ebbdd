--
-- look: what clients need in their own types.  tb_peek looks without
-- writing; a cost of 0 writes nothing either; waits come as intervals and
-- as seconds; every overload takes an untyped literal; template names are
-- not buckets.
--
CREATE EXTENSION tokenbucket;
\set VERBOSITY default
SELECT tb_create('look', 4, 2, '1 hour');   -- a token every 30 minutes
SELECT tb_create('user:*', 3, 1, '1 hour');

-- tb_peek answers as tb_try would, and takes nothing
SELECT tb_acquire('look', 3);
SELECT granted, round(remaining::numeric, 1) AS remaining,
       retry_after_seconds BETWEEN 3500 AND 3600 AS retry_after_an_hour,
       extract(epoch FROM retry_after)::numeric = retry_after_seconds::numeric AS same_wait,
       reset_after_seconds BETWEEN 5300 AND 5400 AS reset_after_an_hour_and_a_half
FROM tb_peek('look', 3);
SELECT granted, round(remaining::numeric, 1) AS remaining FROM tb_peek('look');
-- peeking then trying gives the same answer (remaining: after the take)
SELECT tb_create('twin', 5, 1, '1 hour');
SELECT p.granted AND t.granted AS both_granted,
       abs(p.remaining - 3) < 0.01 AND abs(t.remaining - 3) < 0.01 AS both_left_3,
       abs(p.reset_after_seconds - t.reset_after_seconds) < 1 AS same_reset
FROM tb_peek('twin', 2) AS p, LATERAL tb_try('twin', 2) AS t;
SELECT xmin AS row_version FROM tb_buckets WHERE name = 'look' \gset
-- and it writes nothing: no new row version, no transaction id
BEGIN;
SELECT granted FROM tb_peek('look', 0.5);
SELECT granted FROM tb_try('look', 0);
SELECT tb_acquire('look', 0), tb_acquire_all('{look}', '{0}');
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_transaction_id;
COMMIT;
SELECT xmin = :'row_version' AS same_row_version FROM tb_buckets WHERE name = 'look';

-- a key its template would make is looked at without being made
SELECT granted, remaining, retry_after, reset_after FROM tb_peek('user:new', 3);
SELECT count(*) AS made FROM tb_buckets WHERE name = 'user:new';
SELECT granted FROM tb_try('user:new', 0);
SELECT count(*) AS made FROM tb_buckets WHERE name = 'user:new';

-- a bucket in debt or paused denies even a cost of 0, as before
SELECT round(tb_settle('look', 0, 10)::numeric) AS in_debt;
SELECT granted, retry_after_seconds > 3600 AS waits_for_the_debt FROM tb_try('look', 0);
SELECT tb_reset('look');

-- tb_try and tb_try_all report the waits in seconds too
SELECT tb_acquire('look', 4);
SELECT granted, retry_after_seconds BETWEEN 3500 AND 3600 AS about_an_hour,
       reset_after_seconds BETWEEN 7100 AND 7200 AS about_two_hours
FROM tb_try('look', 2);
SELECT name, granted, retry_after_seconds > 0 AS holds_it_back, reset_after_seconds >= 0 AS has_reset
FROM tb_try_all('{user:a,look}', '{1,4}');
-- a denied all-or-nothing take writes nothing either: no key made, no
-- transaction id
BEGIN;
SELECT tb_acquire_all('{user:b,look}', '{1,4}') AS granted;
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_transaction_id,
       (SELECT count(*) FROM tb_buckets WHERE name = 'user:b') AS made;
COMMIT;

-- an untyped literal works in every overload: the pause takes a duration,
-- tb_pause_until a moment
SELECT tb_pause('look', '2 hours');
SELECT granted, retry_after_seconds BETWEEN 7100 AND 7200 AS paused_2h FROM tb_peek('look', 0);
SELECT tb_pause_until('look', now() + '3 hours');
SELECT retry_after_seconds BETWEEN 10700 AND 10800 AS paused_3h FROM tb_peek('look', 0);
SELECT tb_reset('look');
SELECT tb_acquire('look'), tb_acquire('look', '1'), tb_acquire_wait('look', '1', '0 s'),
       tb_acquire_all('{look}'), tb_acquire_all_wait('{look}', '{0}', '1 ms');
SELECT granted FROM tb_try('look', '0');
SELECT tb_refund('look', '1') IS NOT NULL, tb_settle('look', '1', '1') IS NOT NULL,
       tb_sync('look', '100') IS NOT NULL;
-- and a number of seconds becomes a timeout with make_interval
SELECT tb_reset('look'), tb_acquire('look', 4);
SELECT tb_acquire_wait('look', 1, make_interval(secs => 0.05)) AS granted_in_time;

-- a template is not a bucket: spending from it, giving to it, pausing or
-- resetting it is an error of its own
\pset format unaligned
\pset fieldsep ' | '
\pset footer off
CREATE FUNCTION pg_temp.catch(sql text, OUT code text, OUT message text)
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE sql;
	code := '00000';
EXCEPTION WHEN others THEN
	GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT;
END $$;
SELECT call, (pg_temp.catch(call)).* FROM (VALUES
	($$SELECT tb_acquire('user:*')$$),
	($$SELECT tb_acquire('user:' || 'evil*')$$),
	($$SELECT tb_try('user:*')$$),
	($$SELECT tb_peek('user:*')$$),
	($$SELECT tb_acquire_wait('user:*', 1, '1 s')$$),
	($$SELECT tb_acquire_all('{look,user:*}')$$),
	($$SELECT tb_acquire_all_wait('{user:*}')$$),
	($$SELECT * FROM tb_try_all('{user:*}')$$),
	($$SELECT tb_refund('user:*', 1)$$),
	($$SELECT tb_settle('user:*', 1, 2)$$),
	($$SELECT tb_sync('user:*', 1)$$),
	($$SELECT tb_pause('user:*', '1 s')$$),
	($$SELECT tb_pause_until('user:*', 'infinity')$$),
	($$SELECT tb_reset('user:*')$$),
	($$SELECT tb_acquire(repeat('x', 1025))$$),
	($$SELECT tb_acquire('user:' || repeat('x', 1020))$$)
) AS c(call);
\pset format aligned
\pset footer on
-- nothing was made or changed by those calls
SELECT name, capacity, tokens FROM tb_status WHERE is_template;
SELECT count(*) AS made FROM tb_buckets WHERE name LIKE 'user:%' AND NOT name LIKE '%*';

-- a waiter needs READ COMMITTED: on a snapshot it would never see tokens
-- given back while it waits
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT tb_acquire_wait('look', 1, '1 s');
ROLLBACK;

-- the template itself is still the DBA's to change and drop
SELECT tb_alter('user:*', 5), tb_drop('user:*');

DROP EXTENSION tokenbucket;
