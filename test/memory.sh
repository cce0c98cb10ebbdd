#!/usr/bin/env bash
# test/memory.sh [CHECK...]: memory and C safety, every check below or
# those named by number (make test runs 1 and the rest as two suites, side
# by side).  Prints TAP.
#
#  1  a backend's memory (pg_backend_memory_contexts) stays flat across
#     MEMORY_CALLS (default 20,000; 1,000,000 for the long run) calls of
#     each entry point in one session: no entry point grows it by more
#     than 32 kB (a block or two of a memory context; a leak of even a few
#     bytes a call would show more)
#     (memory buckets' entry points included)
#  2  a short acquire loop on table and memory buckets in a single-user
#     backend under valgrind memcheck reports no invalid read or write
#  3  one tb_acquire_all over 100,000 new per-key names reads at most 1.5
#     times as many buffers per name as one over 20,000 (linear: 1.1's plan
#     could scan the table per name, 5x as much per name here; buffers, not
#     seconds, which move by more than that between two runs of one size),
#     and the backend's peak resident size grows by less than 100 MB (1.1
#     kept every name's SPI rows: 1.6 GB)
#  4  a million grants from a memory bucket in one session: the backend's
#     memory grows by at most 32 kB (the same bound)
#  5  a million grants in one statement, alternating between two memory
#     buckets, inside one transaction: the backend's memory grows by at
#     most 32 kB over ten such grants (what a rollback needs is kept per
#     bucket and (sub)transaction; 1.4 kept 201 bytes a grant), and the
#     rollback gives every token back
#  6  100,000 changes to a function (CREATE OR REPLACE FUNCTION pg_temp.f(),
#     which resets every backend's list of routed calls), each followed by
#     a routed call (tokenbucket_shard's tb_routed_acquire): the backend's
#     memory grows by at most 32 kB (until issue 44, each reset kept a
#     FmgrInfo and a TupleDesc more: 1 kB a change, 100 MB here), and
#     every call is granted
set -euo pipefail
: "${MEMORY_CALLS:=20000}"
DB=tb_memory
WORK=$(mktemp -d)
chmod 755 "$WORK"
trap 'rm -rf "$WORK"; dropdb --if-exists "$DB" >/dev/null 2>&1 || true' EXIT
CHECKS=("$@")
[ $# -gt 0 ] || CHECKS=(1 2 3 4 5 6)
echo "1..${#CHECKS[@]}"
n=0
# wanted N: whether check N is to run
wanted() { [[ " ${CHECKS[*]} " == *" $1 "* ]]; }
# tap ok|"not ok" TEXT: the next TAP line
tap() { n=$((n + 1)); echo "$1 $n - $2"; }

createdb "$DB"
psql -X -q -v ON_ERROR_STOP=1 -d "$DB" >/dev/null <<'SQL'
CREATE EXTENSION tokenbucket;
CREATE FUNCTION used() RETURNS bigint LANGUAGE sql
	AS 'SELECT sum(used_bytes)::bigint FROM pg_backend_memory_contexts';
-- run(call, n): call n times in this session, committing every 1000
CREATE PROCEDURE run(call text, n int) LANGUAGE plpgsql AS $$
BEGIN
	FOR i IN 1 .. n LOOP
		EXECUTE call USING i;
		IF i % 1000 = 0 THEN
			COMMIT;
		END IF;
	END LOOP;
	COMMIT;
END $$;
SQL

if wanted 1; then
psql -X -A -t -q -v ON_ERROR_STOP=1 -v calls="$MEMORY_CALLS" -d "$DB" >"$WORK/flat.out" 2>&1 <<'SQL' || true
SELECT tb_create('big', 1e9, 1e12), tb_create('other', 1e9, 1e12),
       tb_create('empty', 1, 1e-9), tb_acquire('empty'), tb_create('key:*', 1e9, 1e12) \g /dev/null
SELECT count(tb_acquire('key:' || n)) FROM generate_series(0, 99) AS n \g /dev/null
SELECT tb_create('mbig', 1e9, 1e12, memory => true), tb_create('mkey:*', 1e9, 1e12, memory => true) \g /dev/null
-- in this order: tb_purge reads the whole table, so it runs before the
-- others leave it bloated with dead row versions (a million tb_create and
-- tb_drop pairs leave one that a million scans would take an hour to read)
CREATE TABLE calls (ord int GENERATED ALWAYS AS IDENTITY, call text, grew bigint);
INSERT INTO calls (call) VALUES
	('SELECT tb_purge(''1 hour'')'),
	('SELECT tb_acquire(''big'')'), ('SELECT tb_acquire(''big'', 2)'),
	('SELECT tb_acquire(''empty'')'), ('SELECT * FROM tb_try(''big'', 1)'),
	('SELECT * FROM tb_try(''empty'')'), ('SELECT * FROM tb_peek(''key:unmade'')'),
	('SELECT tb_acquire_wait(''big'', 1, ''1 s'')'),
	('SELECT tb_acquire_all(''{big,other}'', ''{1,2}'')'),
	('SELECT tb_acquire_all(''{big,empty}'')'),
	('SELECT tb_acquire_all_wait(''{other,big}'', NULL, ''1 s'')'),
	('SELECT * FROM tb_try_all(''{big,empty}'')'), ('SELECT tb_refund(''big'', 1)'),
	('SELECT tb_settle(''big'', 2, 1)'), ('SELECT tb_sync(''big'', 1e9)'),
	('SELECT tb_pause(''other'', interval ''-1 s'')'),
	('SELECT tb_pause_until(''other'', now() - interval ''1 s'')'),
	('SELECT tb_alter(''other'', 1e9)'), ('SELECT tb_reset(''other'')'),
	('SELECT tb_acquire(''key:'' || ($1 % 100))'),
	('SELECT tb_create(''tmp'' || $1, 1, 1), tb_drop(''tmp'' || $1)'),
	('SELECT * FROM tb_status WHERE name = ''big'''),
	('SELECT tb_acquire(''mbig'')'), ('SELECT * FROM tb_try(''mbig'', 2)'),
	('SELECT * FROM tb_peek(''mkey:unmade'')'), ('SELECT tb_acquire(''mkey:'' || ($1 % 100))'),
	('SELECT tb_acquire_all(''{big,mbig}'', ''{1,2}'')'),
	('SELECT tb_acquire_wait(''mbig'', 1, ''1 s'')'),
	('SELECT tb_settle(''mbig'', 2, 1), tb_pause(''mbig'', interval ''-1 s''), tb_reset(''mbig'')'),
	('SELECT tb_alter(''mbig'', 1e9)'),
	('SELECT tb_create(''mtmp'' || $1, 1, 1, memory => true), tb_drop(''mtmp'' || $1)'),
	('SELECT * FROM tb_status WHERE name = ''mbig''');
-- each entry point: a warm-up of 1,000 calls, then the measured run
SELECT stmt FROM (
	SELECT ord, 1 AS step, format('CALL run(%L, 1000)', call) AS stmt FROM calls
	UNION ALL SELECT ord, 2, format('UPDATE calls SET grew = -used() WHERE call = %L', call) FROM calls
	UNION ALL SELECT ord, 3, format('CALL run(%L, %s)', call, :calls) FROM calls
	UNION ALL SELECT ord, 4, format('UPDATE calls SET grew = grew + used() WHERE call = %L', call) FROM calls
) AS s ORDER BY ord, step \gexec
SELECT 'most: ' || max(grew) || ' bytes (' || (SELECT call FROM calls ORDER BY grew DESC LIMIT 1)
       || '), all: ' || sum(grew) || ' bytes over ' || :calls || ' calls of each of '
       || count(*) || ' entry points' FROM calls;
SQL
if grep -q '^most: ' "$WORK/flat.out"; then
	line=$(grep '^most: ' "$WORK/flat.out")
	most=$(sed -n 's/^most: \(-\?[0-9]*\) bytes.*/\1/p' <<<"$line")
	if [ "$most" -le 32768 ]; then
		tap ok "backend memory flat: $line"
	else
		tap "not ok" "backend memory grew: $line"
	fi
else
	tap "not ok" "the memory run failed"
	sed 's/^/# /' "$WORK/flat.out" | tail -n 20
fi

fi

if wanted 2; then
# 2: valgrind memcheck on a single-user backend: its own cluster, since
# single-user mode needs the data directory to itself
RUNAS=()
[ "$(id -u)" -eq 0 ] && { chown postgres: "$WORK"; RUNAS=(runuser -u postgres --); }
BIN=$(pg_config --bindir 2>/dev/null || dirname "$(command -v postgres)")
"${RUNAS[@]}" "$BIN/initdb" -D "$WORK/vg" -A trust --no-sync >/dev/null 2>&1
{
	echo "CREATE EXTENSION tokenbucket;"
	echo "SELECT tb_create('v', 50, 1e6), tb_create('w', 1, 1e-9), tb_create('u:*', 2, 1);"
	echo "SELECT tb_create('mv', 50, 1e6, memory => true), tb_create('mu:*', 2, 1, memory => true);"
	for i in $(seq 200); do
		echo "SELECT tb_acquire('v'), tb_acquire('w'), (tb_try('v', 2)).granted, tb_acquire_all('{v,w}'), tb_acquire('u:$i'), tb_settle('v', 2, 1);"
		echo "SELECT tb_acquire('mv') AS m, tb_acquire_all('{mv,v}'), tb_acquire('mu:$i'), tb_settle('mv', 2, 1), count(*) FROM tb_status;"
	done
} >"$WORK/vg.sql"
chmod 644 "$WORK/vg.sql"
"${RUNAS[@]}" valgrind --tool=memcheck --trace-children=no --error-limit=no \
	--log-file="$WORK/valgrind.log" "$BIN/postgres" --single -D "$WORK/vg" \
	-c shared_preload_libraries=tokenbucket postgres \
	<"$WORK/vg.sql" >"$WORK/vg.out" 2>&1 || true
invalid=$(grep -c 'Invalid \(read\|write\)' "$WORK/valgrind.log" || true)
ours=$(grep -c 'tokenbucket.so' "$WORK/valgrind.log" || true)
calls=$(grep -c 'tb_acquire = "t"' "$WORK/vg.out" || true)
memory=$(grep -c 'm = "t"' "$WORK/vg.out" || true)
if [ -s "$WORK/valgrind.log" ] && [ "$invalid" -eq 0 ] && [ "$ours" -eq 0 ] && [ "$calls" -ge 200 ] &&
	[ "$memory" -ge 200 ]; then
	tap ok "valgrind memcheck: $calls acquires on table and $memory on memory buckets in a single-user backend, no invalid read or write, no error in tokenbucket.so"
else
	tap "not ok" "valgrind: $invalid invalid reads/writes, $ours reports in tokenbucket.so, $calls acquires, $memory on memory buckets"
	grep -B2 -A12 'Invalid \(read\|write\)\|tokenbucket.so' "$WORK/valgrind.log" | head -n 40 | sed 's/^/# /'
fi

fi

if wanted 3; then
# 3: many new names in one call: the shared buffers the call reads (hit or
# read, as EXPLAIN (ANALYZE, BUFFERS) counts them, the SPI statements it
# runs included), and memory as the backend's own peak resident size
# (VmHWM: the shared buffers it touches count too, which is why the bound
# is 100 MB and not less); the seconds are shown, not checked
psql -X -A -t -q -v ON_ERROR_STOP=1 -d "$DB" >"$WORK/many.out" 2>&1 <<'SQL' || true
SELECT tb_create('n:*', 10, 1) \g /dev/null
CREATE FUNCTION peak_rss() RETURNS bigint LANGUAGE sql AS $$
	SELECT substring(pg_read_file('/proc/self/status') FROM 'VmHWM:\s+(\d+)')::bigint * 1024 $$;
CREATE TABLE many (names int, seconds float8, blocks bigint, grew bigint);
CREATE PROCEDURE take_many(n int, prefix text) LANGUAGE plpgsql AS $$
DECLARE
	t0 timestamptz;
	rss0 bigint := peak_rss();
	plan json;
BEGIN
	t0 := clock_timestamp();
	EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, SUMMARY OFF, FORMAT JSON) SELECT tb_acquire_all($1)'
		INTO plan USING ARRAY(SELECT prefix || g FROM generate_series(1, n) AS g);
	INSERT INTO many VALUES (n, extract(epoch FROM clock_timestamp() - t0),
		(plan->0->'Plan'->>'Shared Hit Blocks')::bigint + (plan->0->'Plan'->>'Shared Read Blocks')::bigint,
		peak_rss() - rss0);
