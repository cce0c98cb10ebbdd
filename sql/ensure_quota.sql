--
-- ensure_quota: tb_ensure_quota, tb_create_quota's quota made so that a
-- deploy script can run it on every release.  A whole set-up (table and
-- memory quotas, templates of both) run twice says 'created', then
-- 'unchanged'; a NULL starts keeps a quota's own anchor; a changed budget
-- or carry says 'changed' and keeps the tokens held, capped, a template's
-- keys with it; a table quota's changed calendar counts from now on, its
-- tokens kept; what cannot change in place (a memory quota's calendar,
-- table or memory, a continuous bucket's name) is refused with 0A000; the
-- arguments are checked as tb_create_quota's are; only the owner may call
-- it until granted.  Where tokens are shown, periods are 1000 days or
-- hours long: no period starts during the test.
--
CREATE EXTENSION tokenbucket;
SET timezone = 'UTC';

\i sql/include/catch.sql

-- deploy(): the set-up, one call each, in order
CREATE FUNCTION pg_temp.deploy() RETURNS TABLE (object text, did text) LANGUAGE plpgsql AS $$
BEGIN
	object := 'team'; did := tb_ensure_quota('team', 500, '1 month', 'Europe/Berlin', carry_max => 100); RETURN NEXT;
	object := 'day'; did := tb_ensure_quota('day', 10, '1000 days'); RETURN NEXT;
	object := 'calls'; did := tb_ensure_quota('calls', 1000, '1 hour', starts => '2025-01-01 00:30'); RETURN NEXT;
	object := 'mday'; did := tb_ensure_quota('mday', 10, '1000 days', memory => true); RETURN NEXT;
	object := 'mmonth'; did := tb_ensure_quota('mmonth', 10, '1 month', starts => '2020-01-15', memory => true); RETURN NEXT;
	object := 'user:*'; did := tb_ensure_quota('user:*', 5, '1000 days', 'America/New_York'); RETURN NEXT;
	object := 'muser:*'; did := tb_ensure_quota('muser:*', 5, '1000 days', memory => true); RETURN NEXT;
END $$;

-- the first run makes everything, as tb_create_quota would (a default
-- anchor: the start of the current month, day or hour); the second nothing
SELECT * FROM pg_temp.deploy();
SELECT s.name, s.capacity, s.refill_rate AS budget, s.period, s.time_zone, s.memory,
	s.tokens, b.period_anchor = CASE WHEN b.period = '1 month'
		THEN date_trunc('month', now() AT TIME ZONE b.time_zone)
		ELSE date_trunc('day', now() AT TIME ZONE b.time_zone) END AS default_anchor,
	CASE WHEN s.name IN ('calls', 'mmonth') THEN b.period_anchor END AS given_anchor
FROM tb_status AS s JOIN tb_buckets AS b USING (name) ORDER BY s.name;
SELECT * FROM pg_temp.deploy();

-- starts NULL keeps a quota's own anchor (as if made on another day);
-- a starts given is compared
UPDATE tb_buckets SET period_anchor = (now() AT TIME ZONE time_zone) - interval '1 day'
WHERE name IN ('day', 'user:*');
UPDATE tb_buckets SET period_anchor = '2024-03-01' WHERE name = 'team';
SELECT tb_ensure_quota('day', 10, '1000 days') AS day,
	tb_ensure_quota('team', 500, '1 month', 'Europe/Berlin', carry_max => 100) AS team,
	tb_ensure_quota('user:*', 5, '1000 days', 'America/New_York') AS "user:*",
	tb_ensure_quota('mmonth', 10, '1 month', memory => true) AS mmonth,
	tb_ensure_quota('calls', 1000, '1 hour', starts => '2025-01-01 00:30') AS calls_same,
	tb_ensure_quota('calls', 1000, '1 hour', starts => '2025-01-01 00:45') AS calls_moved;
SELECT name, period_anchor FROM tb_buckets WHERE name IN ('calls', 'team') ORDER BY name;

-- a changed budget or carry: changed, the tokens kept, capped; a template's
-- keys follow it
SELECT tb_acquire('day', 4), tb_acquire('mday', 4), tb_acquire('user:1', 2), tb_acquire('muser:1', 2);
SELECT tb_ensure_quota('day', 20, '1000 days') AS day,
	tb_ensure_quota('mday', 20, '1000 days', memory => true) AS mday,
	tb_ensure_quota('user:*', 8, '1000 days', 'America/New_York') AS "user:*",
	tb_ensure_quota('muser:*', 8, '1000 days', memory => true) AS "muser:*";
SELECT name, capacity, refill_rate AS budget, tokens FROM tb_status
WHERE name IN ('day', 'mday', 'user:1', 'muser:1') ORDER BY name;
SELECT tb_ensure_quota('day', 3, '1000 days') AS lower, tb_ensure_quota('day', 3, '1000 days', carry_max => 2) AS carry;
SELECT name, capacity, refill_rate AS budget, tokens FROM tb_status WHERE name = 'day';

-- a table quota's new calendar counts from now on, its tokens kept: its
-- last write, two hours ago, was in the old calendar's period (read in
-- the new one, an hour's start would have passed and refilled it); a
-- template's keys with it
UPDATE tb_buckets SET updated_at = now() - interval '2 hours' WHERE name IN ('day', 'user:1');
SELECT tb_ensure_quota('day', 3, '1000 hours', carry_max => 2) AS day,
	tb_ensure_quota('user:*', 8, '1000 hours', 'America/New_York') AS "user:*";
SELECT s.name, s.capacity, s.tokens, s.period, s.time_zone,
	s.period_start = date_trunc('hour', now()) AS from_this_hour,
	s.period_end - s.period_start AS length, b.updated_at > now() - interval '1 hour' AS written_now
FROM tb_status AS s JOIN tb_buckets AS b USING (name)
WHERE s.name IN ('day', 'user:*', 'user:1') ORDER BY s.name;
-- a time zone too, and a starts given
SELECT tb_ensure_quota('day', 3, '1000 hours', 'Asia/Tokyo', '2025-01-01 00:00', 2) AS day;
SELECT s.name, s.tokens, s.period, s.time_zone, b.period_anchor
FROM tb_status AS s JOIN tb_buckets AS b USING (name) WHERE s.name = 'day';
SELECT tb_ensure_quota('day', 3, '1000 hours', 'Asia/Tokyo', carry_max => 2) AS day_again;

-- in a transaction that rolls back, nothing was made
BEGIN;
SELECT tb_ensure_quota('later', 1, '1 day');
ROLLBACK;
SELECT tb_ensure_quota('later', 1, '1 day'), tb_ensure_quota('later', 1, '1 day');

-- what tb_ensure_quota refuses, each with its SQLSTATE: what cannot change
-- in place (a memory quota's calendar, table or memory, a continuous
-- bucket), then the arguments, as tb_create_quota refuses them
SELECT tb_create('rate', 10, 1), tb_create('mrate', 10, 1, memory => true);
SELECT c.call, r.code, r.message, r.detail, r.hint FROM (VALUES
	($$SELECT tb_ensure_quota('mday', 30, '7 days', memory => true)$$),
	($$SELECT tb_ensure_quota('mday', 20, '1000 days', 'Europe/Berlin', memory => true)$$),
	($$SELECT tb_ensure_quota('mmonth', 10, '1 month', starts => '2020-01-16', memory => true)$$),
	($$SELECT tb_ensure_quota('muser:*', 8, '1 day', memory => true)$$),
	($$SELECT tb_ensure_quota('day', 3, '1000 hours', 'Asia/Tokyo', carry_max => 2, memory => true)$$),
	($$SELECT tb_ensure_quota('mday', 20, '1000 days')$$),
	($$SELECT tb_ensure_quota('rate', 10, '1 day')$$),
	($$SELECT tb_ensure_quota('mrate', 10, '1 day', memory => true)$$)
) AS c(call), pg_temp.catch(c.call) AS r;
SELECT c.call, r.code, r.message FROM (VALUES
	($$SELECT tb_ensure_quota('x', 10, '1 month 2 days')$$),
	($$SELECT tb_ensure_quota('x', 10, '0 days')$$),
	($$SELECT tb_ensure_quota('x', 10, '0.5 seconds')$$),
	($$SELECT tb_ensure_quota('x', 10, '1 day', 'Mars/Olympus')$$),
	($$SELECT tb_ensure_quota('x', 10, '1 day', 'UTC', 'infinity')$$),
	($$SELECT tb_ensure_quota('x', 0, '1 day')$$),
	($$SELECT tb_ensure_quota('x', 'NaN', '1 day')$$),
	($$SELECT tb_ensure_quota('x', 10, '1 day', carry_max => -1)$$),
	($$SELECT tb_ensure_quota('x', 10, '1 day', carry_max => 'Infinity')$$),
	($$SELECT tb_ensure_quota('', 10, '1 day')$$),
	($$SELECT tb_ensure_quota(NULL, 10, '1 day')$$),
	($$SELECT tb_ensure_quota('x', NULL, '1 day')$$),
	($$SELECT tb_ensure_quota('x', 10, NULL)$$),
	($$SELECT tb_ensure_quota('x', 10, '1 day', NULL)$$),
	($$SELECT tb_ensure_quota('x', 10, '1 day', carry_max => NULL)$$),
	($$SELECT tb_ensure_quota('x', 10, '1 day', memory => NULL)$$)
) AS c(call), pg_temp.catch(c.call) AS r;
-- nothing was written by what was refused
SELECT name, capacity, refill_rate AS budget, period, time_zone, memory FROM tb_status
WHERE name IN ('mday', 'mmonth', 'muser:*', 'day', 'rate', 'mrate', 'x') ORDER BY name;

-- a quota's refill is its budget a period, not a rate: tb_ensure and
-- tb_alter's per, which give a rate, refuse a quota (named, a template, a
-- template's key, table and memory) and change nothing
SELECT tb_ensure_quota('tq', 500, '1 month', 'Europe/Berlin'),
	tb_ensure_quota('mq', 500, '1 month', 'Europe/Berlin', memory => true),
	tb_ensure_quota('tq:*', 20, '1 day', 'Europe/Berlin');
SELECT c.call, r.code, r.message, r.detail, r.hint FROM (VALUES
	($$SELECT tb_ensure('tq', 500, 500, '1 month')$$),
	($$SELECT tb_ensure('mq', 500, 500, '1 month', memory => true)$$),
	($$SELECT tb_ensure('tq:*', 20, 20, '1 day')$$),
	($$SELECT tb_alter('tq', refill => 400, per => '1 month')$$),
	($$SELECT tb_alter('mq', refill => 400, per => '1 month')$$),
	($$SELECT tb_alter('tq:*', refill => 10, per => '1 day')$$),
	($$SELECT tb_alter('tq:ann', refill => 10, per => '1 day')$$)
) AS c(call), pg_temp.catch(c.call) AS r;
-- refill alone is the budget: allowed
SELECT tb_alter('tq', capacity => 400, refill => 400);
SELECT name, capacity, refill_rate AS budget, period FROM tb_status
WHERE name IN ('tq', 'mq', 'tq:*') ORDER BY name;

-- like tb_create_quota: not PUBLIC's; the owner grants it
CREATE ROLE regress_tb_ensure_quota_app;
SET ROLE regress_tb_ensure_quota_app;
SELECT r.code, r.message FROM pg_temp.catch($$SELECT tb_ensure_quota('team', 500, '1 month', 'Europe/Berlin', carry_max => 100)$$) AS r;
RESET ROLE;
GRANT EXECUTE ON FUNCTION tb_ensure_quota(text, float8, interval, text, timestamp, float8, boolean)
	TO regress_tb_ensure_quota_app;
SET ROLE regress_tb_ensure_quota_app;
SELECT tb_ensure_quota('team', 500, '1 month', 'Europe/Berlin', carry_max => 100);
RESET ROLE;

DROP EXTENSION tokenbucket;
DROP ROLE regress_tb_ensure_quota_app;
