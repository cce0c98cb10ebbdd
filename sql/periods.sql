--
-- periods: quotas over calendar periods.  Where each period starts, by
-- the extension (tb_period_start, the arithmetic of bucket.c and period.c)
-- at chosen moments, checked against PostgreSQL's own calendar arithmetic
-- (date_trunc and AT TIME ZONE): across the daylight-saving changes of
-- Europe/Berlin, America/New_York and Australia/Lord_Howe (a half-hour
-- shift), month ends of a leap and a common year, a year's end, weeks
-- starting on Mondays, hours; then a quota's tokens at those moments
-- (plain, carrying over, in debt), when it grants again, and the errors.
-- No sleeping: "now" is a moment passed to the helpers.
--
CREATE EXTENSION tokenbucket;
SET timezone = 'UTC';

\i sql/include/catch.sql

-- A day's period around each daylight-saving change, midnight to
-- midnight local time: 23 and 25 hours (Lord Howe: 23.5 and 24.5)
SELECT z.zone, d.day,
	tb_period_start('1 day', '2025-01-01 00:00', z.zone, d.day::timestamp AT TIME ZONE z.zone
		+ interval '12 hours') AS period_start,
	tb_period_start('1 day', '2025-01-01 00:00', z.zone, d.day::timestamp AT TIME ZONE z.zone
		+ interval '12 hours', 1)
	- tb_period_start('1 day', '2025-01-01 00:00', z.zone, d.day::timestamp AT TIME ZONE z.zone
		+ interval '12 hours') AS length
FROM (VALUES ('Europe/Berlin', ARRAY['2025-03-30', '2025-10-26', '2025-06-01']),
	('America/New_York', ARRAY['2025-03-09', '2025-11-02']),
	('Australia/Lord_Howe', ARRAY['2025-04-06', '2025-10-05'])) AS z(zone, days),
	unnest(z.days) AS d(day)
ORDER BY 1, 2;

