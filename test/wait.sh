#!/usr/bin/env bash
# test/wait.sh: tb_acquire_wait and tb_acquire_all_wait on the real clock,
# a few seconds each.  Prints TAP.
#
#  1-2  granted within 50 ms of the moment the tokens exist (one bucket; two)
#  3    a timeout is honoured within 50 ms, and returns false
#  4-5  pg_cancel_backend and statement_timeout end a wait at once, with
#       the usual errors
#  6-7  a sleeping waiter holds no row lock: tb_acquire and tb_refund go
#       on, and the waiter takes the token refunded
#  8    no starvation: a cost-10 waiter on a 10/s bucket amid a stream of
#       cost-1 waiters is granted within 2 s
#  9    a waiting backend uses (almost) no CPU
set -euo pipefail
DB=tb_wait
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"; dropdb --if-exists "$DB" >/dev/null 2>&1 || true' EXIT

q() { psql -X -A -t -q -v ON_ERROR_STOP=1 -d "$DB" "$@"; }
n=0
check() {	# check DESCRIPTION CONDITION-IN-SQL
	n=$((n + 1))
	if [ "$(q -c "SELECT ($2)::text")" = true ]; then
		echo "ok $n - $1"
	else
		echo "not ok $n - $1"
		echo "#   failed: $2"
	fi
}
# the backend pid of the session whose application_name is $1, once it waits
pid_of() {
	for _ in $(seq 100); do
		local pid
		pid=$(q -c "SELECT pid FROM pg_stat_activity WHERE application_name = '$1' AND state = 'active'")
		[ -n "$pid" ] && { echo "$pid"; return; }
		sleep 0.02
	done
}

createdb "$DB"
q -c "CREATE EXTENSION tokenbucket" >/dev/null
echo "1..9"

# 1: an empty bucket of 1 at 4/s has its token 250 ms later; compute that
# moment from the row, then wait for it
q >/dev/null <<'SQL'
SELECT tb_create('one', 1, 4);
SELECT tb_acquire('one');
CREATE TABLE lateness (test text, late interval);
CREATE FUNCTION wait_lateness(names text[], costs float8[]) RETURNS interval
LANGUAGE plpgsql AS $$
DECLARE
	ready timestamptz;
	granted boolean;
BEGIN
	SELECT max(updated_at + (deficit + c.cost - capacity) / refill_rate * interval '1 s')
	INTO ready FROM tb_buckets JOIN unnest(names, costs) AS c(name, cost) USING (name);
	granted := tb_acquire_all_wait(names, costs);
	RETURN CASE WHEN granted THEN clock_timestamp() - ready END;
END $$;
SQL
q -c "INSERT INTO lateness SELECT 'one', wait_lateness('{one}', '{1}')"
check "tb_acquire_wait is granted within 50 ms of the moment the token exists ($(q -c "SELECT late FROM lateness WHERE test = 'one'"))" \
	"(SELECT late BETWEEN '0' AND '50 ms' FROM lateness WHERE test = 'one')"

# 2: two buckets; the later one decides
q >/dev/null <<'SQL'
SELECT tb_create('rpm', 2, 5), tb_create('tpm', 100, 200);
SELECT tb_acquire_all('{rpm,tpm}', '{2,100}');
SQL
q -c "INSERT INTO lateness SELECT 'all', wait_lateness('{tpm,rpm}', '{60,1}')"
check "tb_acquire_all_wait is granted within 50 ms of the moment both buckets hold their cost ($(q -c "SELECT late FROM lateness WHERE test = 'all'"))" \
	"(SELECT late BETWEEN '0' AND '50 ms' FROM lateness WHERE test = 'all')"

# 3: a bucket that refills once an hour never comes in time
q -c "SELECT tb_create('slow', 1, 1, '1 hour'), tb_acquire('slow')" >/dev/null
q -c "CREATE TABLE timed AS SELECT clock_timestamp() AS t0, tb_acquire_wait('slow', 1, '300 ms') AS granted, clock_timestamp() AS t1"
check "a 300 ms timeout returns false after 300 to 350 ms ($(q -c "SELECT t1 - t0 FROM timed"))" \
	"(SELECT NOT granted AND t1 - t0 BETWEEN '300 ms' AND '350 ms' FROM timed)"

