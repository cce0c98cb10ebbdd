#!/usr/bin/env bash
# test/held.sh: a bucket or limit whose row another transaction holds
# never stalls a caller silently (held.c).  Prints TAP.
#
# Session h is the client that forgot to commit: a driver opened a
# transaction, called tb_acquire and went idle.  Every other caller of that
# bucket waits for h at most tokenbucket.row_lock_timeout (1 s by default),
# or its own shorter lock_timeout, and then fails with 55P03 whose detail
# names h: its process, application, state and how long it has been idle
# in transaction.  A waiting function waits until its own timeout instead,
# and answers false by it, as it always did.  h itself goes on as before, tb_held shows the DBA what h
# holds and who waits, and a rolled-back savepoint or the end of h's
# transaction forgets what it held.  Each call is timed in the server, by
# the session that makes it; the bounds leave an order of magnitude of
# room above.
set -euo pipefail
DB=tb_held
WORK=$(mktemp -d)
trap 'for fd in ${FDS:-}; do eval "exec $fd>&-"; done; kill $(cat "$WORK"/*.pid 2>/dev/null) $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"; dropdb --if-exists "$DB" >/dev/null 2>&1 || true' EXIT

# nothing here may hang: a call the bound does not end, this does
export PGOPTIONS="${PGOPTIONS:-} -c statement_timeout=10s"
source "$(dirname "$0")/checks.sh"
source "$(dirname "$0")/sessions.sh"

createdb "$DB"
q >/dev/null <<'SQL'
CREATE EXTENSION tokenbucket;
SELECT tb_create('openai:rpm', 60, 60, '1 minute');
SELECT tb_create('other', 10, 1);
SELECT tb_create('user:*', 5, 1);
SELECT tb_create('mem', 10, 1, memory => true);
SELECT tb_create_limit('jobs', 2);
-- calls(test): each call a test made, how it ended and how long it took,
-- timed in the server by the session that made it
CREATE TABLE calls (test text PRIMARY KEY, result text, sqlstate text, message text,
	detail text, hint text, seconds float8);
CREATE FUNCTION timed(test text, sql text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	t0 timestamptz := clock_timestamp();
	c calls;
BEGIN
	c.test := test;
	BEGIN
		EXECUTE sql INTO c.result;
	EXCEPTION WHEN OTHERS OR query_canceled THEN
		GET STACKED DIAGNOSTICS c.sqlstate = RETURNED_SQLSTATE, c.message = MESSAGE_TEXT,
			c.detail = PG_EXCEPTION_DETAIL, c.hint = PG_EXCEPTION_HINT;
	END;
	c.seconds := extract(epoch FROM clock_timestamp() - t0);
	INSERT INTO calls SELECT c.*;
END $$;
CREATE ROLE regress_tb_held_reader;
GRANT USAGE ON SCHEMA public TO regress_tb_held_reader;
SQL
q -c "GRANT SELECT, INSERT ON calls TO regress_tb_held_reader" >/dev/null

# call TEST SQL [SETTINGS]: SQL in a session of its own, timed (SETTINGS:
# SET statements first)
call() {
	q -c "${3:-} SELECT timed('$1', \$sql\$$2\$sql\$)" >/dev/null
}
h_pid() { cat "$WORK/h.backend"; }
# wait_file FILE: wait (at most 30 s) until psql has written FILE
wait_file() {
	for _ in $(seq 300); do
		[ -s "$1" ] && return 0
		sleep 0.1
	done
	echo "# timed out waiting for $1"
	return 1
}

# h: BEGIN, a grant, and idle in transaction
session h
say h "BEGIN;"
say h "SELECT tb_acquire('openai:rpm');"
say h "SELECT tb_acquire('user:1');"
say h "SAVEPOINT s; SELECT tb_acquire('other'); ROLLBACK TO s;"
say h "SELECT pg_backend_pid() \\g $WORK/h.backend"
until_true "EXISTS (SELECT FROM pg_stat_activity WHERE application_name = 'h'
	AND state = 'idle in transaction' AND backend_xid IS NOT NULL)"