END $$;
CALL take_many(1000, 'n:warm:');
CALL take_many(20000, 'n:a:');
CALL take_many(100000, 'n:c:');
SELECT format('%s %s %s %s %s', max(blocks) FILTER (WHERE names = 100000),
              max(blocks) FILTER (WHERE names = 20000),
              round(max(seconds) FILTER (WHERE names = 100000)::numeric, 2),
              round(max(seconds) FILTER (WHERE names = 20000)::numeric, 2),
              max(grew) FILTER (WHERE names = 100000))
FROM many;
SQL
read -r big small big_s small_s grew < <(tail -n 1 "$WORK/many.out") || true
what="100,000 new names in one call read ${big:-?} buffers against ${small:-?} for 20,000 (at most 7.5x: 1.5x per name; ${big_s:-?} s against ${small_s:-?} s), peak RSS grew"
if [ -n "${grew:-}" ] && [ "$grew" -ge 0 ] 2>/dev/null && [ "${small:-0}" -gt 0 ] 2>/dev/null &&
	awk -v b="$big" -v s="$small" -v g="$grew" 'BEGIN { exit !(b <= 7.5 * s && g < 100 * 1024 * 1024) }'; then
	tap ok "$what $((grew / 1024 / 1024)) MB (under 100 MB)"
