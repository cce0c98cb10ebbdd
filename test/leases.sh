#!/usr/bin/env bash
# test/leases.sh [table|memory]: in-flight limits with real sessions coming
# and going, on limits kept in the table (the default) or in memory.
# Prints TAP.
#
#  1-2  a client killed with -9 while holding every slot: the slots are
#       free at once (tb_status), and a waiter is granted within seconds
#       of a 60 s timeout, with no TTL
#  3    pg_terminate_backend of a holder: a waiter is granted at once
#  4    a holder killed with -9 in the middle of a long statement, with
#       client_connection_check_interval set: its slots come back
#  5    a transaction lease whose transaction fails frees its slot for a
#       waiter
#  6    tb_release wakes the head waiter at once (under 200 ms)
#  7    a ttl ending wakes the head waiter (under 200 ms after it ends)
#  8    waiters are served in arrival order
#  9-11 a holder that connected after a waiter's first look (which read
#       the backends' status): the waiter for every slot is not granted
#       over it (tb_status), and its tb_release answers true
# 12-14 the same without waiting: a transaction that looked at a live
#       holder, then leases the last slot of another limit, which a
#       session that connected since holds: refused
# 15    a live backend's pid is a holder's only with that backend's start
#       time (a later backend with a dead holder's pid is not the holder)
# 16-18 64 sessions leasing and releasing on a limit of 3 (session and
#       transaction leases) for LEASE_SECONDS (30): never more than 3
#       held at once, measured from the holders' own start and end times;
#       3 held at some moment; many leases granted
#
# Times are measured by the server's clock (clock_timestamp() in the
# statements of the sessions involved), never across starting a client.
# The limits are two orders of magnitude above the millisecond or two a
# wake-up takes, and below the 1 s at which a waiter looks again anyway.
set -euo pipefail
KIND=${1:-table}
case $KIND in
table) MEMORY=false ;;
memory) MEMORY=true ;;
*) echo "usage: test/leases.sh [table|memory]" >&2; exit 2 ;;
esac
DB=tb_leases_$KIND
WORK=$(mktemp -d)
trap 'for fd in ${FDS:-}; do eval "exec $fd>&-"; done; kill $(cat "$WORK"/*.pid 2>/dev/null) $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"; dropdb --if-exists "$DB" >/dev/null 2>&1 || true' EXIT

# a wait that never ends fails its check instead of hanging the suite
export PGOPTIONS="${PGOPTIONS:-} -c statement_timeout=90s"
SECONDS_64=${LEASE_SECONDS:-30}
WAKE=200	# ms from a release (or a ttl's end) to the waiter's grant

source "$(dirname "$0")/checks.sh"
# every check names the kind of limit it ran on
eval "$(declare -f check | sed '1s/check/check_any/')"
check() { check_any "$KIND limits: $1" "$2"; }

source "$(dirname "$0")/sessions.sh"
# waiting APP: the session's statement is in tb_lease_wait (not yet granted)
waiting() {
	until_true "EXISTS (SELECT FROM pg_stat_activity WHERE application_name = '$1'
		AND state = 'active' AND query LIKE '%tb_lease_wait%')"
}

createdb "$DB"
q -v memory="$MEMORY" >/dev/null <<'SQL'
CREATE EXTENSION tokenbucket;
-- what each waiter got: granted or not, how long it waited, when
CREATE TABLE got (test text, granted boolean, waited interval, at timestamptz);
-- when something was freed, by the server's clock
CREATE TABLE freed (test text, at timestamptz);
SELECT tb_create_limit(l, 3, :memory) FROM unnest('{k9,term,busy,xact,rel,ttl,fifo}'::text[]) AS l;
SQL

# wait_for TEST LIMIT SLOTS HOLD: a session that waits (60 s at most) and
# records what it got
wait_for() {
	session "w_$1"
	say "w_$1" "INSERT INTO got SELECT '$1', tb_lease_wait('$2', $3, '${4:-session}', NULL, '60 s') IS NOT NULL,
		clock_timestamp() - statement_timestamp(), clock_timestamp();"
	waiting "w_$1"
}
# got TEST: the waiter's row is there (it returned)
got() { until_true "EXISTS (SELECT FROM got WHERE test = '$1')"; }

