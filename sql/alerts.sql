--
-- alerts: thresholds at shares of a quota's budget.  A charge that leaves
-- a quota holding (1 - threshold) x its budget or less writes the event
-- into tb_alert_events, once per quota, period and threshold, in its own
-- transaction: table and memory quotas, named and template keys, through
-- every function that takes; the next period's; none for a charge rolled
-- back (and the next charge at that level writes it); settle; refund and
-- charge again; the errors; tb_quotas and tb_stats' spend.  (NOTIFY's
-- payload is in the isolation spec alerts_notify: psql prints a PID.)
--
CREATE EXTENSION tokenbucket;
SET timezone = 'UTC';

\i sql/include/catch.sql

-- the thresholds each quota has reached in this period, by its events
CREATE FUNCTION pg_temp.reached() RETURNS TABLE (bucket text, thresholds text)
LANGUAGE sql AS $$
	SELECT e.bucket, string_agg(e.threshold::text, ' ' ORDER BY e.threshold)
	FROM tb_alert_events AS e
	JOIN tb_quotas AS q ON q.name = e.bucket AND q.period_start = e.period_start
	GROUP BY e.bucket ORDER BY e.bucket
$$;

-- quotas of 100 a day: table and memory, named and templates' keys; and
-- a rate bucket beside them
SELECT tb_create_quota('team', 100, '1 day'),
	tb_create_quota('mteam', 100, '1 day', memory => true),
	tb_create_quota('user:*', 100, '1 day'),
	tb_create_quota('muser:*', 100, '1 day', memory => true),
	tb_create('rate', 1000, 1);
SELECT b AS bucket, tb_set_alerts(b, '{0.8, 0.95, 1}')
FROM unnest('{team,mteam,user:*,muser:*}'::text[]) AS b;
SELECT bucket, threshold FROM tb_alerts ORDER BY 1, 2;

-- 50 spent: below every threshold
SELECT b, tb_acquire(b, 50) FROM unnest('{team,mteam,user:ann,muser:ann}'::text[]) AS b;
SELECT count(*) AS events FROM tb_alert_events;
-- 80 spent (tb_try): 0.8 reached
SELECT b, (tb_try(b, 30)).granted FROM unnest('{team,mteam,user:ann,muser:ann}'::text[]) AS b;
SELECT * FROM pg_temp.reached();
-- 90 (with the rate bucket, all or nothing): nothing more
SELECT b, tb_acquire_all(ARRAY[b, 'rate'], '{10, 1}') FROM unnest('{team,mteam,user:ann,muser:ann}'::text[]) AS b;
SELECT * FROM pg_temp.reached();
-- 95 (tb_try_all): 0.95
SELECT b, t.name, t.granted
FROM unnest('{team,mteam,user:ann,muser:ann}'::text[]) AS b, tb_try_all(ARRAY[b, 'rate'], '{5, 1}') AS t;
SELECT * FROM pg_temp.reached();
-- 100 (a wait that is granted at once): 1
SELECT b, tb_acquire_wait(b, 5, '1 second') FROM unnest('{team,mteam,user:ann,muser:ann}'::text[]) AS b;
SELECT * FROM pg_temp.reached();
-- refused: nothing
SELECT b, tb_acquire(b, 1) FROM unnest('{team,mteam,user:ann,muser:ann}'::text[]) AS b;
-- each event once, with the quota's period, budget and what it held after
SELECT e.bucket, e.threshold, e.budget, e.remaining,
	e.period_start = q.period_start AS this_period, e.period_end = q.period_end AS its_end,
	e.at <= clock_timestamp() AS at
FROM tb_alert_events AS e JOIN tb_quotas AS q ON q.name = e.bucket
ORDER BY e.id;

-- a refund and the same charge again: no second event in the period
SELECT b, tb_refund(b, 85), tb_acquire(b, 85) FROM unnest('{team,mteam,user:ann,muser:ann}'::text[]) AS b;
SELECT bucket, count(*) AS events FROM tb_alert_events GROUP BY bucket ORDER BY bucket;

