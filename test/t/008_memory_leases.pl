# Memory limits across what only a server shows: without the library
# preloaded they cannot be made; a backend holding every slot killed with
# SIGKILL (the postmaster restarts the whole server) leaves every slot
# free; so does a clean restart; the leases the server keeps are bounded
# by tokenbucket.max_memory_leases; a prepared transaction cannot hold
# one; DROP EXTENSION takes them with it (and a rolled-back one does not).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('memory_leases');
$node->init;
$node->append_conf('postgresql.conf', "restart_after_crash = on\nmax_prepared_transactions = 2\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION tokenbucket');

# 1: not preloaded
my ($rc, $out, $err) = $node->psql('postgres',
	"SELECT tb_create_limit('mc', 3, memory => true)", extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/55000: memory limits need tokenbucket in shared_preload_libraries/,
	'without the library preloaded, a memory limit is refused (55000)');

$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'tokenbucket'\ntokenbucket.max_memory_leases = 16\n");
$node->restart;
$node->safe_psql('postgres', q{
	SELECT tb_create_limit('mc', 3, memory => true);
	SELECT tb_create_limit('mc:*', 2, memory => true);
});

# 2: a holder of every slot, killed with SIGKILL in a statement
sub start_holder
{
	my ($sql) = @_;
	my ($hout, $herr) = ('', '');
	return IPC::Run::start(
		[ 'psql', '-X', '-A', '-t', '-d', $node->connstr('postgres'),
		  '-c', $sql, '-c', 'SELECT pg_sleep(600)' ],
		'>', \$hout, '2>', \$herr);
}
my $holder = start_holder("SELECT tb_lease('mc', 3) < 0, tb_lease('mc:1', 2) < 0");
$node->poll_query_until('postgres',
	"SELECT sum(in_flight) = 5 FROM tb_status WHERE name IN ('mc', 'mc:1')")
  or die 'the holder never held its slots';
is($node->safe_psql('postgres', "SELECT tb_lease('mc') IS NULL"), 't',
	'every slot held: a lease is refused');
my $pid = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(600)'");
kill 'KILL', $pid;
IPC::Run::finish($holder);
$node->poll_query_until('postgres', 'SELECT true')
  or die 'the server did not come back';
like(slurp_file($node->logfile), qr/\(PID $pid\) was terminated by signal 9/,
	'the kill crashed the server, which restarted');
is($node->safe_psql('postgres',
	"SELECT string_agg(name || '=' || in_flight || ',' || memory, ' ' ORDER BY name) FROM tb_status"),
	'mc=0,true mc:*=0,true', 'after the crash no slot is held, and the limits are there');
is($node->safe_psql('postgres',
	"SELECT tb_lease('mc', 3) IS NOT NULL AND tb_lease('mc:1', 2) IS NOT NULL"),
	't', 'after the crash every slot can be leased at once');

# 3: a clean restart with a holder
$holder = start_holder("SELECT tb_lease('mc', 3) < 0");
$node->poll_query_until('postgres', "SELECT in_flight = 3 FROM tb_status WHERE name = 'mc'")
  or die 'the holder never held its slots';
$node->restart;
IPC::Run::finish($holder);
is($node->safe_psql('postgres',
	"SELECT in_flight FROM tb_status WHERE name = 'mc'"), '0',
	'after a clean restart no slot is held');

# 4: tokenbucket.max_memory_leases
$node->safe_psql('postgres', "SELECT tb_create_limit('many', 100, memory => true)");
($rc, $out, $err) = $node->psql('postgres', q{
	SELECT count(tb_lease('many')) FROM generate_series(1, 16);
	SELECT tb_lease('many');
}, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($out, qr/^16$/m, 'tokenbucket.max_memory_leases leases are held at once');
like($err, qr/53200: no room for another memory lease.*HINT:  Raise tokenbucket.max_memory_leases/s,
	'one more is refused with 53200, naming the setting');
is($node->safe_psql('postgres',
	"SELECT tb_lease('many') IS NOT NULL"), 't',
	'the session gone, its leases are free again');

# 5: PREPARE TRANSACTION
($rc, $out, $err) = $node->psql('postgres', q{
	BEGIN; SELECT tb_lease('mc', 1, 'transaction'); PREPARE TRANSACTION 'p';
}, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/0A000: cannot PREPARE a transaction that used tokenbucket's shared memory\n.*Its changes to memory limits' leases/,
	'a transaction holding a memory lease cannot be prepared (0A000)');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_prepared_xacts"), '0',
	'and nothing was prepared');

# 6: DROP EXTENSION, rolled back, then committed, with a session holding a lease
$holder = start_holder("SELECT tb_lease('mc', 3) < 0");
$node->poll_query_until('postgres', "SELECT in_flight = 3 FROM tb_status WHERE name = 'mc'")
  or die 'the holder never held its slots';
$node->safe_psql('postgres', 'BEGIN; DROP EXTENSION tokenbucket; ROLLBACK;');
is($node->safe_psql('postgres', "SELECT in_flight FROM tb_status WHERE name = 'mc'"), '3',
	'a DROP EXTENSION rolled back leaves the leases held');
$node->safe_psql('postgres', q{
	DROP EXTENSION tokenbucket;
	CREATE EXTENSION tokenbucket;
	SELECT tb_create_limit('mc', 3, memory => true);
});
is($node->safe_psql('postgres', "SELECT tb_lease('mc', 3) IS NOT NULL"), 't',
	'after DROP EXTENSION, a new installation has every slot of the same name');
$node->stop;
IPC::Run::finish($holder);
done_testing();
