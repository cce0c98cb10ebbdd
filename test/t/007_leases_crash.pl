# Leases across a crash: a backend holding every slot of a limit is killed
# with SIGKILL (the postmaster restarts the whole server); afterwards every
# slot is free at once, although the rows still name the dead leases.
# Table limits need no shared_preload_libraries: this server has none.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('leases');
$node->init;
$node->append_conf('postgresql.conf', "restart_after_crash = on\n");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION tokenbucket;
	SELECT tb_create_limit('crash', 3);
	SELECT tb_create_limit('crash:*', 2);
});

# a holder: leases every slot (two limits), then sleeps in a statement
my ($out, $err) = ('', '');
my $holder = IPC::Run::start(
	[ 'psql', '-X', '-A', '-t', '-d', $node->connstr('postgres'),
	  '-c', "SELECT tb_lease('crash', 3) IS NOT NULL, tb_lease('crash:1', 2) IS NOT NULL",
	  '-c', 'SELECT pg_sleep(600)' ],
	'>', \$out, '2>', \$err);
$node->poll_query_until('postgres',
	"SELECT sum(in_flight) = 5 FROM tb_status WHERE name IN ('crash', 'crash:1')")
  or die 'the holder never held its slots';
is($node->safe_psql('postgres', "SELECT tb_lease('crash') IS NULL"), 't',
	'every slot held: a lease is refused');

my $pid = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(600)'");
ok($pid =~ /^\d+$/, 'the holder is in its statement');
kill 'KILL', $pid;
IPC::Run::finish($holder);

# the server restarts: every slot is free, no lease is listed
$node->poll_query_until('postgres', 'SELECT true')
  or die 'the server did not come back';
# "server process (PID n)" before 18, "client backend (PID n)" from 18 on
like(slurp_file($node->logfile), qr/\(PID $pid\) was terminated by signal 9/,
	'the kill crashed the server, which restarted');
is($node->safe_psql('postgres',
	"SELECT count(*) FROM tb_lease_slots WHERE lease IS NOT NULL"), '5',
	'the rows still name the dead leases');
is($node->safe_psql('postgres',
	"SELECT string_agg(name || '=' || in_flight, ',' ORDER BY name) FROM tb_status"),
	'crash=0,crash:*=0,crash:1=0', 'after the restart no slot is held');
is($node->safe_psql('postgres', 'SELECT count(*) FROM tb_leases'), '0',
	'after the restart tb_leases lists nothing');
is($node->safe_psql('postgres',
	"SELECT tb_lease('crash', 3) IS NOT NULL AND tb_lease('crash:1', 2) IS NOT NULL"),
	't', 'after the restart every slot can be leased at once');

$node->stop;
done_testing();
