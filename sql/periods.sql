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

CREATE FUNCTION pg_temp.catch(sql text,
	OUT code text, OUT message text, OUT detail text, OUT hint text)
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE sql;
	code := '00000';
EXCEPTION WHEN others THEN
	GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
		detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
END $$;

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

-- Three months from the 31st count from the anchor: May 31, Aug 31, Nov 30, Feb 28
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
