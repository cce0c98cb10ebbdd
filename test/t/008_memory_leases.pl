# Memory limits across what only a server shows: without the library
# preloaded they cannot be made; a backend holding every slot killed with
# SIGKILL (the postmaster restarts the whole server) leaves every slot
# free; so does a clean restart; the leases the server keeps are bounded
# by tokenbucket.max_memory_leases; a prepared transaction cannot hold
# one; DROP EXTENSION takes them with it (and a rolled-back one does not);
# names made from templates take at most their shares of the leases, so one
# session flooding a template leaves room for other sessions, other
# templates and named limits, in every database.
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

# 7: one session flooding a memory limit template leaves room for the rest.
# With max_memory_leases = 16: a template's names hold at most 4 leases,
# one session 2 of them, all templates' names 14 (2 kept for named limits).
$node->safe_psql('postgres', q{
	CREATE DATABASE other;
	SELECT tb_create_limit('mn', 16, memory => true);
	SELECT tb_create_limit('mt:*', 1, memory => true);
	SELECT tb_create_limit('mu:*', 1, memory => true);
	SELECT tb_create_limit('mv:*', 1, memory => true);
	SELECT tb_create_limit('mw:*', 1, memory => true);
	SELECT tb_create_limit('mx:*', 1, memory => true);
});
$node->safe_psql('other', q{
	CREATE EXTENSION tokenbucket;
	SELECT tb_create_limit('mn', 16, memory => true);
});
# a session running each of @sql in turn (errors and all), then sleeping,
# as application_name $app; its stderr in $$err, once read_errors() read it
my @sessions;
sub start_session
{
	my ($app, $err, @sql) = @_;
	my $out = '';
	push @sessions, IPC::Run::start(
		[ 'psql', '-X', '-A', '-t', '-v', 'VERBOSITY=verbose',
		  '-d', $node->connstr('postgres') . " application_name=$app",
		  (map { ('-c', $_) } @sql), '-c', 'SELECT pg_sleep(600)' ],
		'>', \$out, '2>', $err);
	$node->poll_query_until('postgres', qq{
		SELECT count(*) = 1 FROM pg_stat_activity
		WHERE application_name = '$app' AND query = 'SELECT pg_sleep(600)'})
	  or die "session $app never got to its sleep";
}
# read what the sessions wrote so far
sub read_errors
{
	$_->pump_nb for @sessions;
}
# what $sql says in $db, or its error (in verbose form)
sub try_sql
{
	my ($db, $sql) = @_;
	my ($rc, $out, $err) = $node->psql($db, $sql,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return $rc == 0 ? $out : $err;
}
# how many leases the names of each template hold, and named 'mn'
sub held
{
	return $node->safe_psql('postgres', q{
		SELECT string_agg(t || '=' || n, ' ' ORDER BY t) FROM (
			SELECT left(name, 2) AS t, count(*) AS n FROM tb_leases
			WHERE name ~ '^m[n-x]' GROUP BY 1) c});
}
my $flood_err = '';
start_session('flood', \$flood_err, map {
	'SELECT count(tb_lease(\'mt:\' || g)) FROM generate_series(' . (2 * $_ - 1) . ', ' . (2 * $_) . ') g'
} 1 .. 10);
read_errors();
is(held(), 'mt=2', 'a session flooding a template holds 2 leases of its names (an eighth of the pool)');
like($flood_err,
	qr/ERROR:  53200: no room for another lease of memory limit "mt:3"\nDETAIL:  This session holds 2 leases of names made from memory limit templates, the most one session may: half a template's share of tokenbucket.max_memory_leases.\nHINT:  Release leases this session holds, or raise tokenbucket.max_memory_leases and restart the server./,
	'its next one is refused with 53200, saying its session share is full');
my $refused = () = $flood_err =~ /ERROR:  53200/g;
is($refused, 9, 'and so is every statement after its first');
is(try_sql('postgres', q{
	SELECT tb_lease('mt:a') IS NOT NULL AND tb_lease('mt:b') IS NOT NULL}), 't',
	'another session leases names of the same template');
my ($err2, $err3) = ('', '');
start_session('hold2', \$err2, q{SELECT tb_lease('mt:a'), tb_lease('mt:b')});
is(held(), 'mt=4', 'two sessions hold the template share: 4 leases');
like(try_sql('postgres', "SELECT tb_lease('mt:c')"),
	qr/ERROR:  53200: no room for another lease of memory limit "mt:c"\nDETAIL:  Names made from memory limit template "mt:\*" hold 4 leases, its whole share: a quarter of tokenbucket.max_memory_leases.\nHINT:  Wait for leases of its names to be released, or raise tokenbucket.max_memory_leases and restart the server./,
	'a third session is refused a name of that template with 53200, saying its share is full');
is(try_sql('postgres', q{
	SELECT tb_lease('mu:1') IS NOT NULL AND tb_lease('mn') IS NOT NULL}), 't',
	'another template and a named limit still lease');
my @errs = map { '' } 1 .. 5;
start_session('hold3', \$errs[0], q{SELECT tb_lease('mu:1'), tb_lease('mu:2')});
start_session('hold4', \$errs[1], q{SELECT tb_lease('mu:3'), tb_lease('mu:4')});
start_session('hold5', \$errs[2], q{SELECT tb_lease('mv:1'), tb_lease('mv:2')});
start_session('hold6', \$errs[3], q{SELECT tb_lease('mv:3'), tb_lease('mv:4')});
start_session('hold7', \$errs[4], q{SELECT tb_lease('mw:1'), tb_lease('mw:2')});
read_errors();
is(join('', $err2, @errs), '', 'six more sessions lease two names each');
is(held(), 'mt=4 mu=4 mv=4 mw=2', 'templates\' names hold 14 of the 16 leases');
like(try_sql('postgres', "SELECT tb_lease('mx:1')"),
	qr/ERROR:  53200: no room for another lease of memory limit "mx:1"\nDETAIL:  Names made from memory limit templates hold 14 leases, all they may: the last tenth of tokenbucket.max_memory_leases is kept for named limits.\nHINT:  Wait for leases of names made from templates to be released, or raise tokenbucket.max_memory_leases and restart the server./,
	'one more of any template is refused with 53200, saying all templates\' share is full');
is(try_sql('postgres', q{
	SELECT tb_lease('mn') IS NOT NULL AND tb_lease('mn') IS NOT NULL}), 't',
	'a named limit still gets the last two leases');
is(try_sql('other', q{
	SELECT tb_lease('mn') IS NOT NULL AND tb_lease('mn') IS NOT NULL}), 't',
	'and so does a named limit in another database');
$node->safe_psql('postgres', q{
	SELECT pg_terminate_backend(pid) FROM pg_stat_activity
	WHERE application_name IN ('flood', 'hold2')});
$node->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name IN ('flood', 'hold2')})
  or die 'the sessions never ended';
is(held(), 'mu=4 mv=4 mw=2', 'the flooding session gone, its template\'s share is free');
is(try_sql('postgres', q{
	SELECT tb_lease('mt:1') IS NOT NULL AND tb_lease('mt:2') IS NOT NULL}), 't',
	'and its names lease again');

$node->stop;
IPC::Run::finish($_) for ($holder, @sessions);
done_testing();
