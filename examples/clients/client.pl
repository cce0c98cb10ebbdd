#!/usr/bin/perl
# examples/clients/client.pl: the Perl DBD::Pg client of the clients example
# (README.md); the same steps as client_psycopg2.py.  Peeks once; proves on
# a bucket of its own that sleeping retry_after_seconds is enough; then,
# with the other clients, loops on tb_try on the shared bucket for
# EXAMPLE_SECONDS, sleeping retry_after_seconds after each denial and
# waiting in the server (tb_acquire_wait) every tenth call.  Prints one
# JSON line.  Connects with libpq's PGHOST, PGPORT, PGUSER and PGDATABASE.
use strict;
use warnings;
use DBI;
use JSON::PP;
use Math::BigFloat;
use Scalar::Util qw(looks_like_number);
# the built-in sleep takes whole seconds: sleep(0.04) would not sleep at all
use Time::HiRes qw(sleep clock_gettime CLOCK_MONOTONIC);

my $NAME = 'perl';
my $BUCKET = $ENV{EXAMPLE_BUCKET} || 'shared';
my $SECONDS = $ENV{EXAMPLE_SECONDS} || 5;
my $COST = $ENV{EXAMPLE_COST} || 1;
my $RATE = $ENV{EXAMPLE_RATE} || 10;        # to judge retry_after
my $BARRIER = $ENV{EXAMPLE_BARRIER} || 0;   # advisory lock key; 0: none
my $SOLO_ROUNDS = 5;
my $WAIT_TIMEOUT = 1.0;                     # seconds

# AutoCommit is DBI's default, but say so: a grant's row lock lasts until commit
my $db = DBI->connect('dbi:Pg:', undef, undef, { AutoCommit => 1, RaiseError => 1, PrintError => 0 });
my %r = (client => $NAME, grants => 0, denials => 0, retried => 0, retried_granted => 0,
	waits => 0, waits_granted => 0, first_call => undef, last_grant => undef,
	retry_after_min => undef, retry_after_max => undef, retry_after_usable => 1,
	solo_retried => 0, solo_retried_granted => 0);

# DBD::Pg turns float8 into Perl numbers, and leaves numeric and interval
# as strings.  The epochs stay numeric: a Perl number prints 15 significant
# digits, and an epoch to the microsecond has 16.
my $try = $db->prepare('SELECT t.granted, t.retry_after_seconds,'
	. ' extract(epoch FROM clock_timestamp())'    # after the decision
	. ' FROM tb_try($1, $2) AS t');
# DBD::Pg sends parameters untyped, so an interval given as text would do;
# make_interval keeps the call the same as in every other driver
my $wait = $db->prepare('SELECT ok, extract(epoch FROM clock_timestamp())'
	. ' FROM tb_acquire_wait($1, $2, make_interval(secs => $3)) AS ok');

# tb_try once; on a denial, judge retry_after_seconds and sleep it.
# Returns (granted, when the server answered, in epoch seconds).
sub try_once {
	my ($bucket) = @_;
	# retry_after_seconds is a number; the interval retry_after would be
	# the string '00:00:00.042', which is 0 in arithmetic
	my ($granted, $after, $at) = $db->selectrow_array($try, undef, $bucket, $COST);
	if (!$granted) {
		my $usable = looks_like_number($after) && $after > 0 && $after <= $COST / $RATE + 0.001;
		$r{retry_after_usable} &&= $usable;
		$r{retry_after_min} = $after if !defined $r{retry_after_min} || $after < $r{retry_after_min};
		$r{retry_after_max} = $after if !defined $r{retry_after_max} || $after > $r{retry_after_max};
		sleep($after);
	}
	return ($granted, $at);
}

my ($peek_granted, $peek_remaining) =
	$db->selectrow_array('SELECT granted, remaining FROM tb_peek($1, $2)', undef, $BUCKET, $COST);

# alone on solo:perl (made from the template solo:*), a retry after
# sleeping retry_after_seconds must be granted, every time
while ($r{solo_retried} < $SOLO_ROUNDS) {
	next if (try_once("solo:$NAME"))[0];
	$r{solo_retried}++;
	$r{solo_retried_granted}++ if (try_once("solo:$NAME"))[0];
}

# start with the others: run.sh holds this lock until all wait
$db->do('SELECT pg_advisory_xact_lock_shared($1)', undef, $BARRIER) if $BARRIER;
($r{first_call}) = $db->selectrow_array('SELECT extract(epoch FROM clock_timestamp())');
my $after_denial = 0;
my $end = clock_gettime(CLOCK_MONOTONIC) + $SECONDS;
for (my $calls = 1; clock_gettime(CLOCK_MONOTONIC) < $end; $calls++) {
	my ($granted, $at);
	if ($calls % 10 == 5) {
		($granted, $at) = $db->selectrow_array($wait, undef, $BUCKET, $COST, $WAIT_TIMEOUT);
		$r{waits}++;
		$r{waits_granted}++ if $granted;
		$after_denial = 0;
	} else {
		($granted, $at) = try_once($BUCKET);
		if ($after_denial) {
			$r{retried}++;
			$r{retried_granted}++ if $granted;
		}
		$after_denial = !$granted;
		$r{denials}++ unless $granted;
	}
	if ($granted) {
		$r{grants}++;
		$r{last_grant} = $at;
	}
}
$db->disconnect;

# the epochs' strings, printed as JSON numbers with all their digits
for my $key (qw(first_call last_grant)) {
	$r{$key} = Math::BigFloat->new($r{$key}) if defined $r{$key};
}
$r{retry_after_usable} = $r{retry_after_usable} ? JSON::PP::true : JSON::PP::false;
$r{peek} = { granted => $peek_granted ? JSON::PP::true : JSON::PP::false, remaining => $peek_remaining + 0 };
print JSON::PP->new->canonical->allow_bignum->encode(\%r), "\n";
