# Quotas (period buckets) under load and across restarts:
#  - 64 sessions charging one quota at once, a table and a memory one, and
#    a key of a table and of a memory quota template: the grants, counted
#    in a table in the same transaction as each grant, sum exactly to the
#    budget, and tb_stats agrees;
#  - a quota of 6-second periods spent, the server restarted within the
#    period (cleanly, and after a crash): still spent, table and memory;
#  - the server stopped over the period's end: the first call after the
#    start sees the quota full again, table and memory; a memory quota
#    after a crash is empty until the next period's start, and retry_after
#    says when that is;
#  - a memory bucket costs no more shared memory than before quotas (its
#    calendar is kept once, apart): 1,000,000 more buckets take under 450
#    bytes each (about 390; 520 with the calendar in each);
#  - the calendars of memory quotas, 1,024 different ones at most: the
#    one too many is an error (53200, with a hint) where the quota is made
#    or, from a template, first used; a quota of a calendar kept, a table
#    quota, still made; a clean restart keeps only the calendars of the
#    buckets saved;
#  - calendars whose periods start at the same moments are kept once,
#    whatever their anchors: 2,000 memory quotas each of days, months and
#    hours on different anchors all made, each answering as a table quota
#    of the same anchor does; calendars of different phases kept apart.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $node = PostgreSQL::Test::Cluster->new('quotas');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'tokenbucket'
max_connections = 90
restart_after_crash = on
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION tokenbucket;
	-- periods of ten years: no period starts during the run
	SELECT tb_create_quota('q', 500, '3650 days', 'UTC', '2025-01-01'),
	       tb_create_quota('mq', 500, '3650 days', 'UTC', '2025-01-01', memory => true),
	       tb_create_quota('tq:*', 300, '3650 days', 'Europe/Berlin', '2025-01-01'),
	       tb_create_quota('mtq:*', 300, '3650 days', 'Europe/Berlin', '2025-01-01', memory => true);
	CREATE TABLE grants (bucket text NOT NULL, cost float8 NOT NULL);
});

# 1: 64 sessions at once, each a mix of single charges and all-or-nothing pairs
my $script = $node->basedir . '/charge.sql';
open(my $fh, '>', $script) or die;
print $fh q{
INSERT INTO grants SELECT 'q', 1 WHERE tb_acquire('q');
INSERT INTO grants SELECT 'mq', 1 WHERE tb_acquire('mq');
INSERT INTO grants SELECT unnest('{tq:k,mtq:k}'::text[]), 0.5
	WHERE tb_acquire_all('{tq:k,mtq:k}', '{0.5,0.5}');
};
close($fh);
my ($out, $err) = ('', '');
my $ok = IPC::Run::run(
	[ 'pgbench', '-n', '-c', '64', '-j', '4', '-t', '20', '-f', $script,
	  '-h', $node->host, '-p', $node->port, 'postgres' ],
	'>', \$out, '2>', \$err);
ok($ok, '64 sessions of pgbench ran') or diag("pgbench said:\n$out$err");
is($node->safe_psql('postgres',
	q{SELECT string_agg(bucket || ' ' || s, ', ' ORDER BY bucket) FROM
	  (SELECT bucket, sum(cost) AS s FROM grants GROUP BY bucket) AS g}),
	'mq 500, mtq:k 300, q 500, tq:k 300',
	'the grants sum exactly to each budget: 1280 charges of 1 on 500, 1280 of 0.5 on 300');
is($node->safe_psql('postgres',
	q{SELECT string_agg(name || ' ' || granted_tokens || ' ' || tokens, ', ' ORDER BY name)
	  FROM tb_stats WHERE name IN ('q', 'mq', 'tq:k', 'mtq:k')}),
	'mq 500 0, mtq:k 300 0, q 500 0, tq:k 300 0',
	'tb_stats counts the same, and every quota is empty');

# 2: quotas of 6-second periods; wait for a period's start, then spend them
$node->safe_psql('postgres', q{
	SELECT tb_create_quota('s', 3, '6 seconds', 'UTC', '2025-01-01'),
	       tb_create_quota('ms', 3, '6 seconds', 'UTC', '2025-01-01', memory => true),
	       tb_create_quota('mc', 3, '6 seconds', 'UTC', '2025-01-01', memory => true);
});
sub period_end
{
	return $node->safe_psql('postgres',
		q{SELECT extract(epoch FROM period_end) FROM tb_status WHERE name = 's'});
}
sub sleep_until { my $t = shift; my $d = $t - time(); sleep($d) if $d > 0; }
sleep_until(period_end() + 0.2);
my $start = $node->safe_psql('postgres', q{SELECT period_start FROM tb_status WHERE name = 's'});
is($node->safe_psql('postgres',
	q{SELECT tb_acquire('s', 3), tb_acquire('ms', 3), tb_acquire('mc', 3), tb_acquire('s'), tb_acquire('ms')}),
	't|t|t|f|f', 'three quotas of 3 a period spent');