# 1-2: kill -9 of the client holding every slot
session holder_k9
say holder_k9 "SELECT tb_lease('k9', 3) IS NOT NULL;"
until_true "(SELECT in_flight FROM tb_status WHERE name = 'k9') = 3"
wait_for k9 k9 1
kill -9 "$(cat "$WORK/holder_k9.pid")"
got k9 || true
check "a client killed with -9: its slots are free (tb_status) with no TTL" \
	"(SELECT in_flight FROM tb_status WHERE name = 'k9') = 1
	 AND NOT EXISTS (SELECT FROM tb_leases WHERE name = 'k9' AND slots = 3)"
check "a client killed with -9: the waiter is granted within 10 s of its 60 s timeout" \
	"(SELECT granted AND waited < '10 s' FROM got WHERE test = 'k9')"

# 3: pg_terminate_backend of the holder
session holder_term
say holder_term "SELECT tb_lease('term', 3) IS NOT NULL;"
until_true "(SELECT in_flight FROM tb_status WHERE name = 'term') = 3"
wait_for term term 2
q -c "INSERT INTO freed SELECT 'term', clock_timestamp()
	FROM (SELECT pid FROM pg_stat_activity WHERE application_name = 'holder_term' OFFSET 0) AS h
	WHERE pg_terminate_backend(h.pid)" >/dev/null
got term || true
check "pg_terminate_backend of a holder: the waiter is granted under ${WAKE} ms after it" \
	"(SELECT g.granted AND g.at - f.at < '${WAKE} ms'
	  FROM got AS g, freed AS f WHERE g.test = 'term' AND f.test = 'term')"

# 4: kill -9 of a client whose backend is busy in a long statement
session holder_busy
say holder_busy "SET client_connection_check_interval = '100ms';"
say holder_busy "SELECT tb_lease('busy', 3) IS NOT NULL;"
say holder_busy "SELECT pg_sleep(80);"
until_true "(SELECT in_flight FROM tb_status WHERE name = 'busy') = 3"
wait_for busy busy 3
kill -9 "$(cat "$WORK/holder_busy.pid")"
got busy || true
check "a client killed with -9 mid-statement (client_connection_check_interval): slots back within 10 s" \
	"(SELECT granted AND waited < '10 s' FROM got WHERE test = 'busy')"

# 5: a transaction lease whose transaction fails
session holder_xact
say holder_xact "BEGIN;"
say holder_xact "SELECT tb_lease('xact', 3, 'transaction') IS NOT NULL;"
until_true "EXISTS (SELECT FROM pg_stat_activity WHERE application_name = 'holder_xact'
	AND state = 'idle in transaction')"
wait_for xact xact 1
say holder_xact "SELECT 1 / 0;"
got xact || true
say holder_xact "ROLLBACK;"
check "a transaction lease whose transaction fails: the waiter is granted within 10 s" \
	"(SELECT granted AND waited < '10 s' FROM got WHERE test = 'xact')"

# 6: tb_release wakes the head waiter
session holder_rel
say holder_rel "SELECT tb_lease('rel', 3) AS id \\gset"
until_true "(SELECT in_flight FROM tb_status WHERE name = 'rel') = 3"
wait_for rel rel 1
say holder_rel "INSERT INTO freed SELECT 'rel', clock_timestamp() WHERE tb_release(:id);"
got rel || true
check "tb_release wakes the waiter: granted under ${WAKE} ms after the release" \
	"(SELECT g.granted AND g.at - f.at < '${WAKE} ms'
	  FROM got AS g, freed AS f WHERE g.test = 'rel' AND f.test = 'rel')"