wait_file "$WORK/h.backend"
sleep 0.3	# so that h has been idle a while when the callers look

# the callers
call default "SELECT tb_acquire('openai:rpm')"
call short "SELECT tb_acquire('openai:rpm')" "SET tokenbucket.row_lock_timeout = '200ms';"
call lock_timeout "SELECT tb_acquire('openai:rpm')" "SET lock_timeout = '100ms';"
call made "SELECT tb_acquire('user:1')" "SET tokenbucket.row_lock_timeout = '200ms';"
call wait_short "SELECT tb_acquire_wait('openai:rpm', 1, '300 ms')"
call wait_long "SELECT tb_acquire_wait('openai:rpm', 1, '1500 ms')" "SET tokenbucket.row_lock_timeout = '100ms';"
call try "SELECT (tb_try('openai:rpm')).granted" "SET tokenbucket.row_lock_timeout = '200ms';"
call settle "SELECT tb_settle('openai:rpm', 1, 0)" "SET tokenbucket.row_lock_timeout = '200ms';"
call other "SELECT tb_acquire('other')"
call memory "SELECT tb_acquire('mem')"
call peek "SELECT (tb_peek('openai:rpm')).granted IS NOT NULL"

check "a caller of a bucket another transaction holds fails with 55P03 once tokenbucket.row_lock_timeout (1 s by default) passes" \
	"(SELECT sqlstate = '55P03' AND seconds >= 0.95 AND seconds < 9.5 FROM calls WHERE test = 'default')"
check "its message names the bucket" \
	"(SELECT message = 'bucket \"openai:rpm\" is held by another transaction' FROM calls WHERE test = 'default')"
check "its detail names the holder: process, application, idle in transaction for how long" \
	"(SELECT detail LIKE 'Process $(h_pid) (application \"h\", idle in transaction for %s) has held it since % s ago; this call waited 1000 ms for it (tokenbucket.row_lock_timeout).' FROM calls WHERE test = 'default')"
check "its hint says to commit after the call or use autocommit" \
	"(SELECT hint ILIKE 'commit%autocommit%tokenbucket.row_lock_timeout%' FROM calls WHERE test = 'default')"
check "a shorter tokenbucket.row_lock_timeout bounds the wait to it" \
	"(SELECT sqlstate = '55P03' AND seconds >= 0.19 AND seconds < 0.95 AND detail LIKE '%waited 200 ms for it (tokenbucket.row_lock_timeout).' FROM calls WHERE test = 'short')"
check "a shorter lock_timeout of the session's bounds it, with the same error" \
	"(SELECT sqlstate = '55P03' AND seconds >= 0.09 AND seconds < 0.95 AND detail LIKE 'Process $(h_pid) %waited 100 ms for it (lock_timeout).' FROM calls WHERE test = 'lock_timeout')"
check "a key made from a template in h's open transaction: the same (h's insert is what it waits for)" \
	"(SELECT sqlstate = '55P03' AND detail LIKE 'Process $(h_pid) %' AND message = 'bucket \"user:1\" is held by another transaction' FROM calls WHERE test = 'made')"
check "tb_acquire_wait answers false by its own timeout, shorter than the bound" \
	"(SELECT result = 'false' AND sqlstate IS NULL AND seconds >= 0.29 AND seconds < 0.95 FROM calls WHERE test = 'wait_short')"
check "a waiting function waits until its own timeout, longer than tokenbucket.row_lock_timeout" \
	"(SELECT result = 'false' AND sqlstate IS NULL AND seconds >= 1.45 AND seconds < 9.5 FROM calls WHERE test = 'wait_long')"
check "tb_try and tb_settle are bounded the same way" \
	"(SELECT bool_and(sqlstate = '55P03' AND seconds < 9.5) AND count(*) = 2 FROM calls WHERE test IN ('try', 'settle'))"
