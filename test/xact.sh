#!/usr/bin/env bash
# test/xact.sh: how a transaction that released another session's memory
# lease ends when its backend goes, the ends an isolation spec cannot
# bring about (xact.c).  Prints TAP.
#
# Session h holds a lease of a memory limit of 1, with a ttl; session r (a
# superuser, as the DBA) releases it in a transaction left open, and then
# its backend goes: pg_terminate_backend, or its client killed with -9.
# Each is run twice: with r holding no lease of its own, and with r
# holding one (which once made its exit skip the undoing of its release:
# the lease stayed marked released for ever, h's own tb_release said
# false, and its ttl passed without freeing it).  Afterwards the lease is
# h's as before:
#
#  a  tb_status counts it, tb_leases lists it, and nobody else is granted
#     a slot
#  b  h's own tb_release frees it (true), and the slot is granted next
#
# Then, once the ttl of a lease so released and abandoned passes, its
# slot is free again (c); and PREPARE TRANSACTION after a grant of a
# memory bucket and a change of a limit is refused with one 0A000 whose
# detail names both, leaving nothing prepared (d).
set -euo pipefail
DB=tb_xact
WORK=$(mktemp -d)
trap 'for fd in ${FDS:-}; do eval "exec $fd>&-"; done; kill $(cat "$WORK"/*.pid 2>/dev/null) $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"; dropdb --if-exists "$DB" >/dev/null 2>&1 || true' EXIT

export PGOPTIONS="${PGOPTIONS:-} -c statement_timeout=90s"
source "$(dirname "$0")/checks.sh"

source "$(dirname "$0")/sessions.sh"
# idle_in_xact APP: the session waits for its client inside a transaction
idle_in_xact() {
	until_true "EXISTS (SELECT FROM pg_stat_activity WHERE application_name = '$1'
		AND state = 'idle in transaction')"
}
# gone APP: no backend of that name is left
gone() {
	until_true "NOT EXISTS (SELECT FROM pg_stat_activity WHERE application_name = '$1')"
}

createdb "$DB"
q >/dev/null <<'SQL'
CREATE EXTENSION tokenbucket;
CREATE TABLE ids (test text PRIMARY KEY, lease bigint);
CREATE TABLE results (test text, step text, ok boolean);
SQL

# run TEST HOW OWN: h leases from limit TEST (ttl 1 hour); r releases it
# in an open transaction (after a lease of its own when OWN is "own"), and
# its backend goes by HOW ("terminate" or "kill")
run() {
	local test=$1 how=$2 own=$3
	q -c "SELECT tb_create_limit('$test', 1, memory => true), tb_create_limit('$test:r', 1, memory => true)" >/dev/null
	session "h_$test"
	say "h_$test" "INSERT INTO ids SELECT '$test', tb_lease('$test', 1, 'session', '1 hour');"
	until_true "EXISTS (SELECT FROM ids WHERE test = '$test' AND lease IS NOT NULL)"
	session "r_$test"
	[ "$own" = own ] && say "r_$test" "SELECT tb_lease('$test:r') IS NOT NULL;"
	say "r_$test" "BEGIN;"
	say "r_$test" "INSERT INTO results SELECT '$test', 'r released', tb_release(lease) FROM ids WHERE test = '$test';"
	idle_in_xact "r_$test"
	if [ "$how" = terminate ]; then
		q -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'r_$test'" >/dev/null
	else
		kill -9 "$(cat "$WORK/r_$test.pid")"
	fi
	gone "r_$test"
	check "$test: after r's release and $how, the lease is held: in tb_status and tb_leases, no slot for another" \
		"(SELECT in_flight FROM tb_status WHERE name = '$test') = 1
		 AND EXISTS (SELECT FROM tb_leases AS l JOIN ids USING (lease) WHERE ids.test = '$test')
		 AND tb_lease('$test') IS NULL"
	say "h_$test" "INSERT INTO results SELECT '$test', 'h released', tb_release(lease) FROM ids WHERE test = '$test';"
	until_true "EXISTS (SELECT FROM results WHERE test = '$test' AND step = 'h released')"
	check "$test: h's own tb_release frees it, and the slot is granted next" \
		"(SELECT ok FROM results WHERE test = '$test' AND step = 'h released')
		 AND tb_lease('$test') IS NOT NULL"
}

run terminate_plain terminate none
run terminate_own terminate own
run kill_plain kill none
run kill_own kill own

# c: a lease with a ttl, released by a transaction whose backend is
# terminated, is freed when its ttl passes
q -c "SELECT tb_create_limit('ttl', 1, memory => true), tb_create_limit('ttl:r', 1, memory => true)" >/dev/null
session h_ttl
say h_ttl "INSERT INTO ids SELECT 'ttl', tb_lease('ttl', 1, 'session', '2 s');"
until_true "EXISTS (SELECT FROM ids WHERE test = 'ttl' AND lease IS NOT NULL)"
session r_ttl
say r_ttl "SELECT tb_lease('ttl:r') IS NOT NULL;"
say r_ttl "BEGIN;"
say r_ttl "INSERT INTO results SELECT 'ttl', 'r released', tb_release(lease) FROM ids WHERE test = 'ttl';"
idle_in_xact r_ttl
q -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'r_ttl'" >/dev/null
gone r_ttl
q -c "SELECT pg_sleep_until(expires + interval '100 ms') FROM tb_leases WHERE name = 'ttl'" >/dev/null
check "ttl: a lease released by a terminated transaction is free once its ttl passes" \
	"tb_lease('ttl') IS NOT NULL"

# d: one refusal of PREPARE, naming all it refuses
q -c "SELECT tb_create('mb', 2, 1, '1 hour', memory => true)" >/dev/null
err=$(psql -X -q -v VERBOSITY=verbose -d "$DB" -c "BEGIN" -c "SELECT tb_acquire('mb')" \
	-c "SELECT tb_alter_limit('ttl', 2)" -c "PREPARE TRANSACTION 'tb_xact'" 2>&1 >/dev/null || true)
echo "$err" | sed 's/^/# /'
check "PREPARE after a memory bucket's grant and a limit's change: one 0A000 naming both, nothing prepared" \
	"$(grep -q "0A000: cannot PREPARE a transaction that used tokenbucket's shared memory" <<<"$err" &&
	   grep -q "DETAIL:  Its changes to memory token buckets and limits' settings are kept in its own session" <<<"$err" &&
	   echo true || echo false)
	 AND NOT EXISTS (SELECT FROM pg_prepared_xacts)
	 AND (SELECT max_in_flight FROM tb_limits WHERE name = 'ttl') = 1
	 AND (SELECT round(tokens) FROM tb_status WHERE name = 'mb') = 2"

echo "1..$n"