# 7: a ttl ending wakes the head waiter
session holder_ttl
say holder_ttl "SELECT tb_lease('ttl', 3, 'session', '1.5 s') IS NOT NULL;"
say holder_ttl "INSERT INTO freed SELECT 'ttl', expires FROM tb_leases WHERE name = 'ttl';"
until_true "EXISTS (SELECT FROM freed WHERE test = 'ttl')"
wait_for ttl ttl 1
got ttl || true
check "a ttl ending wakes the waiter: granted under ${WAKE} ms after the ttl ends, not before" \
	"(SELECT g.granted AND g.at - f.at < '${WAKE} ms' AND g.at >= f.at
	  FROM got AS g, freed AS f WHERE g.test = 'ttl' AND f.test = 'ttl')"

# 8: arrival order: five waiters join one after another on a full limit,
# each holding its slot for the rest of its transaction
q -c "SELECT tb_alter_limit('fifo', 1)" >/dev/null
session holder_fifo
say holder_fifo "SELECT tb_lease('fifo') AS id \\gset"
until_true "(SELECT in_flight FROM tb_status WHERE name = 'fifo') = 1"
for w in a b c d e; do
	session "f_$w"
	say "f_$w" "BEGIN;"
	say "f_$w" "INSERT INTO got SELECT 'fifo', tb_lease_wait('fifo', 1, 'transaction', NULL, '60 s') IS NOT NULL,
		NULL, clock_timestamp(); INSERT INTO freed VALUES ('$w', clock_timestamp()); SELECT pg_sleep(0.05); COMMIT;"
	until_true "EXISTS (SELECT FROM pg_stat_activity WHERE application_name = 'f_$w'
		AND state = 'active' AND (wait_event_type = 'Lock' OR wait_event = 'Extension'))"
done
say holder_fifo "SELECT tb_release(:id);"
until_true "(SELECT count(*) FROM got WHERE test = 'fifo') = 5" || true
check "waiters are served in arrival order" \
	"(SELECT string_agg(test, '' ORDER BY at) FROM freed WHERE test IN ('a','b','c','d','e')) = 'abcde'
	 AND (SELECT bool_and(granted) FROM got WHERE test = 'fifo')"

# 9-11: a holder that connected after the waiter's first look at the
# slots (the first look at a live holder read the backends' status, which
# PostgreSQL keeps for the rest of the transaction: the later holder is
# not in it, and must not count as gone)
q -c "SELECT tb_create_limit('late', 2, $MEMORY)" >/dev/null
session late_b
say late_b "SELECT tb_lease('late') AS id \\gset"
until_true "(SELECT in_flight FROM tb_status WHERE name = 'late') = 1"
wait_for late late 2
until_true "EXISTS (SELECT FROM pg_stat_activity WHERE application_name = 'w_late'
	AND wait_event = 'Extension')"
session late_c
say late_c "SELECT tb_lease('late') AS id \\gset"
until_true "(SELECT in_flight FROM tb_status WHERE name = 'late') = 2"
say late_b "INSERT INTO freed SELECT 'late_b', clock_timestamp() WHERE tb_release(:id);"
until_true "EXISTS (SELECT FROM freed WHERE test = 'late_b')"
# the waiter is woken by the release and looks again within milliseconds
sleep 0.5
check "a holder that connected after a waiter's first look: its slot stays held, the waiter for both waits" \
	"(SELECT in_flight FROM tb_status WHERE name = 'late') = 1
	 AND NOT EXISTS (SELECT FROM got WHERE test = 'late')"
say late_c "INSERT INTO got SELECT 'late_c', tb_release(:id), NULL, clock_timestamp();"
got late || true
check "a holder that connected after a waiter's first look: its tb_release answers true" \
	"(SELECT granted FROM got WHERE test = 'late_c')"
check "a holder that connected after a waiter's first look: the waiter is granted after its release" \
	"(SELECT g.granted AND g.at >= c.at FROM got AS g, got AS c
	  WHERE g.test = 'late' AND c.test = 'late_c')"

# 12-14: the same without waiting: a transaction whose lease looked at a
# live holder's slot, then a session that connects and leases the last
# slot of another limit, then the transaction's lease of that limit
q -c "SELECT tb_create_limit('look', 3, $MEMORY), tb_create_limit('late1', 1, $MEMORY)" >/dev/null
session look_h
say look_h "SELECT tb_lease('look') IS NOT NULL;"
until_true "(SELECT in_flight FROM tb_status WHERE name = 'look') = 1"
session early
say early "BEGIN;"
say early "SELECT tb_lease('look') IS NOT NULL;"
until_true "EXISTS (SELECT FROM pg_stat_activity WHERE application_name = 'early'
	AND state = 'idle in transaction')"
