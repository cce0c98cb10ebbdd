#!/usr/bin/env bash
# test/wait.sh: tb_acquire_wait and tb_acquire_all_wait on the real clock,
# a few seconds each.  Prints TAP.
#
#  1-2  granted at most 200 ms after the moment the tokens exist, never
#       before (one bucket; two)
#  3    a 300 ms timeout returns false after 300 to 500 ms
#  4    pg_cancel_backend ends a wait within 500 ms, with the usual error
#  5    a 200 ms statement_timeout ends a wait after 200 to 700 ms, with the
#       usual error
#  6-7  a sleeping waiter holds no row lock: tb_acquire and tb_refund go
#       on, and the waiter takes the token refunded
#  8    no starvation: a cost-10 waiter on a 10/s bucket amid four sessions
#       waiting for 1 token each is served after at most five of theirs
#  9    a waiting backend uses at most 50 ms of CPU in 2 s
# 10-11 a memory bucket whose tokens are an hour away wakes its waiter at
#       once, within 200 ms, when a refund or a committed tb_alter gives
#       it tokens (the waiter would otherwise sleep until its timeout)
# 12-14 a wait on a memory bucket ended by pg_cancel_backend, by
#       statement_timeout or by pg_terminate_backend leaves nothing behind:
#       the bucket, full again, is purged like any other
#
# Every time is measured by the server's clock: clock_timestamp() around a
# call, or pg_stat_activity's query_start and state_change, which the
# waiting backend itself sets; never across starting a client, which takes
# 100 ms or more on a busy machine.  Each time limit is two orders of
# magnitude above the millisecond or two the code needs, yet below the 1 s
# at which a waiter re-reads its bucket anyway, so a wait that misses its
# moment, a cancel or a timeout still fails; fairness is counted, not
# timed; the CPU limit is ten times what a waiter uses.
set -euo pipefail
DB=tb_wait
WORK=$(mktemp -d)
trap 'exec 3>&-; kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"; dropdb --if-exists "$DB" >/dev/null 2>&1 || true' EXIT

# a wait that never ends fails its check instead of hanging the suite
export PGOPTIONS="${PGOPTIONS:-} -c statement_timeout=60s"

LATE=200	# ms after the moment: a grant (1-2), a timeout (3)
ENDS=500	# ms after the cancel (4), after the statement_timeout (5)
CPU=50		# ms of CPU in 2 s of waiting (9); it needs a few

source "$(dirname "$0")/checks.sh"
# session NAME: a psql kept open on the fifo $WORK/NAME.in (write to it on
# fd 3), its output in $WORK/NAME.out.  Its backend outlives an error, so
# pg_stat_activity keeps when the failed statement started and ended.
session() {
	mkfifo "$WORK/$1.in"
	PGAPPNAME=$1 psql -X -A -t -d "$DB" <"$WORK/$1.in" >"$WORK/$1.out" 2>&1 &
	exec 3>"$WORK/$1.in"
}

createdb "$DB"
q >/dev/null <<'SQL'
CREATE EXTENSION tokenbucket;
CREATE TABLE timed (test text PRIMARY KEY, took interval);

-- ms(i): an interval in milliseconds, for the checks' messages
CREATE FUNCTION ms(i interval) RETURNS text LANGUAGE sql
	AS $$SELECT coalesce(round(extract(epoch FROM i) * 1000, 1) || ' ms', 'none')$$;

-- sleeping_pid(app): the backend of application_name app once it sleeps in
-- a wait (on its latch: wait_event_type Extension); NULL after 30 s
CREATE FUNCTION sleeping_pid(app text) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
	p int;
	t0 timestamptz := clock_timestamp();
BEGIN
	LOOP
		PERFORM pg_stat_clear_snapshot();
		SELECT pid INTO p FROM pg_stat_activity
		WHERE application_name = app AND state = 'active' AND wait_event_type = 'Extension';
		EXIT WHEN p IS NOT NULL OR clock_timestamp() - t0 > interval '30 s';
		PERFORM pg_sleep(0.005);
	END LOOP;
	RETURN p;
END $$;

-- ended(p, since): once backend p is idle again (at most 30 s after
-- "since"), the moment its last statement ended, as it recorded it
CREATE FUNCTION ended(p int, since timestamptz) RETURNS timestamptz LANGUAGE plpgsql AS $$
DECLARE
	st text;
	at timestamptz;
BEGIN
	LOOP
		PERFORM pg_stat_clear_snapshot();
		SELECT state, state_change INTO st, at FROM pg_stat_activity WHERE pid = p;
		EXIT WHEN st IS DISTINCT FROM 'active' OR clock_timestamp() - since > interval '30 s';
		PERFORM pg_sleep(0.005);
	END LOOP;
	RETURN CASE WHEN st = 'idle' THEN at END;
