# Upgrade and dump: buckets made under 1.0 survive ALTER EXTENSION UPDATE
# (through every version to this library's, tokenbucket.control's
# default_version) and keep working; pg_dump and pg_restore into a new
# database keep every bucket exactly, a pause "for ever" set by a role with
# EXECUTE only included, and every price to its last digit; DROP EXTENSION
# removes everything it made.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use File::Basename qw(dirname);

# the version this library is, as the control file says
my ($version) = slurp_file(dirname(__FILE__) . '/../../tokenbucket.control')
	=~ /^default_version = '([^']+)'/m;

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
$node->start;

# 1.0, with buckets made by plain SQL (this library is a later version's,
# so the 1.0 functions ask for the update), one of them half empty
$node->safe_psql('postgres', q{
	CREATE EXTENSION tokenbucket VERSION '1.0';
	INSERT INTO tb_buckets (name, capacity, refill_rate) VALUES ('full', 5, 1.0 / 3600);
	INSERT INTO tb_buckets (name, capacity, refill_rate, deficit) VALUES ('half', 4, 1.0 / 3600, 2);
});
my ($rc, $out, $err) = $node->psql('postgres', "SELECT tb_acquire('full')");
like($err, qr/extension tokenbucket is version 1.0, its library is version \Q$version\E/,
	"1.0 objects with the $version library ask for the update");
$node->safe_psql('postgres', 'ALTER EXTENSION tokenbucket UPDATE');
is($node->safe_psql('postgres', "SELECT extversion FROM pg_extension WHERE extname = 'tokenbucket'"),
	$version, "updated to $version");
is($node->safe_psql('postgres',
	"SELECT string_agg(name || '=' || round(tokens::numeric, 2), ' ' ORDER BY name) FROM tb_status"),
	'full=5.00 half=2.00', 'the buckets are kept, levels and all');
is($node->safe_psql('postgres',
	"SELECT tb_acquire('full', 5)::text || tb_acquire('half', 2)::text || tb_acquire('half')::text"),
	'truetruefalse', 'and decide as before');

# more state to dump: a template, a key made from it, a pause, a debt
$node->safe_psql('postgres', q{
	SELECT tb_create('user:*', 3, 1, '1 hour');
	SELECT tb_acquire('user:7', 2);
	SELECT tb_pause('full', interval '1 hour');
	SELECT tb_create('tpm', 100, 1, '1 hour');
	SELECT tb_settle('tpm', 0, 150);
	SELECT tb_create('forever', 1, 1);
	INSERT INTO tb_prices VALUES ('m', 'EUR', 0.123456789012345678901, 2, NULL, '-infinity'),
		('m', 'EUR', 0.1, 1.5, 0.05, '2020-01-01 00:00+00');
	CREATE ROLE regress_exec LOGIN;
	GRANT EXECUTE ON FUNCTION tb_pause(text, interval) TO regress_exec;
});
# 1.1 stored this pause past the last timestamptz: it dumped, but did not
# restore.  It is a pause for ever: infinity, which restores.
$node->safe_psql('postgres', q{
	SELECT tb_pause('forever', ('294276-12-31 23:59:59+00'::timestamptz - now()) + interval '3 days')},
	extra_params => [ '-U', 'regress_exec' ]);
is($node->safe_psql('postgres', "SELECT paused_until FROM tb_buckets WHERE name = 'forever'"),
	'infinity', 'a role with EXECUTE only pausing past the last timestamptz pauses until infinity');
my $dump = $node->basedir . '/buckets.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-d', $node->connstr('postgres'), '-f', $dump ],
	'pg_dump');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok([ 'pg_restore', '-d', $node->connstr('restored'), $dump ], 'pg_restore');
my $rows = 'SELECT name, capacity, refill_rate, deficit, updated_at, paused_until, template'
  . ' FROM tb_buckets ORDER BY name';
is($node->safe_psql('restored', $rows), $node->safe_psql('postgres', $rows),
	'the restored database has every bucket, exactly');
is($node->safe_psql('restored', "SELECT count(*) FROM tb_buckets"),
	$node->safe_psql('postgres', "SELECT count(*) FROM tb_buckets"),
	'all buckets restored, the one paused for ever included');
is($node->safe_psql('restored',
	"SELECT tb_acquire('half')::text || (tb_try('full')).granted::text || tb_acquire('tpm', 0)::text"
	. " || tb_acquire('user:8')::text"),
	'falsefalsefalsetrue', 'and they decide as before: empty, paused, in debt, template');
my $prices = 'SELECT * FROM tb_prices ORDER BY model, valid_from';
is($node->safe_psql('restored', $prices), $node->safe_psql('postgres', $prices),
	'the restored database has every price, exactly');
is($node->safe_psql('restored',
	"SELECT tb_cost('m', 1000, 10, 0, '2019-01-01') || ' ' || tb_cost('m', 1000, 10, 400, '2021-01-01')"),
	'0.000143456789012345678901 0.000095', 'and costs by them as before');

# DROP EXTENSION leaves nothing behind
$node->safe_psql('restored', 'DROP EXTENSION tokenbucket');
is($node->safe_psql('restored', q{
	SELECT (SELECT count(*) FROM pg_proc WHERE proname LIKE 'tb\_%')
	     + (SELECT count(*) FROM pg_class WHERE relname LIKE 'tb\_%')}),
	'0', 'DROP EXTENSION removes every function, table, view and index it made');

$node->stop;
done_testing();