# "still spent": denied, unless a new period began meanwhile (a slow machine)
sub still_spent
{
	my ($names, $what) = @_;
	is($node->safe_psql('postgres', qq{
		SELECT bool_and(NOT t.granted OR s.period_start > '$start')
		FROM unnest('{$names}'::text[]) AS n(name)
		CROSS JOIN LATERAL tb_peek(n.name) AS t
		JOIN tb_status AS s ON s.name = n.name}), 't', $what);
}
$node->restart;
still_spent('s,ms,mc', 'a clean restart within the period: every quota still spent');
$node->stop('immediate');
$node->start;
still_spent('s,ms,mc', 'a crash within the period: every quota still spent (memory: empty since the restart)');
like($node->safe_psql('postgres', q{
	SELECT abs(extract(epoch FROM clock_timestamp() + t.retry_after - s.period_end)) < 1
	       OR s.period_start > '} . $start . q{'
	FROM tb_try('mc') AS t, tb_status AS s WHERE s.name = 'mc'}),
	qr/^t$/, 'a memory quota after a crash: retry_after counts down to the next period\'s start');

# 3: the server stopped over the period's end: full at the first call
my $end = period_end();
$node->stop;
sleep_until($end + 0.5);
$node->start;
is($node->safe_psql('postgres',
	q{SELECT (SELECT granted FROM tb_try('s', 3)), (SELECT granted FROM tb_try('ms', 3)),
	         (SELECT granted FROM tb_try('mc', 3)), tb_acquire('s'), tb_acquire('ms'), tb_acquire('mc')}),
	't|t|t|f|f|f',
	'stopped over the period\'s end: the first call finds each quota full again, and one budget only');

# 4: shared memory of 100 and of 1,000,100 memory buckets (server stopped)
$node->stop;
sub shared_mb
{
	my ($buckets) = @_;
	my ($out, $err) = run_command([ 'postgres', '-D', $node->data_dir, '-C', 'shared_memory_size',
		'-c', "tokenbucket.max_memory_buckets=$buckets" ]);
	chomp $out;
	return $out;
}
my ($small, $large) = (shared_mb(100), shared_mb(1000100));
cmp_ok(($large - $small) * 1024 * 1024 / 1000000, '<', 450,
	"a memory bucket takes under 450 bytes of shared memory ($small MB, $large MB)");

# 5: new calendars until there is no room for one
$node->start;
my $filled = $node->safe_psql('postgres', q{
	CREATE TABLE cal_error (i int, state text, message text, detail text, hint text);
	DO $$
	DECLARE
		st text; msg text; det text; hnt text;
	BEGIN
		FOR i IN 1..1100 LOOP
			BEGIN
				PERFORM tb_create_quota('cal' || i, 10, '1 day', 'UTC',
				                        '2025-01-01'::timestamp + i * interval '1 minute',
				                        memory => true);
			EXCEPTION WHEN OTHERS THEN
				GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
					det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
				INSERT INTO cal_error VALUES (i, st, msg, det, hnt);
				EXIT;
			END;
		END LOOP;
	END $$;
	SELECT i > 1000 AND i <= 1025, state, message, detail, hint,
	       (SELECT count(*) FROM tb_buckets WHERE name = 'cal' || i)
	FROM cal_error});
is($filled, 't|53200|no room for the calendar of memory token bucket "cal' .
	($node->safe_psql('postgres', 'SELECT i FROM cal_error')) . '"|All 1024 calendars of memory quotas are taken: ' .
	'each different calendar a memory bucket had since the server started takes one ' .
	'(calendars whose periods start at the same moments are one).|' .
	'Start memory quotas of the same period at the same time of day (tb_create_quota\'s "starts"; its default does), ' .
	'or make this one a table quota; a restart frees the calendars no memory bucket has.|0',
	'the memory quota of a calendar too many: 53200 with a hint, and no quota made');
