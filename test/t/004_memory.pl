# Memory buckets across restarts, crashes, a full hash, a standby and a
# server without the library preloaded:
#  - a clean restart keeps every memory bucket exactly (the state file);
#    a corrupt file, or one left behind by a crash, is ignored with a LOG
#    line and the buckets start empty;
#  - a load of 16 sessions on memory buckets, then an immediate shutdown
#    and a SIGKILL of a busy backend: no window of any bucket holds more
#    than capacity + rate x w, and every bucket is empty at the restart;
#  - a full hash reuses full idle buckets, and fails with 53200 when none
#    is, making nothing;
#  - a standby refuses memory buckets with 25006, and a promoted standby
#    starts them empty;
#  - without shared_preload_libraries, table buckets work and memory ones
#    fail with 55000 and a hint; a bad tokenbucket.max_memory_buckets is
#    refused with a log line, and the default used.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use File::Basename qw(dirname);
use Time::HiRes qw(time);

my $load_dir = dirname(__FILE__) . '/../load';

my $node = PostgreSQL::Test::Cluster->new('memory');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'tokenbucket'
tokenbucket.max_memory_buckets = 200
max_connections = 40
restart_after_crash = on
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION tokenbucket;
	-- as in test/load: a grant decided in [t0, t]
	CREATE TABLE grants (bucket text NOT NULL, cost float8 NOT NULL, t0 timestamptz NOT NULL,
	                     t timestamptz NOT NULL, left_after float8);
	CREATE INDEX ON grants (bucket, t0);
	CREATE FUNCTION record_between(bucket text, cost float8, t0 timestamptz) RETURNS void
		LANGUAGE sql AS 'INSERT INTO grants VALUES (bucket, cost, t0, clock_timestamp())';
	SELECT tb_create('mhot', 200, 200, memory => true);
	SELECT tb_create('mcold', 5, 2, memory => true);
	SELECT tb_create('mu:*', 3, 1, memory => true);
});

# every memory bucket's raw state, one line each
my $state_sql = q{SELECT string_agg(concat_ws(' ', name, capacity, refill_rate, deficit,
	updated_at, paused_until, template), E'\n' ORDER BY name) FROM tb_memory_buckets()};

# every memory bucket empty at the moment the server came back ("since")
sub check_empty
{
	my ($when, $since) = @_;
	is($node->safe_psql('postgres', qq{
		SELECT tb_memory_empty_at() >= '$since'::timestamptz
		   AND bool_and(tokens <= refill_rate
		       * extract(epoch FROM clock_timestamp() - tb_memory_empty_at()) + 1e-9)
		FROM tb_status WHERE memory AND NOT is_template}),
		't', "$when: every memory bucket was empty when the server came back");
}

# 1: a clean restart keeps the state exactly, through the state file
$node->safe_psql('postgres', q{
	SELECT tb_acquire('mcold', 3), tb_acquire('mu:1', 2), tb_settle('mu:2', 0, 5),
	       tb_pause('mhot', interval '1 hour');
});
my $before = $node->safe_psql('postgres', $state_sql);
my $empty_before = $node->safe_psql('postgres', 'SELECT tb_memory_empty_at()');
$node->restart;
is($node->safe_psql('postgres', $state_sql), $before,
	'a clean restart keeps every memory bucket exactly: tokens, debt, pause, template');
is($node->safe_psql('postgres', 'SELECT tb_memory_empty_at()'), $empty_before,
	'... and when a bucket without an entry was empty');
my $file = $node->data_dir . '/pg_stat/tokenbucket.buckets';
ok(!-e $file, 'the state file is read and removed at start');

# 2: a corrupt file is ignored: the buckets start empty
$node->stop;
ok(-e $file, 'a clean shutdown writes the state file');
{
	open(my $fh, '+<', $file) or die "open $file: $!";
	binmode $fh;
	seek($fh, 40, 0);
	print $fh "\xff\xff\xff\xff";
	close($fh);
}
my $started = time;
$node->start;
ok($node->log_contains('ignoring file "pg_stat/tokenbucket.buckets"'),
	'a corrupt state file is ignored with a LOG line');
is($node->safe_psql('postgres', 'SELECT count(*) FROM tb_memory_buckets()'), '0',
	'... no bucket comes back from it');
check_empty('after a corrupt state file',
	$node->safe_psql('postgres', "SELECT to_timestamp($started)"));

# 3: a file left behind by a crash is not trusted either
$node->safe_psql('postgres', "SELECT tb_acquire('mcold')");
$node->stop;
my $saved = slurp_file($file);
$node->start;
$node->stop('immediate');
{
	open(my $fh, '>', $file) or die "open $file: $!";
	binmode $fh;
	print $fh $saved;
	close($fh);
}
$node->start;
ok($node->log_contains('the server did not shut down cleanly since it was written'),
	'a state file older than a crash is ignored with a LOG line');