else
	tap "not ok" "$what ${grew:-?} bytes (under 100 MB)"
	sed 's/^/# /' "$WORK/many.out" | tail -n 20
fi

fi

if wanted 4; then
# 4: a million memory grants in one session, committing every 1000 (what
# an undo record of a grant keeps is freed at commit)
psql -X -A -t -q -v ON_ERROR_STOP=1 -d "$DB" >"$WORK/million.out" 2>&1 <<'SQL' || true
SELECT tb_create('million', 1e9, 1e12, memory => true) \g /dev/null
CALL run('SELECT tb_acquire(''million'')', 10000);
SELECT used() AS before \gset
CALL run('SELECT tb_acquire(''million'')', 1000000);
SELECT used() - :before;
SQL
grew=$(tail -n 1 "$WORK/million.out")
if [[ $grew =~ ^-?[0-9]+$ ]] && [ "$grew" -le 32768 ]; then
	tap ok "a million grants from a memory bucket in one session: backend memory grew $grew bytes (at most 32768)"
else
	tap "not ok" "a million memory grants: backend memory grew ${grew:-?} bytes (at most 32768)"
	sed 's/^/# /' "$WORK/million.out" | tail -n 20
fi

fi

if wanted 5; then
# 5: a million grants in one transaction, one statement, two buckets in
# turn: measured before the commit, then rolled back
psql -X -A -t -q -v ON_ERROR_STOP=1 -d "$DB" >"$WORK/onexact.out" 2>&1 <<'SQL' || true
SELECT tb_create('ma', 1e9, 1, '1 hour', memory => true), tb_create('mb', 1e9, 1, '1 hour', memory => true) \g /dev/null
BEGIN;
SELECT count(tb_acquire(CASE WHEN g % 2 = 0 THEN 'ma' ELSE 'mb' END)) FROM generate_series(1, 10) AS g \g /dev/null
SELECT used() AS before \gset
SELECT count(tb_acquire(CASE WHEN g % 2 = 0 THEN 'ma' ELSE 'mb' END)) FROM generate_series(1, 1000000) AS g \g /dev/null
SELECT used() - :before AS grew \gset
ROLLBACK;
SELECT :grew || ' ' || (SELECT round(min(tokens)) FROM tb_status WHERE name IN ('ma', 'mb'));
SQL
read -r grew tokens < <(tail -n 1 "$WORK/onexact.out") || true
if [[ ${grew:-} =~ ^-?[0-9]+$ ]] && [ "$grew" -le 32768 ] && [ "${tokens:-}" = 1000000000 ]; then
	tap ok "a million grants on two memory buckets in one statement grew the backend's memory $grew bytes (at most 32768), and the rollback gave them all back"