check "a bucket whose grant h rolled back to a savepoint is free at once" \
	"(SELECT result = 'true' AND sqlstate IS NULL AND seconds < 0.5 FROM calls WHERE test = 'other')"
check "memory buckets and looks (tb_peek) never wait for h" \
	"(SELECT bool_and(result = 'true' AND seconds < 0.5) AND count(*) = 2 FROM calls WHERE test IN ('memory', 'peek'))"

# the DBA's view, while h holds and a caller waits without a bound
session w
say w "SET tokenbucket.row_lock_timeout = 0; SELECT timed('unbounded', 'SELECT tb_acquire(''openai:rpm'')');"
until_true "EXISTS (SELECT FROM pg_stat_activity WHERE application_name = 'w' AND wait_event_type = 'Lock')"
check "tb_held shows the DBA each bucket h holds, with its state and how long it has been idle" \
	"(SELECT array_agg(name ORDER BY name) = '{openai:rpm,user:1}' AND bool_and(kind = 'bucket' AND pid = $(h_pid)
		AND application_name = 'h' AND state = 'idle in transaction' AND idle_for > '0.2 s'
		AND held_since <= now()) FROM tb_held)"
check "tb_held counts the sessions waiting for h" \
	"(SELECT waiting = 1 FROM tb_held WHERE name = 'openai:rpm')"
check "with no bound at all (0), a caller waits for h as before" \
	"NOT EXISTS (SELECT FROM calls WHERE test = 'unbounded')"

# h itself goes on: its own transaction's calls never wait for itself
say h "SELECT tb_acquire('openai:rpm', 2) \\g $WORK/h.again"
wait_file "$WORK/h.again"
check "h's own calls in its transaction go on as before" "'$(cat "$WORK/h.again")' = 't'"

# a limit's row: h changes it in its open transaction
say h "SELECT tb_alter_limit('jobs', 3);"
until_true "EXISTS (SELECT FROM tb_held WHERE name = 'jobs')"
call limit "SELECT tb_alter_limit('jobs', 4)" "SET tokenbucket.row_lock_timeout = '200ms';"
check "a limit's row is bounded the same way, its message naming the limit" \
	"(SELECT sqlstate = '55P03' AND message = 'limit \"jobs\" is held by another transaction' AND detail LIKE 'Process $(h_pid) %' FROM calls WHERE test = 'limit')"
check "tb_held shows it as a limit" "(SELECT kind = 'limit' AND pid = $(h_pid) FROM tb_held WHERE name = 'jobs')"

# who may read tb_held
q -c "SET ROLE regress_tb_held_reader; SELECT timed('reader', 'SELECT count(*) FROM tb_held_rows()')" >/dev/null
check "tb_held_rows() refuses it with 42501" "(SELECT sqlstate = '42501' FROM calls WHERE test = 'reader')"
q -c "GRANT SELECT ON tb_held TO regress_tb_held_reader" >/dev/null
q -c "SET ROLE regress_tb_held_reader; SELECT timed('reader2', 'SELECT count(*) FROM tb_held')" >/dev/null
check "SELECT on tb_held is enough to read it" "(SELECT result = '3' FROM calls WHERE test = 'reader2')"

# h commits: the waiter is granted, and h holds nothing
say h "COMMIT;"
until_true "EXISTS (SELECT FROM calls WHERE test = 'unbounded')"
check "once h commits, the unbounded waiter is granted" "(SELECT result = 'true' FROM calls WHERE test = 'unbounded')"
check "and tb_held no longer shows h" "NOT EXISTS (SELECT FROM tb_held WHERE pid = $(h_pid))"