session late1
say late1 "SELECT tb_lease('late1') AS id \\gset"
until_true "(SELECT in_flight FROM tb_status WHERE name = 'late1') = 1"
say early "INSERT INTO got SELECT 'early', tb_lease('late1') IS NOT NULL, NULL, clock_timestamp(); COMMIT;"
got early || true
check "a transaction that looked at a holder before another session connected: the last slot that session holds is refused" \
	"(SELECT NOT granted FROM got WHERE test = 'early')"
check "a transaction that looked at a holder before another session connected: the limit of 1 holds 1 (tb_status)" \
	"(SELECT in_flight FROM tb_status WHERE name = 'late1') = 1"
say late1 "INSERT INTO got SELECT 'late1', tb_release(:id), NULL, clock_timestamp();"
got late1 || true
check "a session that connected after another's look: its tb_release answers true" \
	"(SELECT granted FROM got WHERE test = 'late1')"

# 15: another backend, alive: its pid with its start time, and with others
check "a live backend's pid is a holder's only with that backend's start time" \
	"(SELECT tb_holder_alive(pid, backend_start, NULL)
	  AND NOT tb_holder_alive(pid, backend_start - interval '1 microsecond', NULL)
	  AND NOT tb_holder_alive(pid, backend_start + interval '1 microsecond', NULL)
	  FROM pg_stat_activity WHERE application_name = 'late1')"

# 16-18: 64 sessions for LEASE_SECONDS on a limit of 3
q -v memory="$MEMORY" >/dev/null <<'SQL'
SELECT tb_create_limit('conc', 3, :memory);
CREATE UNLOGGED TABLE spans (lease bigint, hold text, started timestamptz, ended timestamptz);
SQL
cat >"$WORK/session.sql" <<'SQL'
SELECT coalesce(tb_lease('conc'), 0) AS id \gset
\if :id
INSERT INTO spans VALUES (:id, 'session', clock_timestamp(), NULL);
SELECT pg_sleep(random() * 0.004);
UPDATE spans SET ended = clock_timestamp() WHERE lease = :id;
SELECT tb_release(:id);
\endif
SQL
cat >"$WORK/transaction.sql" <<'SQL'
BEGIN;
SELECT coalesce(tb_lease('conc', 1, 'transaction'), 0) AS id \gset
\if :id
INSERT INTO spans VALUES (:id, 'transaction', clock_timestamp(), NULL);
SELECT pg_sleep(random() * 0.004);
UPDATE spans SET ended = clock_timestamp() WHERE lease = :id;
\endif
COMMIT;
SQL
pgbench -n -c 64 -j 2 -T "$SECONDS_64" -f "$WORK/session.sql" -f "$WORK/transaction.sql" \
	"$DB" >"$WORK/pgbench.log" 2>&1 || { sed 's/^/# /' "$WORK/pgbench.log"; }
overlap="WITH s AS (SELECT * FROM spans WHERE ended IS NOT NULL)
	SELECT max((SELECT count(*) FROM s AS o WHERE o.started <= s.started AND o.ended > s.started))
	FROM s"
echo "# 64 sessions, $SECONDS_64 s: $(q -c "SELECT count(*) FROM spans") leases, at most $(q -c "$overlap") held at once"
check "64 sessions on a limit of 3 for $SECONDS_64 s: never more than 3 held at once" \
	"($overlap) <= 3 AND NOT EXISTS (SELECT FROM spans WHERE ended IS NULL)"
check "64 sessions on a limit of 3: 3 held at some moment" "($overlap) = 3"
check "64 sessions on a limit of 3: at least 100 leases granted, of both holds" \
	"(SELECT count(*) FROM spans) >= 100
	 AND (SELECT count(DISTINCT hold) FROM spans) = 2"

echo "1..$n"
