# tb_template_stats.buckets, and the Prometheus gauge it feeds
# (tokenbucket_template_buckets, the query of prometheus/tokenbucket.yaml),
# right after every kind of restart:
#  - a clean restart, the keys of a memory template restored from the
#    state file the shutdown saved
#  - a crash (a backend killed, the others restarted): memory keys start
#    anew
#  - a restart without tokenbucket in shared_preload_libraries, then one
#    with it put back
# Each time the number equals the keys tb_status lists, for a memory
# template and a table template, before a new key is made and after.
use strict;
use warnings;
use FindBin;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('template_restart');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'tokenbucket'
restart_after_crash = on
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION tokenbucket;
	SELECT tb_create('mk:*', 5, 1, '1000 hours', memory => true),
	       tb_create('tk:*', 5, 1, '1000 hours');
	SELECT count(tb_acquire('mk:' || i)) + count(tb_acquire('tk:' || i))
	FROM generate_series(1, 5) AS i;
});

# the exporter's query for templates, as prometheus/tokenbucket.yaml has it
open(my $yaml, '<', "$FindBin::RealBin/../../prometheus/tokenbucket.yaml")
  or die "prometheus/tokenbucket.yaml: $!";
my ($gauge_sql) = do { local $/; <$yaml> } =~
  /^tokenbucket_template:\n  query: \|\n(.*?)\n  master:/ms;
close($yaml);
ok(defined $gauge_sql && $gauge_sql =~ /FROM tb_template_stats/,
	'the queries file reads tb_template_stats for templates');

# "template: listed stats gauge" for both templates: the keys tb_status
# lists, tb_template_stats.buckets, and the exporter query's buckets
sub counts
{
	return $node->safe_psql('postgres', qq{
		WITH gauge AS ($gauge_sql)
		SELECT string_agg(t || ': ' ||
			(SELECT count(*) FROM tb_status WHERE template = t) || ' ' ||
			(SELECT buckets FROM tb_template_stats WHERE template = t) || ' ' ||
			(SELECT buckets FROM gauge WHERE template = t), ', ' ORDER BY t)
		FROM unnest(ARRAY['mk:*', 'tk:*']) AS t});
}

# after a restart of kind $kind, with $keys keys of each: the three agree,
# and again once a new key of each is made
sub check
{
	my ($kind, $memory_keys, $n) = @_;
	is(counts(), "mk:*: $memory_keys $memory_keys $memory_keys, tk:*: 5 5 5",
		"$kind: tb_template_stats.buckets and the gauge are the keys tb_status lists");
	$node->safe_psql('postgres', "SELECT tb_acquire('mk:new$n'), tb_acquire('tk:new$n')");
	my ($m, $t) = ($memory_keys + 1, 6);
	is(counts(), "mk:*: $m $m $m, tk:*: $t $t $t", "$kind: ... and after a new key");
	$node->safe_psql('postgres', "DELETE FROM tb_buckets WHERE name = 'tk:new$n'");
	return $m;
}

is(counts(), 'mk:*: 5 5 5, tk:*: 5 5 5', 'five keys of each template, counted');

# 1: a clean restart restores the memory keys
$node->restart;
check('clean restart', 5, 1);

# 2: a crash: the memory keys are gone, and start anew
my ($out, $err) = ('', '');
my $sleeper = IPC::Run::start(
	[ 'psql', '-X', '-h', $node->host, '-p', $node->port, '-d', 'postgres',
	  '-c', 'SELECT pg_sleep(60)' ], '>', \$out, '2>', \$err);
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)'")
  or die 'the sleeper did not start';
my $victim = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)'");
kill 'KILL', $victim;
$sleeper->finish;
$node->poll_query_until('postgres', 'SELECT true')
  or die 'the server did not come back after the crash';
check('crash', 0, 2);

# 3: without the library, then with it back: the keys saved by the clean
# stop before come back
$node->safe_psql('postgres', "SELECT tb_acquire('mk:' || i) FROM generate_series(1, 5) AS i");
$node->adjust_conf('postgresql.conf', 'shared_preload_libraries', "''");
$node->restart;
is($node->safe_psql('postgres', "SELECT count(*) FROM tb_buckets WHERE template = 'tk:*'"), '5',
	'without the library, the table template\'s keys are there');
$node->adjust_conf('postgresql.conf', 'shared_preload_libraries', "'tokenbucket'");
$node->restart;
check('restart without the library and back', 6, 3);

$node->stop;
done_testing();