# 4: pg_cancel_backend
PGAPPNAME=tb_cancel psql -X -A -t -d "$DB" -c "SELECT tb_acquire_wait('slow')" >"$WORK/cancel.out" 2>&1 &
waiter=$!
pid=$(pid_of tb_cancel)
sleep 0.2
start=$(date +%s%N)
q -c "SELECT pg_cancel_backend($pid)" >/dev/null
wait $waiter || true
ms=$(( ($(date +%s%N) - start) / 1000000 ))
n=$((n + 1))
if grep -q 'canceling statement due to user request' "$WORK/cancel.out" && [ "$ms" -lt 50 ]; then
	echo "ok $n - pg_cancel_backend ends a wait at once with the usual error (${ms} ms)"
else
	echo "not ok $n - pg_cancel_backend: ${ms} ms: $(cat "$WORK/cancel.out")"
fi

# 5: statement_timeout
start=$(date +%s%N)
PGOPTIONS='-c statement_timeout=200' psql -X -A -t -d "$DB" -c "SELECT tb_acquire_wait('slow')" >"$WORK/timeout.out" 2>&1 || true
ms=$(( ($(date +%s%N) - start) / 1000000 ))
n=$((n + 1))
if grep -q 'canceling statement due to statement timeout' "$WORK/timeout.out" && [ "$ms" -lt 400 ]; then
	echo "ok $n - statement_timeout ends a wait with the usual error (${ms} ms for 200 ms)"
else
	echo "not ok $n - statement_timeout: ${ms} ms: $(cat "$WORK/timeout.out")"
fi

# 6: while one session waits for 'slow', others use it without waiting:
# a refund to it arrives, and the waiter takes it at its next look
PGAPPNAME=tb_sleeper psql -X -A -t -d "$DB" -c "SELECT tb_acquire_wait('slow', 1, '5 s')" >"$WORK/sleeper.out" 2>&1 &
sleeper=$!
pid_of tb_sleeper >/dev/null
sleep 0.2
check "while a waiter sleeps, tb_acquire and tb_refund on its bucket do not wait for it" \
	"(SELECT count(*) = 1 FROM (SELECT set_config('lock_timeout', '100ms', true), tb_acquire('slow'), tb_refund('slow', 1)) AS s)"
wait $sleeper
check "... and the waiter takes the token refunded" "'$(cat "$WORK/sleeper.out")' = 't'"

# 7: fairness.  Four sessions keep waiting for 1 token each on a 10/s
# bucket; after half a second a fifth asks for 10.  Served in arrival
# order, it waits behind at most four single tokens and then for ten.
q -c "SELECT tb_create('fair', 10, 10), tb_acquire('fair', 10)" >/dev/null
echo "SELECT tb_acquire_wait('fair', 1, '10 s');" >"$WORK/small.sql"
pgbench -n -c 4 -j 2 -T 4 -f "$WORK/small.sql" "$DB" >"$WORK/stream.out" 2>&1 &
stream=$!
sleep 0.5
q -c "CREATE TABLE big AS SELECT clock_timestamp() AS t0, tb_acquire_wait('fair', 10, '5 s') AS granted, clock_timestamp() AS t1"
wait $stream
check "a cost-10 waiter amid a stream of cost-1 waiters is granted within 2 s ($(q -c "SELECT t1 - t0 FROM big"))" \
	"(SELECT granted AND t1 - t0 < '2 s' FROM big)"

# 8: CPU time of a waiting backend over two seconds of waiting
PGAPPNAME=tb_idle psql -X -A -t -d "$DB" -c "SELECT tb_acquire_wait('slow', 1, '3 s')" >/dev/null 2>&1 &
idle=$!
pid=$(pid_of tb_idle)
sleep 0.3
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
before=$(cpu "$pid")
sleep 2
after=$(cpu "$pid")
wait $idle || true
ticks=$((after - before))
n=$((n + 1))
hz=$(getconf CLK_TCK)
if [ $((ticks * 1000 / hz)) -le 20 ]; then
	echo "ok $n - a waiting backend used $((ticks * 1000 / hz)) ms of CPU in 2 s"
else
	echo "not ok $n - a waiting backend used $((ticks * 1000 / hz)) ms of CPU in 2 s"
fi