-- quotas of two seconds, table and memory, named and keys: the next
-- period fires again
SELECT tb_create_quota('short', 10, '2 seconds', 'UTC', '2025-01-01'),
	tb_create_quota('mshort', 10, '2 seconds', 'UTC', '2025-01-01', memory => true),
	tb_create_quota('short:*', 10, '2 seconds', 'UTC', '2025-01-01'),
	tb_create_quota('mshort:*', 10, '2 seconds', 'UTC', '2025-01-01', memory => true);
SELECT b, tb_set_alerts(b, '{0.5}') FROM unnest('{short,mshort,short:*,mshort:*}'::text[]) AS b;
-- from just after a period's start, so that each period's charges fall in it
SELECT pg_sleep(extract(epoch FROM tb_period_start('2 seconds', '2025-01-01', 'UTC',
	clock_timestamp(), 1) - clock_timestamp())::float8 + 0.01) IS NOT NULL AS slept;
SELECT b, tb_acquire(b, 4) AS below, tb_acquire(b, 1) AS reaches, tb_acquire(b, 1) AS more
FROM unnest('{short,mshort,short:a,mshort:a}'::text[]) AS b;
SELECT pg_sleep(extract(epoch FROM tb_period_start('2 seconds', '2025-01-01', 'UTC',
	clock_timestamp(), 1) - clock_timestamp())::float8 + 0.01) IS NOT NULL AS slept;
SELECT b, tb_acquire(b, 6) AS reaches_again FROM unnest('{short,mshort,short:a,mshort:a}'::text[]) AS b;
SELECT bucket, count(*) AS events, count(DISTINCT period_start) AS periods,
	bool_and(period_end - period_start = interval '2 seconds') AS two_seconds,
	max(period_start) - min(period_start) AS apart
FROM tb_alert_events WHERE bucket LIKE '%short%' GROUP BY bucket ORDER BY bucket;

-- a charge rolled back writes nothing; the next charge at that level writes it
SELECT tb_create_quota('rb', 10, '1 day'), tb_create_quota('mrb', 10, '1 day', memory => true),
	tb_set_alerts('rb', '{0.5}'), tb_set_alerts('mrb', '{0.5}');
BEGIN;
SELECT tb_acquire('rb', 6), tb_acquire('mrb', 6);
SELECT count(*) AS events_inside FROM tb_alert_events WHERE bucket IN ('rb', 'mrb');
ROLLBACK;
SELECT count(*) AS events_after_rollback FROM tb_alert_events WHERE bucket IN ('rb', 'mrb');
SELECT tb_acquire('rb', 6), tb_acquire('mrb', 6);
SELECT bucket, threshold, remaining FROM tb_alert_events WHERE bucket IN ('rb', 'mrb') ORDER BY bucket;
-- a savepoint rolled back too: the charge after it writes the event
SELECT tb_create_quota('sp', 10, '1 day', memory => true), tb_set_alerts('sp', '{0.5}');
BEGIN;
SAVEPOINT a;
SELECT tb_acquire('sp', 6);
ROLLBACK TO SAVEPOINT a;
SELECT count(*) AS events_after_savepoint FROM tb_alert_events WHERE bucket = 'sp';
SELECT tb_acquire('sp', 6);
COMMIT;
SELECT bucket, threshold, remaining FROM tb_alert_events WHERE bucket = 'sp';

-- tb_settle that takes more than the reservation reaches a threshold (one
-- that stays above the level does not)
SELECT tb_create_quota('st', 100, '1 day'), tb_create_quota('mst', 100, '1 day', memory => true),
	tb_set_alerts('st', '{0.8}'), tb_set_alerts('mst', '{0.8}');
SELECT b, tb_acquire(b, 50), tb_settle(b, 50, 70) AS settled_down_to,
	(SELECT count(*) FROM tb_alert_events WHERE bucket = b) AS events
FROM unnest('{st,mst}'::text[]) AS b;
SELECT b, tb_settle(b, 5, 20) AS settled FROM unnest('{st,mst}'::text[]) AS b;
SELECT bucket, threshold, remaining FROM tb_alert_events WHERE bucket IN ('st', 'mst') ORDER BY bucket;