END $$;

-- wait_lateness(names, costs): empty the buckets, compute from their rows
-- the moment all of them hold their cost, wait for it; how long after that
-- moment (or after the call, had the tokens come first) the grant came
CREATE FUNCTION wait_lateness(names text[], costs float8[]) RETURNS interval
LANGUAGE plpgsql AS $$
DECLARE
	ready timestamptz;
	called timestamptz;
	granted boolean;
BEGIN
	PERFORM tb_acquire(name, tokens) FROM tb_status WHERE name = ANY (names);
	SELECT max(updated_at + (deficit + c.cost - capacity) / refill_rate * interval '1 s')
	INTO ready FROM tb_buckets JOIN unnest(names, costs) AS c(name, cost) USING (name);
	called := clock_timestamp();
	granted := tb_acquire_all_wait(names, costs);
	RETURN CASE WHEN granted THEN clock_timestamp() - greatest(ready, called) END;
END $$;

SELECT tb_create('one', 1, 4), tb_create('rpm', 2, 5), tb_create('tpm', 100, 200);
-- a bucket that refills once an hour never comes in time
SELECT tb_create('slow', 1, 1, '1 hour'), tb_acquire('slow');
SELECT tb_create('mslow', 2, 1, '1 hour', memory => true);
SQL
echo "1..14"

# 1: an empty bucket of 1 at 4/s has its token 250 ms later
q -c "INSERT INTO timed SELECT 'one', wait_lateness('{one}', '{1}')"
check "tb_acquire_wait is granted $(q -c "SELECT ms(took) FROM timed WHERE test = 'one'") after the moment the token exists (0 to $LATE ms)" \
	"(SELECT took BETWEEN '0' AND '$LATE ms' FROM timed WHERE test = 'one')"

# 2: two buckets; the later one (tpm, 300 ms) decides
q -c "INSERT INTO timed SELECT 'all', wait_lateness('{tpm,rpm}', '{60,1}')"
check "tb_acquire_all_wait is granted $(q -c "SELECT ms(took) FROM timed WHERE test = 'all'") after the moment both buckets hold their cost (0 to $LATE ms)" \
	"(SELECT took BETWEEN '0' AND '$LATE ms' FROM timed WHERE test = 'all')"

# 3: one statement reads the clock on either side of the wait
q -c "CREATE TABLE timeout AS SELECT clock_timestamp() AS t0, tb_acquire_wait('slow', 1, '300 ms') AS granted, clock_timestamp() AS t1"
check "a 300 ms timeout returns false after $(q -c "SELECT ms(t1 - t0) FROM timeout") (300 to $((300 + LATE)) ms)" \
	"(SELECT NOT granted AND t1 - t0 BETWEEN '300 ms' AND '$((300 + LATE)) ms' FROM timeout)"

# 4: cancel the waiter as soon as it sleeps (a wait that noticed only at its
# next re-read would take a second), then read when its statement ended
session tb_cancel
waiter=$!
echo "SELECT tb_acquire_wait('slow');" >&3
q >/dev/null <<'SQL'
DO $$
DECLARE
	p int := sleeping_pid('tb_cancel');
	t0 timestamptz;
BEGIN
	t0 := clock_timestamp();
	PERFORM pg_cancel_backend(p);
	INSERT INTO timed SELECT 'cancel', ended(p, t0) - t0;
END $$;
SQL
exec 3>&-
wait $waiter || true
error=$(grep -c 'ERROR:  canceling statement due to user request' "$WORK/tb_cancel.out" || true)
check "pg_cancel_backend ends a wait $(q -c "SELECT ms(took) FROM timed WHERE test = 'cancel'") after it is sent (at most $ENDS ms), with the usual error" \
	"$error = 1 AND (SELECT took BETWEEN '0' AND '$ENDS ms' FROM timed WHERE test = 'cancel')"

# 5: statement_timeout, from the statement's start to its end as the
# waiting backend recorded them
session tb_timeout
waiter=$!
printf '%s\n' "SET statement_timeout = 200;" "SELECT tb_acquire_wait('slow');" >&3
q >/dev/null <<'SQL'
DO $$
DECLARE
	t0 timestamptz := clock_timestamp();
	p int;
	e timestamptz;
BEGIN
	LOOP	-- until its backend has started the wait
		PERFORM pg_stat_clear_snapshot();
		SELECT pid INTO p FROM pg_stat_activity
		WHERE application_name = 'tb_timeout' AND query LIKE 'SELECT tb_acquire_wait%';
		EXIT WHEN p IS NOT NULL OR clock_timestamp() - t0 > interval '30 s';
		PERFORM pg_sleep(0.005);
	END LOOP;
	e := ended(p, t0);
	PERFORM pg_stat_clear_snapshot();
	INSERT INTO timed SELECT 'statement_timeout', e - query_start FROM pg_stat_activity WHERE pid = p;