is($node->safe_psql('postgres', 'SELECT count(*) FROM tb_memory_buckets()'), '0',
	'... and the buckets start empty');
$node->safe_psql('postgres', q{SELECT tb_reset('mhot'), tb_reset('mcold')});

# 4: crashes under load.  Each grant is logged with the moments just
# before and just after it, in its transaction; a grant lost in a crash was
# never committed.
my $dir = $node->basedir;
for my $script (
	[ 'hot', q{SELECT CASE WHEN tb_acquire('mhot') THEN record_between('mhot', 1, t0) END
FROM (SELECT clock_timestamp() AS t0) AS before;} ],
	[ 'cold', q{\set c random(1, 3)
BEGIN;
SELECT CASE WHEN tb_acquire('mcold', :c) THEN record_between('mcold', :c, t0) END
FROM (SELECT clock_timestamp() AS t0) AS before;
COMMIT;} ],
	[ 'user', q{\set u random(1, 20)
SELECT CASE WHEN tb_acquire('mu:' || :u) THEN record_between('mu:' || :u, 1, t0) END
FROM (SELECT clock_timestamp() AS t0) AS before;} ])
{
	open(my $fh, '>', "$dir/$script->[0].sql") or die;
	print $fh $script->[1], "\n";
	close($fh);
}

sub start_load
{
	my ($out, $err) = ('', '');
	return IPC::Run::start(
		[ 'pgbench', '-n', '-c', '16', '-j', '2', '-T', '4',
		  '-f', "$dir/hot.sql\@4", '-f', "$dir/cold.sql\@2", '-f', "$dir/user.sql\@2",
		  '-h', $node->host, '-p', $node->port, 'postgres' ],
		'>', \$out, '2>', \$err);
}

# every window of every bucket against capacity + rate x w, as the stress
# test checks it (a bucket full again after a crash would exceed it by its
# whole capacity)
my $windows_sql = slurp_file("$load_dir/windows.sql");

my $load = start_load();
sleep 2;
my $crash = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
$node->stop('immediate');
IPC::Run::finish($load);
$node->start;
check_empty('after an immediate shutdown', $crash);
$load = start_load();
my $victim = '';
for (1 .. 100)
{
	# one of the load's sessions, whatever it is doing this instant: a
	# memory grant is too quick to be caught "active" by a poll on a busy
	# machine, and every session of the load is in the middle of its loop
	$victim = $node->safe_psql('postgres', q{
		SELECT pid FROM pg_stat_activity
		WHERE backend_type = 'client backend' AND query LIKE '%tb_acquire%'
		  AND pid <> pg_backend_pid() LIMIT 1});
	last if $victim ne '';
	select(undef, undef, undef, 0.02);
}
ok($victim ne '', 'found a backend of the load, busy with tb_acquire');
sleep 1;
$crash = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
kill 'KILL', $victim if $victim ne '';
IPC::Run::finish($load);
$node->poll_query_until('postgres', 'SELECT true') or die 'server did not come back';
check_empty('after SIGKILL of a busy backend', $crash);
# a last load after the restart, so that windows span it
IPC::Run::finish(start_load());
cmp_ok($node->safe_psql('postgres', 'SELECT count(*) FROM grants'), '>', 1000,
	'the load was granted tokens');
like($node->safe_psql('postgres', $windows_sql), qr/^[1-9][0-9]*\|0$/,
	'across both crashes, no window of any memory bucket over capacity + rate x w');

# 5: the hash holds 200: a tenth (20) is kept for named buckets, and one
# template's keys take at most a quarter (50).  Keys in debt or paused are
# never reused: with all of a template's so, its next key fails, and
# nothing is made; other templates and named buckets are not touched.
$node->safe_psql('postgres', q{
	SELECT count(tb_pause(name, interval '1 hour')) FROM tb_memory_buckets();
	SELECT tb_create('p:*', 1, 1, '1 hour', memory => true);
	SELECT tb_create('q:*', 1, 1, '1 hour', memory => true);
	SELECT count(tb_settle('p:' || i, 0, 2)) FROM generate_series(1, 50) AS i;
});
my ($rc, $out, $err) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT tb_acquire('p:new')");
like($err, qr/53200: no room for memory token bucket "p:new"/,
	'a template whose 50 keys are all in debt fails its next key with 53200');
like($err, qr/HINT:  Raise tokenbucket.max_template_keys/, '... with a hint naming the setting');
is($node->safe_psql('postgres', "SELECT count(*) FROM tb_memory_buckets() WHERE name = 'p:new'"),
	'0', '... and makes nothing');
is($node->safe_psql('postgres', "SELECT count(tb_acquire('q:' || i)) FROM generate_series(1, 40) AS i"),
	'40', 'another template makes its keys meanwhile');