# a holder that is not a tokenbucket call: a statement on the table itself
say h "BEGIN; UPDATE tb_buckets SET capacity = capacity WHERE name = 'other';"
until_true "EXISTS (SELECT FROM pg_stat_activity WHERE application_name = 'h' AND state = 'idle in transaction')"
call table "SELECT tb_acquire('other')" "SET tokenbucket.row_lock_timeout = '200ms';"
check "a row held by a statement on tb_buckets itself: 55P03, its detail saying so" \
	"(SELECT sqlstate = '55P03' AND detail LIKE 'No call of tokenbucket''s holds it%pg_locks%' FROM calls WHERE test = 'table')"
say h "ROLLBACK;"

# a lock on a whole table of tokenbucket's in h's open transaction (a
# deploy's TRUNCATE tb_parents, a LOCK TABLE tb_buckets): a new session's
# call, parents or not, waits for it at most the bound too, then 55P03
# naming the table and h; all before h ends
# lock_table TEST LOCK: h takes LOCK (holding it, idle), a new session
# calls tb_acquire('other') with a bound of 200 ms, h rolls back
lock_table() {
	say h "BEGIN; $2; SELECT 'locked' \\g $WORK/h.$1"
	wait_file "$WORK/h.$1"
	until_true "EXISTS (SELECT FROM pg_stat_activity WHERE application_name = 'h' AND state = 'idle in transaction')"
	call "$1" "SELECT tb_acquire('other')" "SET tokenbucket.row_lock_timeout = '200ms';"
	say h "ROLLBACK;"
}
# locked TEST TABLE: the call of TEST failed with 55P03 within the bound, naming TABLE and h
locked() {
	echo "(SELECT sqlstate = '55P03' AND seconds >= 0.19 AND seconds < 5
		AND message = 'table \"$2\" is locked by another transaction'
		AND detail LIKE 'Process $(h_pid) (application \"h\", idle in transaction for % s) holds%waited 200 ms for it (tokenbucket.row_lock_timeout).'
		FROM calls WHERE test = '$1')"
}
lock_table truncate "TRUNCATE tb_parents"
check "TRUNCATE tb_parents in an open transaction: a new session's call on a bucket without parents fails with 55P03 within the bound, naming tb_parents and the holder" \
	"$(locked truncate tb_parents)"
lock_table access_exclusive "LOCK tb_buckets IN ACCESS EXCLUSIVE MODE"
check "an ACCESS EXCLUSIVE lock on tb_buckets: the same, naming tb_buckets" \
	"$(locked access_exclusive tb_buckets)"
lock_table exclusive "LOCK tb_buckets IN EXCLUSIVE MODE"
check "an EXCLUSIVE lock on tb_buckets: the same for a grant" \
	"$(locked exclusive tb_buckets)"

# an alert event h's open transaction wrote (a memory quota, whose charge
# locks no row): a charge reaching the same threshold waits for h's event
# at most the bound, then the same 55P03 naming the quota and h
q -c "SELECT tb_create_quota('mq', 10, '1 day', memory => true), tb_set_alerts('mq', '{0.5}')" >/dev/null
say h "BEGIN; SELECT tb_acquire('mq', 6) \\g $WORK/h.alert"
wait_file "$WORK/h.alert"
until_true "EXISTS (SELECT FROM pg_stat_activity WHERE application_name = 'h'
	AND state = 'idle in transaction' AND backend_xid IS NOT NULL)"
call alert "SELECT tb_acquire('mq', 1)" "SET tokenbucket.row_lock_timeout = '200ms';"
say h "ROLLBACK;"
check "a charge waiting for another transaction's alert event fails with 55P03 naming the quota and the holder, not a bare lock timeout" \
	"(SELECT sqlstate = '55P03' AND seconds >= 0.19 AND seconds < 5
		AND message = 'bucket \"mq\" is held by another transaction'
		AND detail LIKE 'Process $(h_pid) (application \"h\", idle in transaction for % s) has held it%waited 200 ms for it (tokenbucket.row_lock_timeout).'
		FROM calls WHERE test = 'alert')"

check "tokenbucket.row_lock_timeout is 1 s by default" "current_setting('tokenbucket.row_lock_timeout') = '1s'"

echo "1..$n"