END $$;
SQL
exec 3>&-
wait $waiter || true
error=$(grep -c 'ERROR:  canceling statement due to statement timeout' "$WORK/tb_timeout.out" || true)
check "a 200 ms statement_timeout ends a wait after $(q -c "SELECT ms(took) FROM timed WHERE test = 'statement_timeout'") (200 to $((200 + ENDS)) ms), with the usual error" \
	"$error = 1 AND (SELECT took BETWEEN '200 ms' AND '$((200 + ENDS)) ms' FROM timed WHERE test = 'statement_timeout')"

# 6: while one session sleeps waiting for 'slow', others use it without
# waiting (a row lock held by the sleeper would hold them for up to 10 s):
# a refund to it arrives, and the waiter takes it at its next look
PGAPPNAME=tb_sleeper psql -X -A -t -d "$DB" -c "SELECT tb_acquire_wait('slow', 1, '10 s')" >"$WORK/sleeper.out" 2>&1 &
sleeper=$!
asleep=$(q -c "SELECT (sleeping_pid('tb_sleeper') IS NOT NULL)::text")
check "while a waiter sleeps, tb_acquire and tb_refund on its bucket do not wait for it" \
	"$asleep AND (SELECT count(*) = 1 FROM (SELECT set_config('lock_timeout', '1s', true), tb_acquire('slow'), tb_refund('slow', 1)) AS s)"
wait $sleeper || true
check "... and the waiter takes the token refunded" "'$(cat "$WORK/sleeper.out")' = 't'"

# 8: fairness.  Four sessions keep waiting for 1 token each on a 10/s
# bucket, each grant recorded with the moment it was decided; once they
# have drained it and queue, a fifth asks for 10.  Served in arrival
# order, it comes after at most the four requests ahead of it, and one
# more if a session gets round between the fifth's clock_timestamp() and
# its joining the queue; a waiter passed over would see dozens granted, or
# time out.  Counted, not timed.
q >/dev/null <<'SQL'
SELECT tb_create('fair', 10, 10), tb_acquire('fair', 10);
CREATE TABLE small (t timestamptz);
CREATE TABLE big (streaming boolean, t0 timestamptz, granted boolean, t timestamptz, t1 timestamptz);
SQL
cat >"$WORK/small.sql" <<'SQL'
BEGIN;
SELECT tb_acquire_wait('fair', 1, '10 s')::int AS granted \gset
\if :granted
INSERT INTO small SELECT updated_at FROM tb_buckets WHERE name = 'fair';
\endif
END;
SQL
# long enough to outlast the big request; ended once it is served
pgbench -n -c 4 -j 2 -T 60 -f "$WORK/small.sql" "$DB" >"$WORK/stream.out" 2>&1 &
stream=$!
q >/dev/null <<'SQL'
DO $$
DECLARE
	t0 timestamptz := clock_timestamp();
	streaming boolean;
	granted boolean;
BEGIN
	LOOP	-- until 'fair' is drained: one sleeps for a token, two queue behind
		PERFORM pg_stat_clear_snapshot();
		SELECT count(*) FILTER (WHERE wait_event_type = 'Extension') >= 1
		       AND count(*) FILTER (WHERE wait_event = 'advisory') >= 2
		INTO streaming FROM pg_stat_activity WHERE application_name = 'pgbench';
		EXIT WHEN streaming OR clock_timestamp() - t0 > interval '30 s';
		PERFORM pg_sleep(0.005);
	END LOOP;
	t0 := clock_timestamp();
	granted := tb_acquire_wait('fair', 10, '20 s');
	INSERT INTO big SELECT streaming, t0, granted, CASE WHEN granted THEN updated_at END, clock_timestamp()
	FROM tb_buckets WHERE name = 'fair';
END $$;
SQL
q -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'pgbench'" >/dev/null
wait $stream || true
ahead=$(q -c "SELECT count(*) FROM small, big WHERE small.t > big.t0 AND small.t < big.t")
queued=$(q -c "SELECT CASE WHEN NOT streaming THEN ' (the four never queued)' END FROM big")
check "a cost-10 waiter amid four cost-1 waiters is served after $ahead of theirs (at most 5), in $(q -c "SELECT ms(t1 - t0) FROM big")$queued" \
	"(SELECT streaming AND granted AND $ahead <= 5 FROM big)"