is($node->safe_psql('postgres', q{
	SELECT tb_create_quota('same', 10, '1 day', 'UTC', '2025-01-01 00:01', memory => true),
	       tb_create_quota('table', 10, '1 day', 'UTC', '2031-01-01'),
	       tb_create_quota('newt:*', 10, '1 day', 'UTC', '2031-01-01', memory => true);
	SELECT tb_acquire('same', 10), tb_acquire('same'), tb_acquire('table', 10), tb_acquire('table')}),
	'||
t|f|t|f', 'a full table of calendars: a memory quota of a calendar kept, a table quota, a template still made and charged');
my ($rc, $out, $err) = $node->psql('postgres', q{SELECT tb_acquire('newt:1')});
like($err, qr/no room for the calendar of memory token bucket "newt:1".*HINT:  Start memory quotas/s,
	'a memory template\'s key of a calendar too many: the error at its first call');
$node->safe_psql('postgres', q{SELECT count(tb_drop('cal' || i)) FROM generate_series(1, 1100) AS i
	WHERE EXISTS (SELECT FROM tb_buckets WHERE name = 'cal' || i)});
$node->restart;
is($node->safe_psql('postgres', q{
	SELECT tb_create_quota('fresh', 10, '1 day', 'UTC', '2032-01-01', memory => true);
	SELECT tb_acquire('same'), tb_acquire('fresh', 10), tb_acquire('fresh'), tb_acquire('newt:1'),
	       (SELECT count(*) FROM tb_memory_buckets() WHERE name = 'newt:1')}),
	'
f|t|f|f|1', 'after a clean restart, the calendars of buckets dropped are free, those saved kept (a new key: empty since part 2\'s crash)');

# 6: calendars that start their periods at the same moments are kept once,
# whatever their anchors: 2,000 memory quotas each of '1 day' (anchors on
# 2,000 days, at 24 times of day), '1 month' (2,000 months from 1890, on
# every day of the month, the last ones included) and '1 hour' (2,000
# hours, across the change to summer time, on the quarter hours), all in
# Europe/Berlin: all made; each, spent, answers as a table quota of the
# same anchor (its twin) does, before and after a clean restart, and so
# do a few whose day of month only some months have, and durations.  A pair each of
# '3 months' and '7 days' of different phases stays two calendars.
$node->safe_psql('postgres', q{
	CREATE TABLE twins (name text PRIMARY KEY, period interval, starts timestamp);
	INSERT INTO twins
	SELECT 'day' || i, '1 day'::interval, '2023-01-01'::timestamp + i * interval '1 day' + i % 24 * interval '1 hour'
	FROM generate_series(1, 2000) AS i
	UNION ALL
	SELECT 'month' || i, '1 month'::interval,
	       date_trunc('month', '1890-01-01'::timestamp + i * interval '1 month') +
	       CASE WHEN i % 5 = 0 THEN interval '1 month' - interval '1 day'
	            ELSE i % 28 * interval '1 day' END + i % 3 * interval '1 hour'
	FROM generate_series(1, 2000) AS i
	UNION ALL
	SELECT 'hour' || i, '1 hour'::interval, '2026-02-01'::timestamp + i * interval '1 hour' + i % 4 * interval '15 minutes'
	FROM generate_series(1, 2000) AS i
	UNION ALL
	VALUES ('x-3mo-jan', '3 months'::interval, '2026-01-01'::timestamp), ('x-3mo-feb', '3 months', '2026-02-01'),
	       ('x-7d-mon', '7 days', '2026-01-05 06:00'), ('x-7d-tue', '7 days', '2026-01-06 06:00'),
	       -- the 31st of a phase whose first month has 30 days, February 29 every 12 and 36 months
	       ('x-3mo-31st', '3 months', '2026-05-31 08:00'), ('x-12mo-feb29', '12 months', '2028-02-29'),
	       ('x-36mo-feb29', '36 months', '2004-02-29 12:00'),
	       -- durations: periods of moments, whatever the local time
	       ('x-24h', '24 hours', '2026-01-05 06:00'), ('x-90min', '90 minutes', '2026-07-05 06:00');
});
for my $kind ('day', 'month', 'hour', 'x-')
{
	my ($rc, $out, $err) = $node->psql('postgres', qq{
		SELECT count(tb_create_quota('m:' || name, 10, period, 'Europe/Berlin', starts, memory => true)),
		       count(tb_create_quota('t:' || name, 10, period, 'Europe/Berlin', starts))
		FROM twins WHERE name LIKE '$kind%'});
	is($rc . $err . $out, '0' . ($kind eq 'x-' ? '9|9' : '2000|2000'),
		"every memory quota of '$kind' made, and its table twin");
}
is($node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE (SELECT granted FROM tb_try('m:' || name, 10))),
	       count(*) FILTER (WHERE (SELECT granted FROM tb_try('t:' || name, 10)))
	FROM twins}),
	'6009|6009', 'each quota spent');
sub twins_differ
{
	return $node->safe_psql('postgres', q{
		SELECT count(*) FILTER (WHERE m.retry_after_seconds IS NULL OR m.retry_after_seconds <= 0 OR
		                        abs(m.retry_after_seconds - t.retry_after_seconds) > 60 OR
		                        abs(m.reset_after_seconds - t.reset_after_seconds) > 60),
		       (array_agg(w.name || ' ' || m.retry_after || ' ' || t.retry_after ORDER BY w.name)
		           FILTER (WHERE abs(m.retry_after_seconds - t.retry_after_seconds) > 60))[1:3]
		FROM twins AS w, tb_peek('m:' || w.name, 10) AS m, tb_peek('t:' || w.name, 10) AS t});
}
is(twins_differ(), '0|', 'each memory quota, spent, says when its next period starts as its table twin does');
is($node->safe_psql('postgres', q{
	SELECT abs(a.retry_after_seconds - b.retry_after_seconds) > 3600,
	       abs(c.retry_after_seconds - d.retry_after_seconds) > 3600
	FROM tb_peek('m:x-3mo-jan', 10) AS a, tb_peek('m:x-3mo-feb', 10) AS b,
	     tb_peek('m:x-7d-mon', 10) AS c, tb_peek('m:x-7d-tue', 10) AS d}),
	't|t', "'3 months' from January and from February, '7 days' from a Monday and a Tuesday: each its own calendar");
$node->restart;
is(twins_differ(), '0|', 'after a clean restart, each memory quota is still spent and answers as its twin');

$node->stop;
done_testing();
