# A memory quota whose state was not carried over never grants its
# current period's budget twice, and gets it back at the next period's
# start, not later; a named memory quota and the keys of a memory quota
# template alike:
#  - a crash (an immediate shutdown; a backend killed, the others
#    restarted): every quota spent before it is still spent, and
#    retry_after counts down to the current period's end;
#  - pg_dump restored into a new database of the same cluster and into a
#    new cluster (the first start with the library, where a new bucket
#    starts full): the same, for the keys used before the dump and for
#    those never used (a dump does not say which were), and the restored
#    rows say so (empty at the restore), after a tb_alter too; a quota
#    and a template made with tb_create_quota in the restored database
#    start with their budget;
#  - quotas of 6-second periods restored into the new cluster: spent until
#    the next period's start, then granted their budget, once.
# The long quotas' periods last ten years: none starts during the run.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use IPC::Run;
use Test::More;
use Time::HiRes qw(time sleep);

my %conf = (
	'shared_preload_libraries' => "'tokenbucket'",
	'restart_after_crash' => 'on');
sub new_node
{
	my $node = PostgreSQL::Test::Cluster->new(shift);
	$node->init;
	$node->append_conf('postgresql.conf',
		join('', map { "$_ = $conf{$_}\n" } sort keys %conf));
	$node->start;
	return $node;
}

my $node = new_node('source');
$node->safe_psql('postgres', q{
	CREATE EXTENSION tokenbucket;
	SELECT tb_create_quota('mq', 5, '3650 days', 'UTC', '2025-01-01', memory => true),
	       tb_create_quota('mcq', 5, '3650 days', 'UTC', '2025-01-01', 5, memory => true),
	       tb_create_quota('mtq:*', 5, '3650 days', 'Europe/Berlin', '2025-01-01', memory => true),
	       tb_create_quota('ms', 3, '6 seconds', 'UTC', '2025-01-01', memory => true),
	       tb_create_quota('mts:*', 3, '6 seconds', 'UTC', '2025-01-01', memory => true);
});
sub period_end
{
	return $node->safe_psql('postgres',
		q{SELECT extract(epoch FROM period_end) FROM tb_status WHERE name = 'ms'});
}
sub sleep_until { my $t = shift; my $d = $t - time(); sleep($d) if $d > 0; }

# the short quotas spent at the start of a period, the long ones now
sleep_until(period_end() + 0.2);
my $start = $node->safe_psql('postgres', q{SELECT period_start FROM tb_status WHERE name = 'ms'});
is($node->safe_psql('postgres', q{
	SELECT tb_acquire('ms', 3), tb_acquire('mts:k', 3),
	       tb_acquire('mq', 5), tb_acquire('mcq', 5), tb_acquire('mtq:k', 5),
	       tb_acquire('mq'), tb_acquire('mcq'), tb_acquire('mtq:k')}),
	't|t|t|t|t|f|f|f', 'a memory quota, one that may carry 5, a template key: each budget spent');
my $dump = $node->basedir . '/quotas.sql';
$node->command_ok([ 'pg_dump', '-d', $node->connstr('postgres'), '-f', $dump ], 'pg_dump');

# "spent": none of the long quotas grants anything, the key never used
# included, and each will grant its budget at its period's end: tb_peek's
# retry_after for the budget, compared with tb_status's period_end inside
# the server (the next period's end is ten years later)
sub spent
{
	my ($n, $db, $what) = @_;
	is($n->safe_psql($db, q{
		SELECT string_agg(n || ' ' || (SELECT granted FROM tb_peek(n, 0.5)) || ' ' || t.granted
			|| ' ' || (abs(extract(epoch FROM clock_timestamp() + t.retry_after - s.period_end)) < 600),
			', ' ORDER BY n)
		FROM unnest('{mq,mcq,mtq:k,mtq:never}'::text[]) AS n
		CROSS JOIN LATERAL tb_peek(n, 5) AS t
		JOIN tb_status AS s ON s.name = CASE WHEN n LIKE 'mtq:%' THEN 'mtq:*' ELSE n END}),
		'mcq false false true, mq false false true, mtq:k false false true, mtq:never false false true',
		$what);
}

# 1: restored into a new database of the same cluster (never crashed)
$node->safe_psql('postgres', 'CREATE DATABASE copy');
$node->command_ok([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('copy'),
	'-f', $dump ], 'restored into a new database');
spent($node, 'copy', 'restored into a new database: every memory quota spent until its period\'s end');

