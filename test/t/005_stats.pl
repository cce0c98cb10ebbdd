# The counters of tb_stats across restarts and crashes, with a full hash,
# and on a server without the library preloaded:
#  - a clean restart and a crash both start them from zero, and "since"
#    says when they started again
#  - when tokenbucket.max_stats_buckets are all in use, the counters of
#    buckets made from templates make room first: the templates' own stay
#    exact, and so do those of named buckets
#  - without shared_preload_libraries, tb_stats fails with 55000 and says
#    what to put in postgresql.conf, and taking tokens still works
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('stats');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'tokenbucket'
tokenbucket.max_stats_buckets = 100
restart_after_crash = on
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION tokenbucket;
	SELECT tb_create('tab', 1000, 1), tb_create('mem', 1000, 1, memory => true),
	       tb_create('k:*', 5, 1), tb_create('mk:*', 5, 1, memory => true);
});

# n calls on each of the two named buckets (after a crash, the memory
# bucket starts empty and denies them)
sub take
{
	my ($n) = @_;
	$node->safe_psql('postgres',
		"SELECT count(tb_acquire('tab')) + count(tb_acquire('mem')) FROM generate_series(1, $n)");
}

# the calls the named buckets counted (granted or denied), and whether
# they count since $since
sub counted
{
	my ($since) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT string_agg(name || '=' || (granted + denied), ' ' ORDER BY name)
		       || ' ' || bool_and(since >= '$since'::timestamptz)
		FROM tb_stats WHERE name IN ('tab', 'mem')});
}

# 1: a clean restart starts the counters from zero, since the restart
take(10);
is(counted('-infinity'), 'mem=10 tab=10 true', 'ten calls each are counted');
my $before = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
$node->restart;
is(counted($before), 'mem=0 tab=0 true', 'a clean restart starts them from zero, since then');

# 2: so does a crash (a backend killed), since the server came back
take(7);
is(counted($before), 'mem=7 tab=7 true', 'counted again after the restart');
my ($out, $err) = ('', '');
my $sleeper = IPC::Run::start(
	[ 'psql', '-X', '-h', $node->host, '-p', $node->port, '-d', 'postgres',
	  '-c', 'SELECT pg_sleep(60)' ], '>', \$out, '2>', \$err);
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)'")
	or die 'the sleeper did not start';
my $pid = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)'");
my $crash = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
kill 'KILL', $pid;
IPC::Run::finish($sleeper);
$node->poll_query_until('postgres', 'SELECT true') or die 'server did not come back';
is(counted($crash), 'mem=0 tab=0 true', 'after a crash they start from zero, since it');

# 3: 150 keys of two templates, in a hash of 100: the keys' counters make
# room, the templates' and the named buckets' stay exact
take(5);
$node->safe_psql('postgres', q{
	SELECT count(*) FROM generate_series(1, 75) AS i,
	       LATERAL (SELECT tb_acquire('k:' || i), tb_acquire('mk:' || i), tb_acquire('k:' || i)) AS t
});
is($node->safe_psql('postgres', q{
	SELECT string_agg(template || '=' || (granted + denied), ' ' ORDER BY template)
	FROM tb_template_stats}),
	'k:*=150 mk:*=75', 'with the hash full, the templates count every call on their buckets');
is(counted($crash), 'mem=5 tab=5 true', '... and the named buckets keep theirs');
my ($rows) = split /\|/, $node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE granted + denied > 0), sum(granted + denied)
	FROM tb_stats WHERE template IS NOT NULL});
cmp_ok($rows, '<', 150, "only $rows of the 150 keys keep counters of their own");
cmp_ok($rows, '>', 0, '... the ones used last');
$node->stop;

# 4: without the library preloaded, the counters say what they need
my $plain = PostgreSQL::Test::Cluster->new('stats_no_preload');
$plain->init;
$plain->start;
$plain->safe_psql('postgres', q{CREATE EXTENSION tokenbucket; SELECT tb_create('t', 2, 1)});
is($plain->safe_psql('postgres', "SELECT tb_acquire('t')"), 't',
	'without preloading, taking tokens works');
for my $query ('SELECT * FROM tb_stats', 'SELECT * FROM tb_template_stats', 'SELECT tb_stats_reset()')
{
	my ($rc, $out, $err) = $plain->psql('postgres', "\\set VERBOSITY verbose\n$query");
	like($err, qr/55000: token bucket counters need tokenbucket in shared_preload_libraries/,
		"without preloading, $query fails with 55000");
	like($err, qr/HINT:  Add shared_preload_libraries = 'tokenbucket' to postgresql.conf/,
		'... and the hint says what to put in postgresql.conf');
}
$plain->stop;

done_testing();
