# Named buckets' and limits' counters under a flood of template names, in
# a counters' hash far smaller than the flood:
#  - a role with PUBLIC's rights leases thousands of names of a memory
#    limit template, or takes from thousands of keys of a table template
#    (and of a memory one); then every name that kept an entry is counted
#    in again, as a gateway's busy users are: a named bucket and a named
#    limit (table and memory each) made after that count every grant
#  - across a clean restart (which reads every entry back) they keep their
#    counts, and new ones made then count every grant too
#  - a hash that templates alone fill (no key's entry to make room): a
#    named bucket's count that finds no room says so with a WARNING
#    (53400), and the templates' counters stay exact
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# 4,000 entries: 250 a partition, more than the clock looks at in a pass
my $node = PostgreSQL::Test::Cluster->new('stats_flood');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'tokenbucket'
tokenbucket.max_stats_buckets = 4000
tokenbucket.max_memory_leases = 50000
tokenbucket.max_memory_buckets = 20000
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION tokenbucket;
	CREATE ROLE regress_app LOGIN;
	SELECT tb_create_limit('mt:*', 5, memory => true),
	       tb_create('tk:*', 1e9, 1e9), tb_create('mk:*', 1e9, 1e9, memory => true);
});

# a named table bucket, memory bucket, table limit and memory limit
sub make_named
{
	my ($s) = @_;
	$node->safe_psql('postgres', qq{
		SELECT tb_create('nb$s', 1e9, 1e9), tb_create('nm$s', 1e9, 1e9, memory => true),
		       tb_create_limit('nl$s', 1000), tb_create_limit('nml$s', 1000, memory => true)});
}

# $n transactions, each a grant of every one of them
sub use_named
{
	my ($s, $n) = @_;
	$node->safe_psql('postgres', qq{
		DO \$\$ BEGIN
			FOR i IN 1..$n LOOP
				PERFORM tb_acquire('nb$s'), tb_acquire('nm$s'),
				        tb_lease('nl$s', hold => 'transaction'),
				        tb_lease('nml$s', hold => 'transaction');
				COMMIT;
			END LOOP;
		END \$\$});
}

# what tb_stats counted of them
sub counted
{
	my ($s) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT string_agg(name || '=' || granted, ' ' ORDER BY name) FROM tb_stats
		WHERE name IN ('nb$s', 'nm$s', 'nl$s', 'nml$s')});
}

# $stmts statements of 500 new names each, as a role with PUBLIC's rights
sub flood
{
	my ($call, $stmts) = @_;
	my $sql = "SET ROLE regress_app;\n";
	$sql .= sprintf("SELECT count(%s) FROM generate_series(%d, %d) AS g;\n",
		$call, $_ * 500 + 1, $_ * 500 + 500) for 0 .. $stmts - 1;
	$node->safe_psql('postgres', $sql);
}

# 1: 5,000 names of a memory limit template, those that kept an entry
# counted in again: then named ones count every grant
flood(q{tb_lease('mt:' || g, hold => 'transaction')}, 10);
cmp_ok($node->safe_psql('postgres', q{
	SELECT count(tb_lease(name, hold => 'transaction')) FROM tb_limit_counters()
	WHERE name LIKE 'mt:_%' AND name NOT LIKE '%*'}), '>', 3000,
	'after a flood of 5,000 names of a memory limit template, the hash is full of them');
make_named(1);
use_named(1, 20);
is(counted(1), 'nb1=20 nl1=20 nm1=20 nml1=20',
	'named buckets and limits made after it count every grant');

# 2: the same with 5,000 keys of a table template (and 2,000 of a memory one)
flood(q{tb_acquire('tk:' || g)}, 10);
flood(q{tb_acquire('mk:' || g)}, 4);
my $again = $node->safe_psql('postgres', q{
	SELECT count(tb_acquire(name)) FROM tb_stats_counters() WHERE name LIKE 'tk:%'});
cmp_ok($again, '>', 3000, 'after a flood of 5,000 keys of a table template, the hash is full of them');
make_named(2);
use_named(2, 20);
is(counted(2), 'nb2=20 nl2=20 nm2=20 nml2=20',
	'named buckets and limits made after it count every grant');
is($node->safe_psql('postgres', q{
	SELECT string_agg(template || '=' || granted, ' ' ORDER BY template) FROM tb_template_stats
	WHERE template IN ('tk:*', 'mk:*')}), 'mk:*=2000 tk:*=' . (5000 + $again),
	'... and the templates every grant on their keys');

# 3: a clean restart reads every entry back, counted in lately: the named
# ones keep theirs, and new ones count every grant
$node->restart;
is(counted(1) . ' ' . counted(2), 'nb1=20 nl1=20 nm1=20 nml1=20 nb2=20 nl2=20 nm2=20 nml2=20',
	'a clean restart keeps the named ones\' counts');
make_named(3);
use_named(3, 20);
use_named(1, 5);
is(counted(3) . ' ' . counted(1), 'nb3=20 nl3=20 nm3=20 nml3=20 nb1=25 nl1=25 nm1=25 nml1=25',
	'... and after it, new named ones count every grant, as old ones do');
$node->stop;

# 4: templates alone fill a hash of 100: a named bucket's count finds no
# room, and says so; no template's counter is lost for it
my $full = PostgreSQL::Test::Cluster->new('stats_full');
$full->init;
$full->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'tokenbucket'
tokenbucket.max_stats_buckets = 100
});
$full->start;
$full->safe_psql('postgres', q{
	CREATE EXTENSION tokenbucket;
	SELECT count(tb_create_limit('t' || g || ':*', 1, memory => true)) FROM generate_series(1, 100) AS g;
	SELECT tb_create('named', 1e9, 1e9);
});
my ($rc, $out, $err) = $full->psql('postgres',
	q{SELECT count(tb_lease('t' || g || ':x', hold => 'transaction')) FROM generate_series(1, 100) AS g});
is($full->safe_psql('postgres', q{
	SELECT count(*) FROM tb_limit_counters() WHERE name LIKE '%*' AND granted = 1}), '100',
	'a hash of 100 full of templates counts every one of 100 templates\' grants');
($rc, $out, $err) = $full->psql('postgres', q{SELECT tb_acquire('named')},
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
is($out, 't', 'a grant of a named bucket with no room for its counters is granted');
like($err, qr/WARNING:  53400: no room in the counters: counts of buckets or limits are lost/,
	'... and a WARNING (53400) says its counts found no room');
like($err, qr/HINT:  Raise tokenbucket.max_stats_buckets/, '... and what to raise');
$full->stop;

done_testing();