else
	tap "not ok" "a million grants in one statement: memory grew ${grew:-?} bytes (at most 32768), tokens after rollback ${tokens:-?} (1000000000)"
	sed 's/^/# /' "$WORK/onexact.out" | tail -n 20
fi

fi

if wanted 6; then
# 6: the changes and the routed calls in one session, committing every
# 1000 (a change in any other session resets the list the same way)
psql -X -A -t -q -v ON_ERROR_STOP=1 -d "$DB" >"$WORK/routed.out" 2>&1 <<'SQL' || true
CREATE EXTENSION tokenbucket_shard;
SELECT tb_create('routed', 1e9, 1, '1 hour') \g /dev/null
-- churn(n, granted): n times, a change to a function then a routed call;
-- granted counts the calls that answered (true, no error)
CREATE PROCEDURE churn(n int, INOUT granted int) LANGUAGE plpgsql AS $$
DECLARE
	r tb_routed_result_boolean;
BEGIN
	granted := 0;
	FOR i IN 1 .. n LOOP
		CREATE OR REPLACE FUNCTION pg_temp.f() RETURNS int LANGUAGE sql AS 'SELECT 1';
		r := tb_routed_acquire('routed');
		IF r.result AND r.error IS NULL THEN
			granted := granted + 1;
		END IF;
		IF i % 1000 = 0 THEN
			COMMIT;
		END IF;
	END LOOP;
	COMMIT;
END $$;
CALL churn(1000, 0) \g /dev/null
SELECT used() AS before \gset
CALL churn(100000, 0) \gset
SELECT used() - :before AS grew \gset
SELECT :grew || ' ' || :granted;
SQL
read -r grew granted < <(tail -n 1 "$WORK/routed.out") || true
if [[ ${grew:-} =~ ^-?[0-9]+$ ]] && [ "$grew" -le 32768 ] && [ "${granted:-}" = 100000 ]; then
	tap ok "100,000 function changes, each followed by a routed call: backend memory grew $grew bytes (at most 32768), all 100000 calls granted"
else
	tap "not ok" "100,000 function changes and routed calls: backend memory grew ${grew:-?} bytes (at most 32768), ${granted:-?} calls granted (100000)"
	sed 's/^/# /' "$WORK/routed.out" | tail -n 20
fi
fi