-- Every hour of 2025 and of 2028 (and each half hour's last microsecond),
-- in each zone: the day and the month the extension finds are the ones
-- date_trunc finds in local time, turned into a moment AT TIME ZONE
SELECT z.zone, count(*) AS moments,
	count(*) FILTER (WHERE tb_period_start('1 day', '2025-01-01', z.zone, m.at)
		IS DISTINCT FROM date_trunc('day', m.at AT TIME ZONE z.zone) AT TIME ZONE z.zone) AS days_wrong,
	count(*) FILTER (WHERE tb_period_start('1 day', '2025-01-01', z.zone, m.at, 1)
		IS DISTINCT FROM (date_trunc('day', m.at AT TIME ZONE z.zone) + interval '1 day') AT TIME ZONE z.zone) AS ends_wrong,
	count(*) FILTER (WHERE tb_period_start('1 month', '2025-01-01', z.zone, m.at)
		IS DISTINCT FROM date_trunc('month', m.at AT TIME ZONE z.zone) AT TIME ZONE z.zone) AS months_wrong,
	count(*) FILTER (WHERE tb_period_start('1 hour', '2025-01-01', z.zone, m.at)
		IS DISTINCT FROM date_trunc('hour', m.at)) AS hours_wrong
FROM (VALUES ('Europe/Berlin'), ('America/New_York'), ('Australia/Lord_Howe'), ('UTC')) AS z(zone),
	(SELECT generate_series('2025-01-01 00:00+00'::timestamptz, '2025-12-31 23:00+00', '1 hour') AS at
	 UNION ALL
	 SELECT generate_series('2028-01-01 00:29:59.999999+00'::timestamptz, '2028-12-31 23:00+00', '30 minutes')) AS m
GROUP BY z.zone ORDER BY z.zone;

-- A local start time that does not exist (02:30 on Berlin's spring day) is
-- the moment AT TIME ZONE makes of it; the next day's is 02:30 again
SELECT tb_period_start('1 day', '2025-01-01 02:30', 'Europe/Berlin', '2025-03-30 12:00+00') AS gap_start,
	'2025-03-30 02:30'::timestamp AT TIME ZONE 'Europe/Berlin' AS at_time_zone,
	tb_period_start('1 day', '2025-01-01 02:30', 'Europe/Berlin', '2025-03-30 12:00+00', 1) AS next_start;

-- A month anchored on the 31st: the last day of shorter months, the 31st
-- again after them, through February of 2028 (leap) and of 2027, and
-- across the year's end; at 09:00 New York time
SELECT n, tb_period_start('1 month', '2026-10-31 09:00', 'America/New_York',
		'2026-11-15 00:00+00', n) AT TIME ZONE 'America/New_York' AS local_start
FROM generate_series(-1, 18) AS n;

-- Three months from the 31st count from the anchor: May 31, Aug 31, Nov 30, Feb 29 (2028 a leap year)
SELECT n, tb_period_start('3 months', '2027-05-31 00:00', 'UTC', '2027-06-01 00:00+00', n) AS start
FROM generate_series(0, 3) AS n;

-- A week starting on Mondays (the anchor is a Monday) in Berlin: each day
-- of a week across the October change falls in the week of its Monday
SELECT d AS at, tb_period_start('7 days', '2025-01-06 00:00', 'Europe/Berlin', d) AS week_start,
	extract(isodow FROM tb_period_start('7 days', '2025-01-06 00:00', 'Europe/Berlin', d)
		AT TIME ZONE 'Europe/Berlin') AS weekday,
	tb_period_start('7 days', '2025-01-06 00:00', 'Europe/Berlin', d, 1)
	- tb_period_start('7 days', '2025-01-06 00:00', 'Europe/Berlin', d) AS length
FROM generate_series('2025-10-25 12:00+00'::timestamptz, '2025-11-03 12:00+00', '1 day') AS d;

-- '1 hour' from 00:30 local, fixed length, in Lord Howe's half-hour zone:
-- hour starts half past its UTC hours, across its April change too
SELECT d AS at, tb_period_start('1 hour', '2025-01-01 00:30', 'Australia/Lord_Howe', d) AS hour_start
FROM generate_series('2025-04-05 14:10+00'::timestamptz, '2025-04-05 16:10+00', '1 hour') AS d;

-- A quota: the tokens of a bucket of 10 that gains 10 at each day's start
-- (Berlin), emptied at noon on its 23-hour day: none until the next local
-- midnight, then all 10; a microsecond before, none
SELECT at, tb_tokens(10, 10, 10, '2025-03-30 10:00+00', at, '1 day', '2025-01-01', 'Europe/Berlin') AS tokens
FROM unnest(ARRAY['2025-03-30 21:59:59.999999+00', '2025-03-30 22:00+00',
	'2025-04-02 00:00+00']::timestamptz[]) AS at;

-- carrying over, capped: capacity 15 (a budget of 10 and at most 5 more),
-- 12 held at the end of a day: 15 the next; emptied: 10 the next, 15 two later
SELECT held, at, tb_tokens(15, 10, 15 - held, '2025-06-01 10:00+00', at, '1 day', '2025-01-01', 'UTC') AS tokens
FROM unnest(ARRAY[12, 0]) AS held,
	unnest(ARRAY['2025-06-01 23:00+00', '2025-06-02 00:00+00', '2025-06-03 00:00+00']::timestamptz[]) AS at
ORDER BY held DESC, at;

-- debt: 4 over a budget of 10 (deficit 14), paid from the next period first
SELECT at, tb_tokens(10, 10, 14, '2025-06-01 10:00+00', at, '1 day', '2025-01-01', 'UTC') AS tokens
FROM unnest(ARRAY['2025-06-01 23:00+00', '2025-06-02 00:00+00', '2025-06-03 00:00+00']::timestamptz[]) AS at;

-- When it grants again (what retry_after counts down to) and when it is
-- full (reset_after): the next period's start exactly; with debt, or a
-- cost needing two periods' tokens, the one after; a pause past the next
-- start waits for the pause, but for the start's tokens only
SELECT c.what,
	tb_ready_at(c.capacity, 10, c.deficit, '2025-03-30 10:00+00', c.paused, c.cost,
		'2025-03-30 11:00+00', '1 day', '2025-01-01', 'Europe/Berlin') AS ready_at,
	tb_full_at(c.capacity, 10, c.deficit, '2025-03-30 10:00+00', '1 day', '2025-01-01', 'Europe/Berlin') AS full_at
FROM (VALUES ('empty', 10, 10, 1, '-infinity'::timestamptz),
	('in debt by 4', 10, 14, 7, '-infinity'),
	('carry 20 of 30, empty', 30, 30, 15, '-infinity'),
	('paused past the start', 10, 10, 1, '2025-03-31 08:00+00'),
	('holds it', 10, 0, 1, '-infinity')) AS c(what, capacity, deficit, cost, paused);

-- a take at the end of a period and at the next one's first microsecond
SELECT tb_take(10, 10, 10, '2025-06-01 10:00+00', '-infinity', 1, '2025-06-01 23:59:59.999999+00', 0,
		'1 day', '2025-01-01', 'UTC') AS before_start,
	tb_take(10, 10, 10, '2025-06-01 10:00+00', '-infinity', 1, '2025-06-02 00:00+00', 0,
		'1 day', '2025-01-01', 'UTC') AS at_start;

-- a NULL period is a continuous bucket; the 1.9 forms give NULL for a NULL elsewhere
SELECT tb_tokens(10, 1, 10, '2025-06-01 10:00+00', '2025-06-01 10:00:04+00', NULL, NULL, NULL) AS continuous,
	tb_tokens(10, 1, 10, NULL, '2025-06-01 10:00:04+00', '1 day', '2025-01-01', 'UTC') AS null_updated_at,
	tb_tokens(10, 1, 10, '2025-06-01 10:00+00', '2025-06-02', '1 day', NULL, 'UTC') AS null_anchor;

-- what the calendar refuses, each with its SQLSTATE
SELECT c.call, r.code, r.message, r.hint FROM (VALUES
	($$SELECT tb_period_start('1 month 2 days', '2025-01-01', 'UTC', now())$$),
	($$SELECT tb_period_start('1 day 01:00', '2025-01-01', 'UTC', now())$$),
	($$SELECT tb_period_start('0 days', '2025-01-01', 'UTC', now())$$),
	($$SELECT tb_period_start('-1 month', '2025-01-01', 'UTC', now())$$),
	($$SELECT tb_period_start('0.5 seconds', '2025-01-01', 'UTC', now())$$),
	($$SELECT tb_period_start('1 day', 'infinity', 'UTC', now())$$),
	($$SELECT tb_period_start('1 day', '2025-01-01', 'Mars/Olympus', now())$$),
	($$SELECT tb_period_start('1 day', '2025-01-01', '', now())$$),
	($$SELECT tb_period_start('1 day', '2025-01-01', repeat('x', 40), now())$$)
) AS c(call), pg_temp.catch(c.call) AS r;

-- the extreme moments a timestamptz holds, as anchor and as moment (an
-- anchor near the end and a moment near the start overflowed the period's
-- index: XX000 before 1.9 was released): every helper answers, or refuses
-- with a user's error; a row per helper and SQLSTATE, the answers counted
SELECT f.helper, r.code, count(*) AS calls
FROM (VALUES ('1 day'), ('7 days'), ('90 minutes'), ('1 month'), ('3 months')) AS p(period),
	(VALUES ('4713-11-25 BC'), ('1900-01-01'), ('294276-12-30'), ('294276-12-31 23:00')) AS a(anchor),
	(VALUES ('-infinity'), ('4713-11-24 00:00+00 BC'), ('1900-01-01 00:00+00'),
		('294276-12-30 00:00+00'), ('294276-12-31 23:59:59+00'), ('infinity')) AS m(at),
	LATERAL (VALUES
		('tb_period_start', format('SELECT tb_period_start(%L, %L, ''UTC'', %L)', p.period, a.anchor, m.at)),
		('tb_period_start n', format('SELECT tb_period_start(%L, %L, ''Europe/Berlin'', %L, -1)', p.period, a.anchor, m.at)),
		('tb_tokens', format('SELECT tb_tokens(10, 10, 5, %L, %L, %L, %L, ''UTC'')', m.at, '2025-06-01', p.period, a.anchor)),
		('tb_tokens back', format('SELECT tb_tokens(10, 10, 5, %L, %L, %L, %L, ''UTC'')', '2025-06-01', m.at, p.period, a.anchor)),
		('tb_take', format('SELECT tb_take(10, 10, 5, %L, ''-infinity'', 1, %L, 0, %L, %L, ''UTC'')', '2025-06-01', m.at, p.period, a.anchor)),
		('tb_full_at', format('SELECT tb_full_at(10, 10, 5, %L, %L, %L, ''UTC'')', m.at, p.period, a.anchor)),
		('tb_ready_at', format('SELECT tb_ready_at(10, 10, 15, %L, %L, 1, %L, %L, %L, ''UTC'')', m.at, m.at, '2025-06-01', p.period, a.anchor))
	) AS f(helper, call),
	pg_temp.catch(f.call) AS r
GROUP BY 1, 2 ORDER BY 1, 2;
-- the call of the review: the period that moment falls in, far before the
-- anchor, and the periods next to it
SELECT tb_period_start('1 day', '294276-12-30', 'UTC', '1900-01-01 12:00+00') AS day_start,
	tb_period_start('1 day', '294276-12-30', 'UTC', '1900-01-01 12:00+00', 1) AS next_day,
	tb_period_start('90 minutes', '294276-12-30', 'UTC', '4713-11-24 01:00+00 BC') AS first_periods,
	tb_period_start('90 minutes', '4713-11-24 BC', 'UTC', '294276-12-31 23:59+00') AS last_periods;

--
-- Quotas in the stores: tb_create_quota, then the functions every bucket
-- has, at real now, the period's start moved by writing the row.
--
-- A daily quota of 10 in Berlin and one of a month carrying over 5, table
-- and memory, and templates of both (each key a quota)
SELECT tb_create_quota('day', 10, '1 day', 'Europe/Berlin'),
	tb_create_quota('month', 10, '1 month', 'UTC', '2025-01-31 00:00', carry_max => 5),
	tb_create_quota('mday', 10, '1 day', 'Europe/Berlin', memory => true),
	tb_create_quota('user:*', 3, '1 day', 'America/New_York', '2025-01-06 09:00'),
	tb_create_quota('muser:*', 3, '1 day', 'America/New_York', '2025-01-06 09:00', memory => true),
	tb_create('rate', 100, 1);
-- the rows: a default anchor is the current day's (month's) start; the
-- quota starts with its budget, not what it may carry
SELECT name, capacity, refill_rate, deficit, period, time_zone, memory,
	period_anchor = CASE period WHEN '1 month' THEN date_trunc('month', now() AT TIME ZONE time_zone)
		WHEN '1 day' THEN date_trunc('day', now() AT TIME ZONE time_zone) END AS default_anchor,
	CASE WHEN name IN ('month', 'user:*', 'muser:*') THEN period_anchor END AS given_anchor
FROM tb_buckets ORDER BY name;

-- tb_status: the period it is in now, as tb_period_start says
SELECT s.name, s.tokens, s.period, s.time_zone,
	s.period_start = tb_period_start(b.period, b.period_anchor, b.time_zone, clock_timestamp()) AS start_now,
	s.period_end = tb_period_start(b.period, b.period_anchor, b.time_zone, clock_timestamp(), 1) AS end_now
FROM tb_status AS s JOIN tb_buckets AS b USING (name) ORDER BY s.name;

-- spend them: each grants its budget and no more, by every function that takes
SELECT tb_acquire('day', 7) AS day_7, tb_acquire('day', 4) AS day_4_more,
	(SELECT granted FROM tb_try('day', 3)) AS day_3_more, tb_acquire('day') AS day_11th,
	tb_acquire('month', 10) AS month_10, tb_acquire('month', 0.5) AS month_more,
	tb_acquire_all('{mday,rate}', '{10,1}') AS mday_10_and_rate,
	tb_acquire_all('{mday,rate}', '{1,1}') AS mday_11th_and_rate,
	tb_acquire('user:ann', 3) AS ann_3, tb_acquire('user:ann') AS ann_4th,
	tb_acquire('muser:ann', 3) AS mann_3, tb_acquire('muser:ann') AS mann_4th;
-- nothing was taken from rate by the refused all-or-nothing call
SELECT name, round(tokens) AS tokens FROM tb_status WHERE name = 'rate';

-- retry_after and reset_after count down to the next period's start
-- exactly (full_at, the same moment, as tb_status shows it)
SELECT t.name, t.granted, t.remaining,
	s.full_at = tb_period_start(b.period, b.period_anchor, b.time_zone, clock_timestamp(), 1) AS full_at_next_start,
	abs(extract(epoch FROM clock_timestamp() + t.retry_after - s.full_at)) < 1 AS retry_after_to_it,
	t.retry_after = t.reset_after AS same_wait
FROM tb_try_all('{day,mday}', '{1,1}') AS t
JOIN tb_status AS s USING (name)
JOIN tb_buckets AS b USING (name);
SELECT s.name, s.tokens,
	s.full_at = tb_period_start(coalesce(b.period, t.period), coalesce(b.period_anchor, t.period_anchor),
		coalesce(b.time_zone, t.time_zone), clock_timestamp(), 1) AS full_at_next_start
FROM tb_status AS s LEFT JOIN tb_buckets AS b USING (name)
LEFT JOIN tb_buckets AS t ON t.name = s.template
WHERE s.name IN ('user:ann', 'muser:ann') ORDER BY 1;

-- settle into debt, refund, sync, pause, and the next period's budget pays the debt first
SELECT tb_settle('day', 1, 5) AS day_after_settle, tb_refund('mday', 2) AS mday_after_refund,
	tb_sync('muser:ann', 0) AS mann_after_sync;
SELECT name, tokens, debt FROM tb_status WHERE name IN ('day', 'mday', 'muser:ann') ORDER BY name;

-- the table quota's day moved back: its last write in yesterday's period;
-- then the new day's budget pays the debt of 4 first
UPDATE tb_buckets SET updated_at = tb_period_start(period, period_anchor, time_zone, clock_timestamp())
	- interval '1 microsecond' WHERE name IN ('day', 'user:ann');
SELECT name, tokens, debt FROM tb_status WHERE name IN ('day', 'user:ann') ORDER BY name;
SELECT granted, remaining FROM tb_peek('day', 6);
SELECT granted, remaining, retry_after > interval '0' AS waits FROM tb_try('day', 7);
SELECT tb_acquire('user:ann', 3) AS ann_new_day;

-- two periods back: the debt paid, the rest carried, capped (the monthly
-- quota: 15 at most)
UPDATE tb_buckets SET updated_at = tb_period_start(period, period_anchor, time_zone, clock_timestamp(), -1)
	- interval '1 microsecond' WHERE name IN ('day', 'month');
SELECT name, tokens FROM tb_status WHERE name IN ('day', 'month') ORDER BY name;

-- the moment a take decides on: just before the start, just at it (the
-- row's updated_at and deficit written, tb_take at those moments)
SELECT tb_take(b.capacity, b.refill_rate, b.capacity, s.p - interval '1 hour', '-infinity', 1,
		s.p - interval '1 microsecond', 0, b.period, b.period_anchor, b.time_zone) AS before_start,
	tb_take(b.capacity, b.refill_rate, b.capacity, s.p - interval '1 hour', '-infinity', 1,
		s.p, 0, b.period, b.period_anchor, b.time_zone) AS at_start
FROM tb_buckets AS b,
	LATERAL (SELECT tb_period_start(b.period, b.period_anchor, b.time_zone, clock_timestamp(), 1) AS p) AS s
WHERE b.name = 'day';

-- a new key of a quota template that carries over starts with its budget
-- (3), not what it may hold (8): a first call above the budget is refused,
-- table and memory alike, by every function that takes (on main the
-- table's answered XX000 "a new bucket did not grant a cost within its
-- capacity"), and grants once the key has carried enough; above what it
-- may hold, it is the error a bucket's capacity gives
SELECT tb_create_quota('cuser:*', 3, '1 day', 'UTC', carry_max => 5),
	tb_create_quota('mcuser:*', 3, '1 day', 'UTC', carry_max => 5, memory => true);
SELECT t.kind, k.call, (SELECT granted FROM tb_try(t.kind || 'ann', 4)) AS try_4,
	tb_acquire(t.kind || 'bob', 5) AS acquire_5,
	tb_acquire_wait(t.kind || 'cy', 6, '10 ms') AS wait_6,
	(SELECT granted FROM tb_try(t.kind || 'di', 2, 0.5)) AS try_2_reserve_half,
	(SELECT granted FROM tb_try(t.kind || 'eve', 3)) AS try_3
FROM (VALUES ('cuser:'), ('mcuser:')) AS t(kind), (VALUES ('first')) AS k(call);
SELECT name, tokens, capacity, refill_rate FROM tb_status
WHERE name ~ '^m?cuser:[a-z]' ORDER BY name;
SELECT r.code, r.message FROM (VALUES ($$SELECT tb_acquire('cuser:fay', 9)$$),
	($$SELECT tb_acquire('mcuser:fay', 9)$$)) AS c(call), pg_temp.catch(c.call) AS r;
-- a day later the key carried its unused budget: 6 of 8
UPDATE tb_buckets SET updated_at = updated_at - interval '1 day' WHERE name = 'cuser:ann';
SELECT tokens FROM tb_status WHERE name = 'cuser:ann';
SELECT granted, remaining FROM tb_try('cuser:ann', 5);
SELECT tb_drop('cuser:*'), tb_drop('mcuser:*');

-- a pause holds a quota as any bucket; tb_reset fills it and lifts it
SELECT tb_pause('month', '1 hour');
SELECT granted FROM tb_try('month');
SELECT tb_reset('month');
SELECT name, tokens, paused_until FROM tb_status WHERE name = 'month';

-- tb_alter: the budget (refill) and capacity of a quota, its tokens kept,
-- capped; a template's keys with it
SELECT tb_alter('month', 12, 12), tb_alter('user:*', 5, 5), tb_alter('muser:*', 5, 5);
SELECT name, capacity, refill_rate, tokens, period FROM tb_status
WHERE name IN ('month', 'user:ann', 'muser:ann') ORDER BY name;

-- a memory quota of a second: spent, denied, and granted again at the next
-- second's start, which retry_after says (the memory store's own arithmetic)
SELECT tb_create_quota('second', 1, '1 second', 'UTC', '2025-01-01 00:00', memory => true);
SELECT tb_acquire('second') AS first, tb_acquire('second') AS second;
SELECT retry_after <= interval '1 second' AS within_a_second,
	pg_sleep(extract(epoch FROM retry_after)::float8) IS NOT NULL AS slept FROM tb_try('second');
SELECT tb_acquire('second') AS next_second;
-- a wait in the server waits to the period's start
SELECT tb_acquire('second') AS spent;
SELECT tb_acquire_wait('second', 1, '5 seconds') AS waited;

-- what tb_create_quota and the table refuse, each with its SQLSTATE
SELECT c.call, r.code, r.message FROM (VALUES
	($$SELECT tb_create_quota('x', 10, '1 month 2 days')$$),
	($$SELECT tb_create_quota('x', 10, '0 days')$$),
	($$SELECT tb_create_quota('x', 10, '1 day', 'Mars/Olympus')$$),
	($$SELECT tb_create_quota('x', 10, '1 day', 'UTC', 'infinity')$$),
	($$SELECT tb_create_quota('x', 0, '1 day')$$),
	($$SELECT tb_create_quota('x', 'NaN', '1 day')$$),
	($$SELECT tb_create_quota('x', 10, '1 day', carry_max => -1)$$),
	($$SELECT tb_create_quota('x', 10, '1 day', carry_max => 'Infinity')$$),
	($$SELECT tb_create_quota('', 10, '1 day')$$),
	($$SELECT tb_create_quota('day', 10, '1 day')$$),
	($$SELECT tb_create_quota('x', NULL, '1 day')$$),
	($$INSERT INTO tb_buckets (name, capacity, refill_rate, period, period_anchor, time_zone)
		VALUES ('x', 10, 11, '1 day', '2025-01-01', 'UTC')$$),
	($$INSERT INTO tb_buckets (name, capacity, refill_rate, period) VALUES ('x', 10, 10, '1 day')$$),
	($$INSERT INTO tb_buckets (name, capacity, refill_rate, time_zone) VALUES ('x', 10, 10, 'UTC')$$),
	($$UPDATE tb_buckets SET period = '1 mon 1 day' WHERE name = 'day'$$),
	($$UPDATE tb_buckets SET time_zone = 'Mars/Olympus' WHERE name = 'day'$$),
	($$UPDATE tb_buckets SET refill_rate = 11 WHERE name = 'day'$$),
	($$UPDATE tb_buckets SET period = '7 days' WHERE name = 'mday'$$),
	($$SELECT tb_alter('day', 5)$$)
) AS c(call), pg_temp.catch(c.call) AS r;
-- a table quota's calendar may change in place; nothing else was written
UPDATE tb_buckets SET period = '7 days', period_anchor = '2025-01-06' WHERE name = 'day';
SELECT name, period, extract(isodow FROM period_start AT TIME ZONE time_zone) AS weekday,
	period_end - period_start >= interval '7 days' AS a_week
FROM tb_status WHERE name = 'day';
SELECT count(*) AS buckets FROM tb_buckets;

-- the privileges: tb_create_quota is the owner's, like tb_create
SELECT has_function_privilege('public', 'tb_create_quota(text, float8, interval, text, timestamp, float8, boolean)',
	'EXECUTE') AS public_may_create;

DROP EXTENSION tokenbucket;