$node->safe_psql('postgres', "SELECT tb_create('named_after_flood', 1, 1, memory => true)");
is($node->safe_psql('postgres', "SELECT tb_acquire('named_after_flood')"), 't',
	'... and so does a new named bucket');
# full idle keys of the template make room, found by the clock
$node->safe_psql('postgres', q{SELECT count(tb_reset(name)) FROM tb_memory_buckets() WHERE name LIKE 'p:%'});
$node->safe_psql('postgres', "SELECT tb_acquire('p:new')");
is($node->safe_psql('postgres', "SELECT count(*) FROM tb_memory_buckets() WHERE name = 'p:new'"), '1',
	'full idle keys make room for new ones');
is($node->safe_psql('postgres', "SELECT count(*) FROM tb_memory_buckets() WHERE name LIKE 'p:%'"), '50',
	'... within the template\'s share');
cmp_ok($node->safe_psql('postgres', 'SELECT count(*) FROM tb_memory_buckets()'), '<=', 200,
	'... and the size set');
# the share is a setting a reload changes
$node->append_conf('postgresql.conf', "tokenbucket.max_template_keys = 60\n");
$node->reload;
is($node->safe_psql('postgres', "SELECT count(tb_settle('p:x' || i, 0, 2)) FROM generate_series(1, 10) AS i"),
	'10', 'tokenbucket.max_template_keys = 60, reloaded, gives the template 10 more keys');

# 6: a standby refuses memory buckets at once; promoted, it starts them empty
$node->safe_psql('postgres', q{SELECT tb_reset('mcold'), tb_acquire('mcold'), tb_create('tab', 5, 1)});
$node->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('memory_standby');
$standby->init_from_backup($node, 'base', has_streaming => 1);
$standby->start;
for my $call ("tb_acquire('mcold')", "tb_peek('mcold')", "tb_acquire('mu:5')", "tb_try('mhot')")
{
	($rc, $out, $err) = $standby->psql('postgres', "\\set VERBOSITY verbose\nSELECT $call");
	like($err, qr/25006: cannot (use memory token buckets|take tokens or change token buckets) on a standby/,
		"on the standby, $call fails with 25006");
}
is($standby->safe_psql('postgres', "SELECT granted FROM tb_peek('tab')"), 't',
	'tb_peek of a table bucket still works on the standby');
is($standby->safe_psql('postgres', "SELECT count(*) FROM tb_status WHERE memory AND tokens IS NULL"),
	$standby->safe_psql('postgres', "SELECT count(*) FROM tb_buckets WHERE memory AND name NOT LIKE '%*'"),
	'tb_status lists the memory buckets there, with no tokens');
my $promoted = $standby->safe_psql('postgres', 'SELECT clock_timestamp()');
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()');
is($standby->safe_psql('postgres', "SELECT tb_acquire('p:1')"), 'f',
	'promoted, the standby does not start the primary\'s buckets full');
is($standby->safe_psql('postgres', qq{
	SELECT tb_memory_empty_at() >= '$promoted'::timestamptz}), 't',
	'... they were empty when it was promoted');
$standby->stop;
$node->stop;

# 7: without the library preloaded
my $plain = PostgreSQL::Test::Cluster->new('no_preload');
$plain->init;
$plain->start;
$plain->safe_psql('postgres', q{
	CREATE EXTENSION tokenbucket;
	SELECT tb_create('t', 2, 1);
	INSERT INTO tb_buckets (name, capacity, refill_rate, memory) VALUES ('m', 2, 1, true);
});
is($plain->safe_psql('postgres', "SELECT tb_acquire('t')"), 't', 'without preloading, table buckets work');
for my $call ("tb_create('m2', 1, 1, memory => true)", "tb_acquire('m')", "tb_refund('m', 1)")
{
	($rc, $out, $err) = $plain->psql('postgres', "\\set VERBOSITY verbose\nSELECT $call");
	like($err, qr/55000: memory token buckets need tokenbucket in shared_preload_libraries/,
		"without preloading, $call fails with 55000");
}
like($err, qr/HINT:  Add shared_preload_libraries = 'tokenbucket' to postgresql.conf/,
	'... and the hint says what to put in postgresql.conf');
$plain->stop;

# 8: a bad size is refused, saying why, and the default is used
$plain->append_conf('postgresql.conf', "shared_preload_libraries = 'tokenbucket'\ntokenbucket.max_memory_buckets = 10\n");
$plain->start;
ok($plain->log_contains('10 is outside the valid range for parameter "tokenbucket.max_memory_buckets"'),
	'tokenbucket.max_memory_buckets = 10 is refused, and the log says why');
is($plain->safe_psql('postgres', 'SHOW tokenbucket.max_memory_buckets'), '10000',
	'... the default is used instead');
is($plain->safe_psql('postgres', "SELECT tb_acquire('m')"), 't',
	'... and the memory bucket made without the library preloaded works now');
$plain->stop;

done_testing();