# 2: restored into a new cluster: its first start, where new buckets start full
my $other = new_node('restored');
$other->command_ok([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $other->connstr('postgres'),
	'-f', $dump ], 'restored into a new cluster');
is($other->safe_psql('postgres', 'SELECT tb_memory_empty_at()'), '-infinity',
	'the new cluster is at its first start: a memory bucket new here starts full');
spent($other, 'postgres', 'restored into a new cluster: every memory quota spent until its period\'s end');
is($other->safe_psql('postgres', q{
	SELECT string_agg(name || ' ' || (deficit = capacity) || ' ' || (updated_at >= pg_postmaster_start_time()),
		', ' ORDER BY name)
	FROM tb_buckets WHERE memory}),
	'mcq true true, mq true true, ms true true, mtq:* true true, mts:* true true',
	'the restored rows of memory quotas say so: empty at the restore');
$other->safe_psql('postgres', q{
	SELECT tb_create_quota('fresh', 5, '3650 days', 'UTC', '2025-01-01', memory => true),
	       tb_create_quota('fresh:*', 5, '3650 days', 'UTC', '2025-01-01', 2, memory => true)});
$other->safe_psql('postgres', q{SELECT tb_alter('fresh:*', 9)});
is($other->safe_psql('postgres', q{
	SELECT tb_acquire('fresh', 5), tb_acquire('fresh:k', 5), tb_acquire('fresh'), tb_acquire('fresh:k')}),
	't|t|f|f', 'a memory quota and a template made (and altered) in the restored database start with their budget, once');

# tb_alter of a restored quota and of its template: still spent, keys
# first used after it too; the quota that may carry 5 gets 5 at the next
# period's start, and 10 a period later at the earliest
$other->safe_psql('postgres', q{SELECT tb_alter('mtq:*', 8), tb_alter('mq', 8)});
is($other->safe_psql('postgres', q{
	SELECT string_agg(n || ' ' || (SELECT granted FROM tb_peek(n, 0.5)), ', ' ORDER BY n)
	FROM unnest('{mq,mtq:k,mtq:later}'::text[]) AS n}),
	'mq false, mtq:k false, mtq:later false',
	'tb_alter of a restored memory quota, and of its template: still spent, a new key too');
is($other->safe_psql('postgres', q{
	SELECT extract(epoch FROM t.retry_after) > extract(epoch FROM s.period_end - clock_timestamp()) + 86400 * 3000
	FROM tb_peek('mcq', 6) AS t, tb_status AS s WHERE s.name = 'mcq'}),
	't', 'a restored quota that may carry 5 gets its budget at the next period\'s start, no more');

# the short quotas: spent until the next period (unless one began meanwhile
# on a slow machine), then granted their budget, once
is($other->safe_psql('postgres', qq{
	SELECT bool_and(NOT (SELECT granted FROM tb_peek(n, 1)) OR s.period_start > '$start')
	FROM unnest('{ms,mts:k}'::text[]) AS n, tb_status AS s WHERE s.name = 'ms'}),
	't', 'the short quotas restored: spent within their period');
sleep_until(period_end() + 0.3);
is($other->safe_psql('postgres', q{
	SELECT tb_acquire('ms', 3), tb_acquire('mts:k', 3), tb_acquire('mts:new', 3),
	       tb_acquire('ms'), tb_acquire('mts:k'), tb_acquire('mts:new')}),
	't|t|t|f|f|f', 'at the next period\'s start they get their budget, once');
$other->stop;

# 3: a crash: an immediate shutdown, then a backend killed
$node->stop('immediate');
$node->start;
spent($node, 'postgres', 'after an immediate shutdown: every memory quota spent until its period\'s end');
spent($node, 'copy', 'and in the restored database too');

my ($out, $err) = ('', '');
my $sleeper = IPC::Run::start(
	[ 'psql', '-X', '-h', $node->host, '-p', $node->port, '-d', 'postgres',
	  '-c', 'SELECT pg_sleep(60)' ], '>', \$out, '2>', \$err);
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)'")
  or die 'the sleeper did not start';
my $victim = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)'");
my $log_offset = -s $node->logfile;
kill 'KILL', $victim;
$sleeper->finish;
$node->wait_for_log(qr/all server processes terminated; reinitializing/, $log_offset);
$node->poll_query_until('postgres', 'SELECT true')
  or die 'the server did not come back after the crash';
spent($node, 'postgres', 'after a backend was killed: every memory quota spent until its period\'s end');

$node->stop;
done_testing();
