# Repair on update: a pause that 1.1 stored past the last timestamptz
# (possible through tb_pause with a duration ending a few days after 294276
# AD) made pg_dump's output fail to restore.  Updating to 1.2 turns it into
# infinity, and the dump then restores every bucket.  No SQL expression can
# make such a value, so a test-only C function (raw_timestamptz.c, built
# here) writes it, as 1.1's C code did.
use strict;
use warnings;
use File::Basename;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $pg_config = $ENV{PG_CONFIG} // 'pg_config';
my $includes = `$pg_config --includedir-server`;
chomp $includes;
my $lib = PostgreSQL::Test::Utils::tempdir() . '/raw_timestamptz.so';
system('gcc', '-shared', '-fPIC', '-O2', "-I$includes", '-o', $lib,
	dirname(__FILE__) . '/raw_timestamptz.c') == 0
  or BAIL_OUT('could not build raw_timestamptz.c');

my $node = PostgreSQL::Test::Cluster->new('repair');
$node->init;
$node->start;

# a 1.1 database holding the value 1.1 could write: three days past the end
$node->safe_psql('postgres', qq{
	CREATE EXTENSION tokenbucket VERSION '1.1';
	INSERT INTO tb_buckets (name, capacity, refill_rate) VALUES ('ok', 1, 1), ('broken', 1, 1);
	CREATE FUNCTION pg_temp.raw_timestamptz(bigint) RETURNS timestamptz
		AS '$lib', 'raw_timestamptz' LANGUAGE C STRICT;
	UPDATE tb_buckets SET paused_until = pg_temp.raw_timestamptz(
		(SELECT (extract(epoch FROM '294276-12-31 23:59:59.999999+00'::timestamptz)
		         - extract(epoch FROM '2000-01-01 00:00:00+00'::timestamptz)) * 1000000 + 1
		        + 3 * 86400000000)::bigint)
	WHERE name = 'broken';
});

# the dump of that database does not restore
my $dump = $node->basedir . '/broken.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-d', $node->connstr('postgres'), '-f', $dump ],
	'pg_dump of the 1.1 database');
$node->safe_psql('postgres', 'CREATE DATABASE before_repair');
# (pg_restore reports the error and goes on; what it restored is what counts)
$node->run_log([ 'pg_restore', '-d', $node->connstr('before_repair'), $dump ]);
is($node->safe_psql('before_repair', 'SELECT count(*) FROM tb_buckets'), '0',
	'before the repair, restoring its dump restores no bucket (timestamp out of range)');

# the update repairs it, and the dump then restores every bucket
$node->safe_psql('postgres', "ALTER EXTENSION tokenbucket UPDATE TO '1.2'");
is($node->safe_psql('postgres', "SELECT paused_until FROM tb_buckets WHERE name = 'broken'"),
	'infinity', 'the update turns the pause past the last timestamptz into infinity');
is($node->safe_psql('postgres', "SELECT paused_until FROM tb_buckets WHERE name = 'ok'"),
	'-infinity', 'and leaves the others as they were');
$node->command_ok([ 'pg_dump', '-Fc', '-d', $node->connstr('postgres'), '-f', $dump ],
	'pg_dump after the update');
$node->safe_psql('postgres', 'CREATE DATABASE after_repair');
$node->command_ok([ 'pg_restore', '-d', $node->connstr('after_repair'), $dump ],
	'pg_restore after the update');
is($node->safe_psql('after_repair', 'SELECT string_agg(name, \',\' ORDER BY name) FROM tb_buckets'),
	'broken,ok', 'every bucket restored');

$node->stop;
done_testing();
