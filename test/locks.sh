#!/usr/bin/env bash
# test/locks.sh: a wait honours its timeout whatever holds the bucket, and
# sleeping waiters hold up nobody.  Every duration is measured inside the
# server (clock_timestamp() around the call, in one statement), never
# across starting a process.  Prints TAP.
#
#  1  a row lock held by an open transaction: tb_acquire_wait with a 1 s
#     timeout returns false within 10 s (the holder keeps it for 60 s)
#  2  the same for tb_acquire_all_wait
#  3  a row lock held by a prepared transaction: false within 10 s too
#  4  with two waiters asleep, ALTER TABLE tb_buckets (add and drop a
#     column) finishes within a second (the sleepers wait 60 s) ...
#  5  ... and the sleepers then take the tokens a refund gives them
#  6  the session's lock_timeout does not end a wait with no timeout of
#     its own: statement_timeout does, with its usual error
set -euo pipefail
DB=tb_locks
WORK=$(mktemp -d)
trap 'psql -X -q -d "$DB" -c "ROLLBACK PREPARED '"'"'tb_locks'"'"'" >/dev/null 2>&1 || true
	kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true
	rm -rf "$WORK"; dropdb --if-exists --force "$DB" >/dev/null 2>&1 || true' EXIT

source "$(dirname "$0")/checks.sh"
# wait_until CONDITION-IN-SQL: poll (at most 30 s) until it holds
wait_until() {
	for _ in $(seq 300); do
		[ "$(q -c "SELECT ($1)::text")" = true ] && return 0
		sleep 0.1
	done
	echo "# gave up waiting for: $1"
	return 1
}

createdb "$DB"
q >/dev/null <<'SQL'
CREATE EXTENSION tokenbucket;
SELECT tb_create('held', 2, 1, '1 hour'), tb_create('prepared', 2, 1, '1 hour'),
       tb_create('other', 2, 1, '1 hour'), tb_create('slow', 2, 1, '1 hour'),
       tb_create('queue', 1, 1, '1 hour');
SELECT tb_acquire('slow', 2), tb_acquire('queue');
CREATE TABLE timed (test text, granted boolean, took interval);
SQL
echo "1..6"

# 1-2: an open transaction holds 'held' (it took a token and sleeps)
PGAPPNAME=tb_holder psql -X -q -d "$DB" \
	-c "BEGIN" -c "SELECT tb_acquire('held')" -c "SELECT pg_sleep(60)" -c "COMMIT" \
	>/dev/null 2>&1 &
wait_until "EXISTS (SELECT FROM pg_stat_activity WHERE application_name = 'tb_holder'
                    AND query LIKE '%pg_sleep%')"
q -c "INSERT INTO timed SELECT 'one', granted, t1 - t0 FROM (SELECT clock_timestamp() AS t0,
      tb_acquire_wait('held', 1, '1 s') AS granted, clock_timestamp() AS t1) AS s"
check "a wait on a row another transaction holds returns false by its 1 s timeout ($(q -c "SELECT took FROM timed WHERE test = 'one'"), limit 10 s)" \
	"(SELECT NOT granted AND took BETWEEN '1 s' AND '10 s' FROM timed WHERE test = 'one')"
q -c "INSERT INTO timed SELECT 'all', granted, t1 - t0 FROM (SELECT clock_timestamp() AS t0,
      tb_acquire_all_wait('{other,held}', NULL, '1 s') AS granted, clock_timestamp() AS t1) AS s"
check "tb_acquire_all_wait on it returns false by its 1 s timeout too ($(q -c "SELECT took FROM timed WHERE test = 'all'"), limit 10 s)" \
	"(SELECT NOT granted AND took BETWEEN '1 s' AND '10 s' FROM timed WHERE test = 'all')"

q -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'tb_holder'" >/dev/null

# 3: a prepared transaction holds 'prepared' until it is resolved
q -c "BEGIN" -c "SELECT tb_acquire('prepared')" -c "PREPARE TRANSACTION 'tb_locks'" >/dev/null
q -c "INSERT INTO timed SELECT 'prepared', granted, t1 - t0 FROM (SELECT clock_timestamp() AS t0,
      tb_acquire_wait('prepared', 1, '1 s') AS granted, clock_timestamp() AS t1) AS s"
check "a wait on a row a prepared transaction holds returns false by its 1 s timeout ($(q -c "SELECT took FROM timed WHERE test = 'prepared'"), limit 10 s)" \
	"(SELECT NOT granted AND took BETWEEN '1 s' AND '10 s' FROM timed WHERE test = 'prepared')"
q -c "ROLLBACK PREPARED 'tb_locks'"

# 4-5: two waiters asleep on the empty 'slow'; a DBA alters the table
for i in 1 2; do
	PGAPPNAME=tb_sleeper psql -X -A -t -q -d "$DB" -c "SELECT tb_acquire_wait('slow', 1, '60 s')" \
		>"$WORK/sleeper$i.out" 2>&1 &
done
wait_until "(SELECT count(*) FROM pg_stat_activity WHERE application_name = 'tb_sleeper'
             AND wait_event_type IN ('Extension', 'Lock')) = 2"
q >/dev/null <<'SQL'
DO $$
DECLARE
	t0 timestamptz := clock_timestamp();
BEGIN
	ALTER TABLE tb_buckets ADD COLUMN probe int;
	ALTER TABLE tb_buckets DROP COLUMN probe;
	INSERT INTO timed VALUES ('alter', NULL, clock_timestamp() - t0);
END $$;
SQL
check "ALTER TABLE tb_buckets with two waiters asleep finishes within a second ($(q -c "SELECT took FROM timed WHERE test = 'alter'"))" \
	"(SELECT took < '1 s' FROM timed WHERE test = 'alter')"
q -c "SELECT tb_refund('slow', 2)" >/dev/null
wait
check "... and the sleepers then take the tokens refunded ($(cat "$WORK/sleeper1.out" "$WORK/sleeper2.out" | tr '\n' ' '))" \
	"'$(cat "$WORK/sleeper1.out" "$WORK/sleeper2.out" | tr -d '\n')' = 'tt'"

# 6: another waiter holds the queue of 'queue'; this one has lock_timeout
# set but no timeout of its own
PGAPPNAME=tb_head psql -X -q -d "$DB" -c "SELECT tb_acquire_wait('queue', 1, '60 s')" \
	>/dev/null 2>&1 &
wait_until "EXISTS (SELECT FROM pg_stat_activity WHERE application_name = 'tb_head'
                    AND wait_event_type = 'Extension')"
out=$(psql -X -A -t -q -d "$DB" -c "SET lock_timeout = '100ms'" -c "SET statement_timeout = '1s'" \
	-c "SELECT tb_acquire_wait('queue')" 2>&1 || true)
n=$((n + 1))
if grep -q 'canceling statement due to statement timeout' <<<"$out"; then
	echo "ok $n - lock_timeout does not end a queued wait with no timeout; statement_timeout does"
else
	echo "not ok $n - a queued wait with lock_timeout = 100ms: $out"
fi
