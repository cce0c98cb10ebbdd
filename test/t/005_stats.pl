# The counters of tb_stats across restarts and crashes, with a full hash,
# and on a server without the library preloaded:
#  - a clean restart keeps them (and "since"), keys of memory templates'
#    included; a crash starts them from zero, and "since" says when
#  - when tokenbucket.max_stats_buckets are all in use, the counters of
#    keys of table templates make room; the templates' own stay exact, and
#    so do those of named buckets; keys of memory templates keep theirs in
#    their own entries
#  - eight sessions granting on far more keys than the hash holds, beside
#    a named bucket: every grant is counted in the templates and in the
#    named bucket, none lost
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
	       tb_create('k:*', 5, 1), tb_create('mk:*', 5, 1, memory => true),
	       tb_create('mk2:*', 1e9, 1e9, memory => true), tb_create('k2:*', 1e9, 1e9),
	       tb_create('named1', 1e9, 1e9);
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

# 1: a clean restart keeps the counters, and since when they count
take(10);
$node->safe_psql('postgres', "SELECT tb_acquire('mk:1'), tb_acquire('mk:1'), tb_acquire('k:1')");
is(counted('-infinity'), 'mem=10 tab=10 true', 'ten calls each are counted');
my $keys_sql = q{SELECT string_agg(name || '=' || granted || '@' || since, ' ' ORDER BY name)
	FROM tb_stats WHERE name IN ('mk:1', 'k:1')};
my $keys_before = $node->safe_psql('postgres', $keys_sql);
my $since_before = $node->safe_psql('postgres', "SELECT since FROM tb_stats WHERE name = 'tab'");
my $before = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
$node->restart;
is(counted('-infinity'), 'mem=10 tab=10 true', 'a clean restart keeps them');
is($node->safe_psql('postgres', "SELECT since FROM tb_stats WHERE name = 'tab'"), $since_before,
	'... and since when they count');
is($node->safe_psql('postgres', $keys_sql), $keys_before,
	'... keys of memory and table templates included');

# 2: a crash (a backend killed) starts them from zero, since it
take(7);
is(counted('-infinity'), 'mem=17 tab=17 true', 'counted on after the restart');
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

# 3: 200 keys of a table template and 75 of a memory one, in a hash of
# 100: the table keys' counters make room, the templates' and the named
# buckets' stay exact, and the memory keys keep theirs in their entries
take(5);
$node->safe_psql('postgres', q{
	SELECT count(*) FROM generate_series(1, 200) AS i,
	       LATERAL (SELECT tb_acquire('k:' || i), tb_acquire('k:' || i),
	                CASE WHEN i <= 75 THEN tb_acquire('mk:' || i) END) AS t
});
is($node->safe_psql('postgres', q{
	SELECT string_agg(template || '=' || (granted + denied), ' ' ORDER BY template)
	FROM tb_template_stats WHERE template IN ('k:*', 'mk:*')}),
	'k:*=400 mk:*=75', 'with the hash full, the templates count every call on their buckets');
is(counted($crash), 'mem=5 tab=5 true', '... and the named buckets keep theirs');
my $rows = $node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE granted + denied > 0) FROM tb_stats WHERE template = 'k:*'});
cmp_ok($rows, '<', 200, "only $rows of the 200 table template's keys keep counters of their own");
cmp_ok($rows, '>', 0, '... the ones used last');
is($node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE granted + denied = 1) FROM tb_stats WHERE template = 'mk:*'}),
	'75', 'every key of the memory template keeps its own');

# 4: eight sessions, 500 transactions each, each a grant on a random one of
# 2,000 keys of a memory template and of a table template, and on a named
# bucket: 4,000 of each, every one counted
my $script = $node->basedir . '/keys.sql';
open(my $fh, '>', $script) or die;
print $fh "\\set k random(1, 2000)\nSELECT tb_acquire('mk2:' || :k), tb_acquire('k2:' || :k), tb_acquire('named1');\n";
close($fh);
$node->command_ok(
	[ 'pgbench', '-n', '-c', '8', '-j', '2', '-t', '500', '-f', $script,
	  '-h', $node->host, '-p', $node->port, 'postgres' ],
	'eight sessions grant 4,000 times on 2,000 keys of two templates and on a named bucket');
is($node->safe_psql('postgres', q{
	SELECT string_agg(template || '=' || granted, ' ' ORDER BY template)
	FROM tb_template_stats WHERE template IN ('k2:*', 'mk2:*')}),
	'k2:*=4000 mk2:*=4000', '... every grant is counted in the templates, with the hash full');
is($node->safe_psql('postgres', "SELECT granted FROM tb_stats WHERE name = 'named1'"), '4000',
	'... and in the named bucket');
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