# 9: CPU time of a waiting backend over two seconds of waiting, read from
# /proc by this shell alone (builtins, no process started between reads);
# nanoseconds from schedstat, else clock ticks
PGAPPNAME=tb_idle psql -X -A -t -d "$DB" -c "SELECT tb_acquire_wait('slow', 1, '30 s')" >/dev/null 2>&1 &
idle=$!
pid=$(q -c "SELECT sleeping_pid('tb_idle')")
cpu_ns() {	# sets $ns to the CPU time of backend $1
	local f
	if [ -r "/proc/$1/schedstat" ]; then
		read -r ns _ <"/proc/$1/schedstat"
	else
		read -r -a f <"/proc/$1/stat"
		ns=$(((f[13] + f[14]) * 1000000000 / $(getconf CLK_TCK)))
	fi
}
used=
if [ -n "$pid" ] && cpu_ns "$pid"; then
	before=$ns start=$EPOCHREALTIME
	sleep 2
	if cpu_ns "$pid"; then
		used=$(((ns - before) / 1000000)) took=$EPOCHREALTIME
		seconds=$(awk "BEGIN { printf \"%.2f\", $took - $start }")
	fi
fi
# still waiting at the end, or the window was not all waiting
still=$(q -c "SELECT count(*) FROM pg_stat_activity WHERE pid = ${pid:-0} AND wait_event_type = 'Extension'")
q -c "SELECT pg_cancel_backend(${pid:-0})" >/dev/null
wait $idle || true
n=$((n + 1))
if [ -n "$used" ] && [ "$still" = 1 ] && [ "$used" -le "$CPU" ]; then
	echo "ok $n - a waiting backend used $used ms of CPU in $seconds s (at most $CPU ms)"
else
	echo "not ok $n - a waiting backend used ${used:-?} ms of CPU in ${seconds:-?} s (at most $CPU ms; still waiting: ${still:-?})"
fi

# 10-11: the waiter on a memory bucket sleeps until its tokens are due, an
# hour away, or its 10 s timeout; a refund (at once) or a tb_alter (when it
# commits) sets its latch.  The moment is marked just before, on the same
# connection; the waiter's own state_change says when it ended.
for how in "tb_refund('mslow', 1)" "tb_alter('mslow', refill => 1, per => '1 ms')"; do
	q -c "SELECT tb_alter('mslow', refill => 1, per => '1 hour'), tb_reset('mslow'), tb_acquire('mslow', 2)" >/dev/null
	rm -f "$WORK/tb_mem.in"
	session tb_mem
	memwaiter=$!
	echo "SELECT tb_acquire_wait('mslow', 1, '10 s');" >&3
	pid=$(q -c "SELECT sleeping_pid('tb_mem')")
	q -c "CREATE TEMP TABLE mark AS SELECT clock_timestamp() AS t0" -c "SELECT $how" \
		-c "DELETE FROM timed WHERE test = 'wake'" \
		-c "INSERT INTO timed SELECT 'wake', ended(${pid:-0}, t0) - t0 FROM mark" >/dev/null
	exec 3>&-
	wait $memwaiter || true
	check "$how wakes a waiter on a memory bucket $(q -c "SELECT ms(took) FROM timed WHERE test = 'wake'") after it (at most $LATE ms), and it is granted" \
		"'$(cat "$WORK/tb_mem.out")' = 't' AND (SELECT took BETWEEN '0' AND '$LATE ms' FROM timed WHERE test = 'wake')"
done

# 12-14: however a wait on a memory bucket ends, it leaves no mark on the
# bucket: full again, the bucket is purged (a mark left by a cancelled wait
# once kept it, and filled the hash, until the server restarted)
q -c "SELECT tb_create('mw:*', 1, 1, '1 hour', memory => true)" >/dev/null
for how in cancel statement_timeout terminate; do
	key=mw:$how
	q -c "SELECT tb_acquire('$key')" >/dev/null
	timeout=
	[ $how = statement_timeout ] && timeout="SET statement_timeout = 200;"
	PGAPPNAME=tb_mw psql -X -A -t -d "$DB" -c "$timeout" -c "SELECT tb_acquire_wait('$key', 1, '1 hour')" \
		>"$WORK/mw.out" 2>&1 &
	mw=$!
	pid=$(q -c "SELECT sleeping_pid('tb_mw')")
	case $how in
	cancel) q -c "SELECT pg_cancel_backend(${pid:-0})" >/dev/null ;;
	terminate) q -c "SELECT pg_terminate_backend(${pid:-0})" >/dev/null ;;
	esac
	wait $mw || true
	q -c "SELECT tb_reset('$key')" >/dev/null
	check "a wait on a memory bucket ended by $how leaves nothing behind: the bucket, full again, is purged" \
		"${pid:-0} > 0 AND tb_purge('0 s') >= 1 AND NOT EXISTS (SELECT 1 FROM tb_memory_buckets() WHERE name = '$key')"
done
