# Memory buckets when saving their state fails, and when their extension
# or database goes:
#  - a clean shutdown whose save fails (its directory not writable), or a
#    state file removed before the next start, starts the buckets empty,
#    with a LOG line; only the first start with the library starts them
#    full
#  - a start that cannot write the marker of use refuses memory buckets
#    with 55000, saying why, rather than risk starting them full later
#  - DROP EXTENSION and DROP DATABASE free every entry of theirs, also
#    across a clean restart: the room is there for the next
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('memory_safety');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'tokenbucket'
tokenbucket.max_memory_buckets = 200
});
$node->start;
my $pg_stat = $node->data_dir . '/pg_stat';
ok(-e "$pg_stat/tokenbucket.used", 'the first start with the library leaves its marker');
$node->safe_psql('postgres', q{
	CREATE EXTENSION tokenbucket;
	SELECT tb_create('m', 100, 1, '1 hour', memory => true);
	SELECT tb_create('u:*', 100, 1, '1 hour', memory => true);
	SELECT tb_acquire('m', 100), tb_acquire('u:1', 100);
});
my $drained = q{SELECT tb_acquire('m') OR tb_acquire('u:1') OR tb_acquire('u:2', 100)};

# 1: the save at a clean shutdown fails: the next start finds no file, and
# the buckets start empty (u:2, never used, too)
chmod(0500, $pg_stat) or die "chmod: $!";
$node->stop;
chmod(0700, $pg_stat) or die "chmod: $!";
ok($node->log_contains('could not write file "pg_stat/tokenbucket.buckets.tmp"'),
	'a save that fails at shutdown says so in the log');
$node->start;
ok($node->log_contains('memory token buckets start empty'),
	'... the next start says the buckets start empty');
is($node->safe_psql('postgres', $drained), 'f', '... and no bucket grants, not even one never used');

# 2: a state file removed between a clean shutdown and the next start
$node->stop;
ok(-e "$pg_stat/tokenbucket.buckets", 'a clean shutdown saves the state');
unlink("$pg_stat/tokenbucket.buckets") or die "unlink: $!";
$node->start;
is($node->safe_psql('postgres', $drained), 'f', 'with the state file removed, the buckets start empty');

# 3: the marker of use cannot be written: memory buckets are refused
$node->stop;
unlink("$pg_stat/tokenbucket.used") or die "unlink: $!";
chmod(0500, $pg_stat) or die "chmod: $!";
$node->start;
my ($rc, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\nSELECT tb_acquire('m')");
like($err, qr/55000: memory token buckets cannot be used: file "pg_stat\/tokenbucket.used" could not be written/,
	'a start that cannot write the marker of use refuses memory buckets with 55000');
like($err, qr/HINT:  Make the directory pg_stat writable/, '... and says what to do');
$node->stop;
chmod(0700, $pg_stat) or die "chmod: $!";
$node->start;
is($node->safe_psql('postgres', "SELECT tb_reset('m'), tb_acquire('m')"), '|t',
	'... which, done, lets them be used again');

# 4: DROP EXTENSION frees its entries at once and for good: 150 named
# buckets, dropped with the extension, made again, and again after a
# restart, in a hash of 200
$node->safe_psql('postgres', 'CREATE DATABASE drop1');
my $make150 = q{SELECT count(tb_create('n' || i, 1, 1, memory => true)) FROM generate_series(1, 150) AS i};
$node->safe_psql('postgres', q{SELECT tb_drop('m'), tb_drop('u:*')});
$node->safe_psql('drop1', "CREATE EXTENSION tokenbucket; $make150");
$node->safe_psql('drop1', 'DROP EXTENSION tokenbucket');
is($node->safe_psql('drop1', "CREATE EXTENSION tokenbucket; $make150"), '150',
	'DROP EXTENSION frees its memory buckets: 150 more fit in a hash of 200');
$node->safe_psql('drop1', 'DROP EXTENSION tokenbucket');
$node->restart;
is($node->safe_psql('drop1', "CREATE EXTENSION tokenbucket; $make150"), '150',
	'... and they do not come back from the state file after a restart');

# 5: DROP DATABASE frees the entries of every installation in it
$node->safe_psql('postgres', 'CREATE DATABASE drop2');
$node->safe_psql('drop2', q{CREATE EXTENSION tokenbucket;
	SELECT count(tb_create('d' || i, 1, 1, memory => true)) FROM generate_series(1, 40) AS i});
$node->safe_psql('postgres', 'DROP DATABASE drop2');
is($node->safe_psql('drop1', q{SELECT count(tb_create('e' || i, 1, 1, memory => true))
	FROM generate_series(1, 45) AS i}), '45',
	'DROP DATABASE frees its memory buckets: 45 more fit beside the 150');
$node->stop;

done_testing();