-- a key of a template without thresholds, and a quota without any: nothing
SELECT tb_create_quota('other:*', 10, '1 day'), tb_create_quota('quiet', 10, '1 day');
SELECT tb_acquire('other:x', 10), tb_acquire('quiet', 10);
SELECT count(*) AS events FROM tb_alert_events WHERE bucket IN ('other:x', 'quiet');

-- tb_set_alerts replaces; empty or NULL removes them
SELECT tb_set_alerts('team', '{0.5, 0.5, 0.9}');
SELECT bucket, threshold FROM tb_alerts WHERE bucket = 'team' ORDER BY threshold;
SELECT tb_set_alerts('team', '{}'), tb_set_alerts('mteam', NULL);
SELECT count(*) AS left FROM tb_alerts WHERE bucket IN ('team', 'mteam');

-- what tb_set_alerts and the table refuse, each with its SQLSTATE
SELECT c.call, r.code, r.message, r.hint FROM (VALUES
	($$SELECT tb_set_alerts('st', '{0}')$$),
	($$SELECT tb_set_alerts('st', '{1.5}')$$),
	($$SELECT tb_set_alerts('st', '{NaN}')$$),
	($$SELECT tb_set_alerts('st', '{-0.5}')$$),
	($$SELECT tb_set_alerts('st', '{0.5, NULL}')$$),
	($$SELECT tb_set_alerts(NULL, '{0.5}')$$),
	($$SELECT tb_set_alerts('rate', '{0.5}')$$),
	($$SELECT tb_set_alerts('nosuch', '{0.5}')$$),
	($$SELECT tb_set_alerts('user:ann', '{0.5}')$$),
	($$SELECT tb_set_alerts('muser:bob', '{0.5}')$$),
	($$INSERT INTO tb_alerts VALUES ('st', 1.5)$$),
	($$INSERT INTO tb_alerts VALUES ('st', 0.8)$$)
) AS c(call), pg_temp.catch(c.call) AS r;

-- tb_quotas: each quota's budget, what it holds and has spent this period
SELECT name, budget, capacity, remaining, spent, period, time_zone,
	period_start = tb_period_start(period, (SELECT period_anchor FROM tb_buckets
		WHERE name = coalesce(q.template, q.name)), time_zone, clock_timestamp()) AS period_start_now,
	period_end > clock_timestamp() AS ends_later, memory, template
FROM tb_quotas AS q WHERE name NOT LIKE '%short%' ORDER BY name;
-- tb_stats: the same spend at its end, NULL for other buckets
SELECT s.name, s.spent, s.remaining, s.period_end = q.period_end AS period_end
FROM tb_stats AS s LEFT JOIN tb_quotas AS q USING (name)
WHERE s.name IN ('team', 'muser:ann', 'st', 'rate') ORDER BY s.name;

-- privileges: the tables and tb_set_alerts are the owner's
SELECT tb_create_quota('app', 10, '1 day'), tb_set_alerts('app', '{0.5}');
CREATE ROLE regress_tb_alerts_app;
SET ROLE regress_tb_alerts_app;
SELECT c.call, r.code, r.message FROM (VALUES
	($$SELECT tb_set_alerts('st', '{0.5}')$$),
	($$INSERT INTO tb_alerts VALUES ('st', 0.5)$$),
	($$SELECT count(*) FROM tb_alerts$$),
	($$SELECT count(*) FROM tb_alert_events$$),
	($$SELECT count(*) FROM tb_quotas$$)
) AS c(call), pg_temp.catch(c.call) AS r;
-- a charge as any role writes the event (as the extension's owner)
SELECT tb_acquire('app', 6) AS charged;
RESET ROLE;
SELECT bucket, threshold, remaining FROM tb_alert_events WHERE bucket = 'app';
GRANT SELECT ON tb_quotas TO regress_tb_alerts_app;
SET ROLE regress_tb_alerts_app;
SELECT name, spent FROM tb_quotas WHERE name = 'st';
RESET ROLE;
DROP OWNED BY regress_tb_alerts_app;
DROP ROLE regress_tb_alerts_app;

DROP EXTENSION tokenbucket;
