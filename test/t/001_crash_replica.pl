# Crash and replica: the mixed load of test/load (as test/stress.sh runs
# it), then an immediate shutdown and a SIGKILL of one busy backend;
# afterwards every bucket is there with a valid state, every grant a client
# saw committed is there, and no window of any bucket holds more than
# capacity + rate x w.  Then a streaming standby: tb_status reads work
# there, and taking tokens fails at once with 25006.
use strict;
use warnings;
use File::Basename qw(dirname);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $load_dir = dirname(__FILE__) . '/../load';

my $node = PostgreSQL::Test::Cluster->new('primary');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf',
	"max_connections = 40\nrestart_after_crash = on\nshared_preload_libraries = 'tokenbucket'\n");
$node->start;
is($node->safe_psql('postgres', slurp_file("$load_dir/setup.sql")), '18',
	'the mixed load\'s 18 buckets made');

# start pgbench against the node for a few seconds; returns the harness
sub start_load
{
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'pgbench', '-n', '-c', '16', '-j', '2', '-T', '4',
		  (map { ('-f', "$load_dir/$_") }
			qw(hot.sql@4 cold.sql@3 user.sql@2 pair.sql@2 wait.sql@1 big.sql@2 mhot.sql@2 muser.sql@2)),
		  '-h', $node->host, '-p', $node->port, 'postgres' ],
		'>', \$out, '2>', \$err);
	return { h => $h, out => \$out, err => \$err };
}

# the number of transactions pgbench saw committed for script "big"
sub committed_big
{
	my ($load) = @_;
	IPC::Run::finish($load->{h});
	my $all = ${ $load->{out} } . ${ $load->{err} };
	return $1 if $all =~ /big\.sql\s+- weight: \d+.*?- (\d+) transactions/s;
	diag("pgbench said:\n$all");
	return 0;
}

sub check_state
{
	my ($when, $acked) = @_;
	is($node->safe_psql('postgres', 'SELECT count(*) FROM tb_buckets WHERE template IS NULL'),
		'18', "$when: every bucket is there");
	is($node->safe_psql('postgres',
		'SELECT count(*) FROM tb_status WHERE NOT (tokens <= capacity)'),
		'0', "$when: no bucket holds more than its capacity");
	cmp_ok($node->safe_psql('postgres', "SELECT count(*) FROM grants WHERE bucket = 'big'"),
		'>=', $acked, "$when: all $acked grants seen committed are there");
	like($node->safe_psql('postgres', slurp_file("$load_dir/windows.sql")),
		qr/^[1-9][0-9]*\|0$/, "$when: no window of any bucket over capacity + rate x w");
}

# 1: immediate shutdown under load
my $load = start_load();
sleep 2;
$node->stop('immediate');
my $acked = committed_big($load);
$node->start;
cmp_ok($acked, '>', 0, 'pgbench committed grants before the crash');
check_state('after an immediate shutdown', $acked);

# 2: SIGKILL of one busy backend (the postmaster restarts them all)
my $before = $node->safe_psql('postgres', "SELECT count(*) FROM grants WHERE bucket = 'big'");
$load = start_load();
my $victim = '';
for (1 .. 100)
{
	$victim = $node->safe_psql('postgres', q{
		SELECT pid FROM pg_stat_activity
		WHERE backend_type = 'client backend' AND state = 'active'
		  AND query LIKE '%tb_acquire%' AND pid <> pg_backend_pid() LIMIT 1});
	last if $victim ne '';
	select(undef, undef, undef, 0.02);
}
ok($victim ne '', 'found a backend busy with tb_acquire');
my $log_offset = -s $node->logfile;
kill 'KILL', $victim if $victim ne '';
$acked = committed_big($load);
# the server restarts every backend; a connection made before it has
# begun (pgbench may end first) would be cut by it: wait for it to begin
$node->wait_for_log(qr/all server processes terminated; reinitializing/, $log_offset);
$node->poll_query_until('postgres', 'SELECT true') or die 'server did not come back';
check_state('after SIGKILL of a busy backend', $before + $acked);
ok($node->log_contains('terminated by signal 9'), 'the server log shows the backend killed');

# 3: a streaming standby
$node->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'base', has_streaming => 1);
$standby->start;
$node->safe_psql('postgres', "SELECT tb_create('after_backup', 5, 1)");
$node->wait_for_catchup($standby);
is($standby->safe_psql('postgres', 'SELECT count(*) FROM tb_status'),
	$node->safe_psql('postgres', 'SELECT count(*) FROM tb_status'),
	'tb_status reads on the standby, with the primary\'s buckets');
for my $call ("tb_acquire('big')", "tb_acquire_wait('hot')", "tb_try('big')",
	"tb_acquire_all('{hot,big}')", "tb_refund('big', 1)", "tb_create('x', 1, 1)")
{
	my $start = time;
	my ($rc, $out, $err) = $standby->psql('postgres',
		"\\set VERBOSITY verbose\nSELECT $call");
	my $took = time - $start;
	like($err, qr/25006: cannot take tokens or change token buckets on a standby/,
		"on the standby, $call fails with 25006");
	cmp_ok($took, '<', 2, "... at once (${\ sprintf('%.3f', $took)} s), without hanging");
}
like(($standby->psql('postgres', 'SELECT tb_acquire(\'big\')'))[2],
	qr/HINT:  Call the tb_\* functions on the primary/, 'the hint says to call the primary');

$standby->stop;
$node->stop;
done_testing();
