#!/usr/bin/env bash
# test/memory.sh: memory and C safety.  Prints TAP.
#
#  1  a backend's memory (pg_backend_memory_contexts) stays flat across
#     MEMORY_CALLS (default 20,000; 1,000,000 for the long run) calls of
#     each entry point in one session: no entry point grows it by more
#     than 32 kB (a block or two of a memory context; a leak of even a few
#     bytes a call would show more)
#  2  a short acquire loop in a single-user backend under valgrind memcheck
#     reports no invalid read or write
set -euo pipefail
: "${MEMORY_CALLS:=20000}"
DB=tb_memory
WORK=$(mktemp -d)
chmod 755 "$WORK"
trap 'rm -rf "$WORK"; dropdb --if-exists "$DB" >/dev/null 2>&1 || true' EXIT
echo "1..2"

createdb "$DB"
psql -X -A -t -q -v ON_ERROR_STOP=1 -v calls="$MEMORY_CALLS" -d "$DB" >"$WORK/flat.out" 2>&1 <<'SQL' || true
CREATE EXTENSION tokenbucket;
SELECT tb_create('big', 1e15, 1e12), tb_create('other', 1e15, 1e12),
       tb_create('empty', 1, 1e-9), tb_acquire('empty'), tb_create('key:*', 1e15, 1e12) \g /dev/null
SELECT count(tb_acquire('key:' || n)) FROM generate_series(0, 99) AS n \g /dev/null
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
-- in this order: tb_purge reads the whole table, so it runs before the
-- others leave it bloated with dead row versions (a million tb_create and
-- tb_drop pairs leave one that a million scans would take an hour to read)
CREATE TABLE calls (ord int GENERATED ALWAYS AS IDENTITY, call text, grew bigint);
INSERT INTO calls (call) VALUES
	('SELECT tb_purge(''1 hour'')'),
	('SELECT tb_acquire(''big'')'), ('SELECT tb_acquire(''big'', 2)'),
	('SELECT tb_acquire(''empty'')'), ('SELECT * FROM tb_try(''big'', 1)'),
	('SELECT * FROM tb_try(''empty'')'), ('SELECT tb_acquire_wait(''big'', 1, ''1 s'')'),
	('SELECT tb_acquire_all(''{big,other}'', ''{1,2}'')'),
	('SELECT tb_acquire_all(''{big,empty}'')'),
	('SELECT tb_acquire_all_wait(''{other,big}'', NULL, ''1 s'')'),
	('SELECT * FROM tb_try_all(''{big,empty}'')'), ('SELECT tb_refund(''big'', 1)'),
	('SELECT tb_settle(''big'', 2, 1)'), ('SELECT tb_sync(''big'', 1e15)'),
	('SELECT tb_pause(''other'', interval ''-1 s'')'),
	('SELECT tb_pause(''other'', now() - interval ''1 s'')'),
	('SELECT tb_alter(''other'', 1e15)'), ('SELECT tb_reset(''other'')'),
	('SELECT tb_acquire(''key:'' || ($1 % 100))'),
	('SELECT tb_create(''tmp'' || $1, 1, 1), tb_drop(''tmp'' || $1)'),
	('SELECT * FROM tb_status WHERE name = ''big''');
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
		echo "ok 1 - backend memory flat: $line"
	else
		echo "not ok 1 - backend memory grew: $line"
	fi
else
	echo "not ok 1 - the memory run failed"
	sed 's/^/# /' "$WORK/flat.out" | tail -n 20
fi

# 2: valgrind memcheck on a single-user backend: its own cluster, since
# single-user mode needs the data directory to itself
RUNAS=()
[ "$(id -u)" -eq 0 ] && { chown postgres: "$WORK"; RUNAS=(runuser -u postgres --); }
BIN=$(pg_config --bindir 2>/dev/null || dirname "$(command -v postgres)")
"${RUNAS[@]}" "$BIN/initdb" -D "$WORK/vg" -A trust --no-sync >/dev/null 2>&1
{
	echo "CREATE EXTENSION tokenbucket;"
	echo "SELECT tb_create('v', 50, 1e6), tb_create('w', 1, 1e-9), tb_create('u:*', 2, 1);"
	for i in $(seq 200); do
		echo "SELECT tb_acquire('v'), tb_acquire('w'), (tb_try('v', 2)).granted, tb_acquire_all('{v,w}'), tb_acquire('u:$i'), tb_settle('v', 2, 1);"
	done
} >"$WORK/vg.sql"
chmod 644 "$WORK/vg.sql"
"${RUNAS[@]}" valgrind --tool=memcheck --trace-children=no --error-limit=no \
	--log-file="$WORK/valgrind.log" "$BIN/postgres" --single -D "$WORK/vg" postgres \
	<"$WORK/vg.sql" >"$WORK/vg.out" 2>&1 || true
invalid=$(grep -c 'Invalid \(read\|write\)' "$WORK/valgrind.log" || true)
ours=$(grep -c 'tokenbucket.so' "$WORK/valgrind.log" || true)
calls=$(grep -c 'tb_acquire = "t"' "$WORK/vg.out" || true)
if [ -s "$WORK/valgrind.log" ] && [ "$invalid" -eq 0 ] && [ "$ours" -eq 0 ] && [ "$calls" -ge 200 ]; then
	echo "ok 2 - valgrind memcheck: $calls acquires in a single-user backend, no invalid read or write, no error in tokenbucket.so"
else
	echo "not ok 2 - valgrind: $invalid invalid reads/writes, $ours reports in tokenbucket.so, $calls acquires"
	grep -B2 -A12 'Invalid \(read\|write\)\|tokenbucket.so' "$WORK/valgrind.log" | head -n 40 | sed 's/^/# /'
fi
