# Crash and replica: load, then an immediate shutdown and a SIGKILL of one
# busy backend; afterwards every bucket is there with a valid state, every
# grant a client saw committed is there, and no window of the hot bucket
# holds more than capacity + rate x w.  Then a streaming standby: tb_status
# reads work there, and taking tokens fails at once with 25006.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('primary');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf', "max_connections = 40\nrestart_after_crash = on\n");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION tokenbucket;
	SELECT tb_create('hot', 10, 200);
	SELECT tb_create('big', 1e12, 1e9);
	SELECT tb_create('user:*', 3, 50);
	CREATE TABLE grants (bucket text NOT NULL, t timestamptz NOT NULL);
	CREATE INDEX ON grants (bucket, t);
});

# Two workloads: grants from 'hot' (rate-limited) and from 'big' (always
# granted, so every transaction pgbench counts is one committed grant).
# Each grant records the moment it was decided, in its own transaction.
my $dir = PostgreSQL::Test::Utils::tempdir;
my %script = (hot => <<'SQL', big => <<'SQL', user => <<'SQL');
BEGIN;
SELECT tb_acquire('hot')::int AS granted \gset
\if :granted
INSERT INTO grants SELECT name, updated_at FROM tb_buckets WHERE name = 'hot';
\endif
END;
SQL
BEGIN;
SELECT tb_acquire('big');
INSERT INTO grants SELECT name, updated_at FROM tb_buckets WHERE name = 'big';
END;
SQL
\set u random(1, 20)
SELECT tb_acquire('user:' || :u);
SQL
for my $name (keys %script)
{
	open my $fh, '>', "$dir/$name.sql" or die;
	print $fh $script{$name};
	close $fh;
}

# start pgbench against the node for a few seconds; returns the harness
sub start_load
{
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'pgbench', '-n', '-c', '12', '-j', '2', '-T', '4',
		  '-f', "$dir/hot.sql\@4", '-f', "$dir/big.sql\@4", '-f', "$dir/user.sql\@2",
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
	is($node->safe_psql('postgres',
		"SELECT count(*) FROM tb_status WHERE name IN ('hot', 'big', 'user:*')"),
		'3', "$when: every bucket is there");
	is($node->safe_psql('postgres',
		"SELECT count(*) FROM tb_status WHERE NOT (tokens <= capacity)"),
		'0', "$when: no bucket holds more than its capacity");
	cmp_ok($node->safe_psql('postgres', "SELECT count(*) FROM grants WHERE bucket = 'big'"),
		'>=', $acked, "$when: all $acked grants seen committed are there");
	is($node->safe_psql('postgres', q{
		WITH windows(w) AS (VALUES (0), (0.01), (0.1), (0.5), (1), (2), (3600)),
		checked AS (
			SELECT (SELECT count(*) FROM grants g2 WHERE g2.bucket = 'hot'
			          AND g2.t BETWEEN g.t AND g.t + w.w * interval '1 second') AS taken,
			       10 + 200 * w.w AS allowed
			FROM grants g CROSS JOIN windows w WHERE g.bucket = 'hot')
		SELECT count(*) FILTER (WHERE taken > allowed) FROM checked}),
		'0', "$when: no window of the hot bucket over capacity + rate x w");
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
kill 'KILL', $victim if $victim ne '';
$acked = committed_big($load);
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
