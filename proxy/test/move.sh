#!/usr/bin/env bash
# proxy/test/move.sh: from one server to N under load.  A proxy with four
# partitions that all point at one database (a user of one server adopting
# the proxy), 40 table buckets and a template's keys taken by 8 pgbench
# clients through it, every call recorded on the proxy (its moment, its
# grant, its SQLSTATE); meanwhile tb_move_partition moves partitions 1, 2
# and 3, one after the other, to databases of two other servers.  Then:
# every call that failed failed with class 08 while its partition was
# fenced; test/load/windows.sql finds no window overdrawn; tb_status lists
# each bucket once (a template once per database); each bucket is in the
# database of its partition only; the calls went on after the moves.
# Before the load, with the four partitions on one database, tb_status and
# tb_purge count each bucket once; and the refusals: a partition that does
# not exist, a target that does not answer, one without tokenbucket_shard,
# one that already holds the partition's buckets, a role without the
# grant, a transaction older than the fence outlasting fence_timeout, each
# leaving the cluster and the target as they were.  Prints TAP;
# the fences' lengths and the calls refused as diagnostics.
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
source "$TOP/proxy/test/tap.sh"
export PGOPTIONS="-c client_min_messages=notice"
: "${AFTER_SECONDS:=3}"	# the load goes on after the last move

conn() { echo "host=127.0.0.1 port=${PX_PORT[$1]} dbname=$2"; }
# the partitions' databases at the end, partition i in TARGET[i]
TARGET=(a:tb_s b:tb_m1 c:tb_m2 b:tb_m3)

echo "1..15"
px_init
px_server a
px_server b
px_server c
px_server proxy
for part in a:tb_s a:tb_noshard b:tb_m1 c:tb_m2 b:tb_m3; do
	px_psql "${part%%:*}" postgres -c "CREATE DATABASE ${part#*:}"
	px_psql "${part%%:*}" "${part#*:}" -c 'CREATE EXTENSION tokenbucket'
	[ "$part" = a:tb_noshard ] || px_psql "${part%%:*}" "${part#*:}" -c 'CREATE EXTENSION tokenbucket_shard'
done
px_psql proxy postgres -c 'CREATE DATABASE tb'
P >/dev/null <<SQL
CREATE EXTENSION tokenbucket_proxy CASCADE;
CREATE SERVER tokenbucket FOREIGN DATA WRAPPER plproxy OPTIONS (
	p0 '$(conn a tb_s)', p1 '$(conn a tb_s)', p2 '$(conn a tb_s)', p3 '$(conn a tb_s)');
CREATE USER MAPPING FOR PUBLIC SERVER tokenbucket OPTIONS (user 'postgres');
SELECT count(tb_create('b' || i, 5, 2)) FROM generate_series(0, 39) AS i;
SELECT tb_create('u:*', 3, 1, '10 seconds');   -- a key just taken from is not full for 10 s (test 1)
SELECT count(tb_acquire('u:' || i)) FROM generate_series(1, 100) AS i;
SELECT tb_create('idle:*', 1, 1000);
-- each call: when it began and ended, whether it was granted, its error
CREATE TABLE calls (bucket text, t0 timestamptz, t timestamptz, granted boolean, sqlstate text);
CREATE VIEW grants AS SELECT bucket, CAST(1 AS float8) AS cost, t0, t FROM calls WHERE granted;
CREATE TABLE fences (partition int, t0 timestamptz, t timestamptz);
CREATE FUNCTION take(bucket text) RETURNS void LANGUAGE plpgsql AS \$\$
DECLARE
	t0 timestamptz := clock_timestamp();
	granted boolean;
BEGIN
	granted := tb_acquire(bucket);
	INSERT INTO calls VALUES (bucket, t0, clock_timestamp(), granted, NULL);
EXCEPTION WHEN OTHERS THEN
	INSERT INTO calls VALUES (bucket, t0, clock_timestamp(), NULL, SQLSTATE);
END
\$\$;
SQL
ORIGINAL=$(P -c "SELECT string_agg(partition || ' ' || conninfo, ', ' ORDER BY partition) FROM tb_cluster_partitions()")

# 1. four partitions on one database: tb_status lists each bucket once,
# tb_purge purges each once (the keys of 'u:*' just taken are not full)
got=$(P -c "SELECT count(tb_acquire('u:' || i)) FROM generate_series(1, 100) AS i" \
	-c "SELECT count(tb_acquire('idle:' || i)) FROM generate_series(1, 8) AS i" \
	-c "SELECT count(*) FILTER (WHERE NOT is_template) || ' ' || count(DISTINCT name) FILTER (WHERE NOT is_template) || ' ' || count(*) FILTER (WHERE is_template) FROM tb_status" | tail -n 1)
sleep 0.1
purged=$(P -c "SELECT tb_purge('50 ms')")
P -c "SELECT tb_drop('idle:*')" >/dev/null
if [ "$got" = "148 148 2" ] && [ "$purged" = 8 ]; then
	ok "four partitions on one database: tb_status lists 148 buckets and 2 templates once each, tb_purge purged the 8 idle ones once"
else
	not_ok "four partitions on one database" "tb_status rows, names, templates: $got; purged $purged (not 8)"
fi

# refuse CALL [ROLE]: the SQLSTATE and message of a move refused
refuse() {
	P -c '\set VERBOSITY verbose' ${2:+-c "SET ROLE $2"} -c "$1" 2>&1 | grep -m1 '^ERROR' || true
}
unchanged() {
	[ "$(P -c "SELECT string_agg(partition || ' ' || conninfo, ', ' ORDER BY partition) FROM tb_cluster_partitions()")" = "$ORIGINAL" ] &&
		[ "$(px_psql b tb_m1 -c 'SELECT count(*) FROM tb_buckets')" = 0 ]
}

# 2-6. refusals
out=$(refuse "CALL tb_move_partition(4, '$(conn b tb_m1)')")
out2=$(refuse "CALL tb_move_partition(-1, '$(conn b tb_m1)')")
if [[ $out == "ERROR:  22023: the PL/Proxy cluster \"tokenbucket\" has no partition 4" ]] &&
	[[ $out2 == ERROR:\ \ 22023:* ]] && unchanged; then
	ok "partition 4 and -1 refused with 22023"
else
	not_ok "a partition that does not exist" "$out" "$out2"
fi
out=$(refuse "CALL tb_move_partition(1, 'host=127.0.0.1 port=$(tb_free_port) dbname=tb_m1 user=postgres')")
if [[ $out == "ERROR:  08001: could not connect to the target database" ]] && unchanged; then
	ok "a target that does not answer: 08001, nothing changed"
else
	not_ok "a target that does not answer" "$out"
fi
out=$(refuse "CALL tb_move_partition(1, '$(conn a tb_noshard)')")
if [[ $out == "ERROR:  42883: tokenbucket_shard is missing from the target database" ]] && unchanged &&
	[ "$(px_psql a tb_noshard -c 'SELECT count(*) FROM tb_buckets')" = 0 ]; then
	ok "a target without tokenbucket_shard: 42883, nothing changed"
else
	not_ok "a target without tokenbucket_shard" "$out"
fi
name=$(P -c "SELECT 'b' || i FROM generate_series(0, 39) AS i WHERE tb_shard('b' || i) = 1 LIMIT 1")
px_psql c tb_m2 -q -c "INSERT INTO tb_buckets (name, capacity, refill_rate) VALUES ('$name', 1, 1)"
out=$(refuse "CALL tb_move_partition(1, '$(conn c tb_m2)')")
px_psql c tb_m2 -c "DELETE FROM tb_buckets" >/dev/null
if [[ $out == "ERROR:  42710: the target database already holds buckets of partition 1" ]] && unchanged; then
	ok "a target that holds a bucket of the partition: 42710, nothing changed"
else
	not_ok "a target that holds a bucket of the partition" "$out"
fi
P -c "CREATE ROLE regress_mover LOGIN" -c "GRANT USAGE ON FOREIGN SERVER tokenbucket TO regress_mover" >/dev/null
out=$(refuse "CALL tb_move_partition(1, '$(conn b tb_m1)')" regress_mover)
if [[ $out == "ERROR:  42501: permission denied for procedure tb_move_partition" ]] && unchanged; then
	ok "a role without the grant: 42501, nothing changed"
else
	not_ok "a role without the grant" "$out"
fi

# 7. a session in a transaction begun before the fence, longer than the
# fence_timeout: refused with 55P03, the fence and the copies undone
# (held open until the move has returned, however long its steps take)
PGAPPNAME=tb_old_xact P -c "BEGIN" -c "SELECT tb_acquire('b0')" -c "SELECT pg_sleep(300)" \
	-c "COMMIT" >/dev/null 2>&1 &
busy=$!
for ((i = 0; i < 300; i++)); do
	[ "$(P -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'tb_old_xact' AND query LIKE '%pg_sleep%'")" = 1 ] && break
	sleep 0.1
done
out=$(refuse "CALL tb_move_partition(1, '$(conn b tb_m1)', fence_timeout => '300 ms')")
P -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'tb_old_xact'" >/dev/null
wait $busy || true
if [[ $out == "ERROR:  55P03: sessions that began before the fence of partition 1 still run after 00:00:00.3" ]] && unchanged &&
	[ "$(P -c "SELECT tb_acquire('b0')" 2>&1)" = t ]; then
	ok "a transaction older than the fence outlasting fence_timeout: 55P03, fence and copies undone"
else
	not_ok "a transaction older than the fence" "$out" \
		"$(P -c "SELECT string_agg(partition || ' ' || conninfo, ', ' ORDER BY partition) FROM tb_cluster_partitions()")" \
		"$(px_psql b tb_m1 -c 'SELECT count(*) FROM tb_buckets')" "$(P -c "SELECT tb_acquire('b0')" 2>&1)"
fi

# 8. the moves, under load
cat >"$PX/load.sql" <<'SQL'
\set n random(0, 39)
\set u random(1, 100)
SELECT take('b' || :n);
SELECT take('u:' || :u);
SQL
# (the load runs until AFTER_SECONDS past the last move, however long the
# moves take: ended then by SIGTERM, which pgbench does not report as an
# error; not SIGINT, which a shell that runs the tests in the background
# has its background jobs ignore; runuser is signalled too, which ends
# it whatever it does with its child's end)
px_run pgbench -n -c 8 -j 4 -T 600 -f "$PX/load.sql" -h 127.0.0.1 -p "${PX_PORT[proxy]}" \
	-U postgres tb >"$W/pgbench" 2>&1 &
load=$!
sleep 2
moved=0
for p in 1 2 3; do
	t=${TARGET[$p]}
	if P -c "CALL tb_move_partition($p, '$(conn "${t%%:*}" "${t#*:}")')" 2>"$W/move$p"; then
		moved=$((moved + 1))
	fi
	sed -n "s/.*partition $p moved: .* fenced for .* ms (from \(.*\) to \(.*\)); .*/$p\t\1\t\2/p" "$W/move$p" >>"$W/fences"
	sleep 1
done
sleep "$AFTER_SECONDS"
pkill -TERM -f "pgbench .*$PX/load.sql" || true
wait $load || true
P -c "\\copy fences FROM '$W/fences'"
if [ $moved = 3 ] && [ "$(P -c 'SELECT count(*) FROM fences')" = 3 ] &&
	[ "$(P -c "SELECT string_agg(conninfo, ' ' ORDER BY partition) FROM tb_cluster_partitions()")" = \
	  "$(for t in "${TARGET[@]}"; do conn "${t%%:*}" "${t#*:}"; done | paste -sd' ')" ]; then
	ok "partitions 1, 2 and 3 moved under load, each option switched"
else
	not_ok "the moves" "$(cat "$W"/move*)"
fi
for p in 1 2 3; do sed -n 's/^NOTICE:  /# /p' "$W/move$p"; done
P -F ' ' -c "SELECT count(*), count(*) FILTER (WHERE granted), count(*) FILTER (WHERE sqlstate IS NOT NULL) FROM calls" |
	{ read -r calls granted failed; echo "# $calls calls, $granted granted, $failed failed"; }

# 9. pgbench saw no error: take() records every call's error
if ! grep -qiE 'error|abort' "$W/pgbench"; then
	ok "8 clients through the moves: no client error"
else
	not_ok "pgbench" "$(tail -n 5 "$W/pgbench")"
fi

# 10. every failure: class 08, while the bucket's partition was fenced
got=$(P <<'SQL'
SELECT count(*) || ' ' || count(*) FILTER (WHERE c.sqlstate LIKE '08%' AND EXISTS (
	SELECT FROM fences AS f
	WHERE f.partition = tb_shard(c.bucket) AND c.t >= f.t0 AND c.t0 <= f.t))
FROM calls AS c WHERE c.sqlstate IS NOT NULL
SQL
)
if [ "${got% *}" = "${got#* }" ]; then
	ok "every failed call (${got% *}) failed with class 08 while its partition was fenced"
else
	not_ok "failures outside a fence, or not class 08" "$got" \
		"$(P -c "SELECT sqlstate, count(*) FROM calls WHERE sqlstate IS NOT NULL GROUP BY 1")"
fi

# 11. no window overdrawn across the moves
got=$(P -F ' ' -f "$TOP/test/load/windows.sql" 2>&1) || true
if [[ $got =~ ^[1-9][0-9]*\ 0$ ]]; then
	ok "no window over capacity + rate x w (${got% 0} windows checked)"
else
	not_ok "windows checked, overdrawn" "$got"
fi

# 12. tb_status: each bucket once, the template once per database
got=$(P -c "SELECT count(*) FILTER (WHERE NOT is_template) - count(DISTINCT name) FILTER (WHERE NOT is_template) || ' ' || count(*) FILTER (WHERE is_template) FROM tb_status")
if [ "$got" = "0 4" ]; then
	ok "tb_status lists each bucket once, the template once in each of the 4 databases"
else
	not_ok "tb_status: repeated buckets, template rows" "$got"
fi

# 13. each bucket is in its partition's database, and only there
for p in 0 1 2 3; do
	t=${TARGET[$p]}
	[ "$p" = 3 ] && [ "${TARGET[1]}" = "$t" ] && continue
	px_psql "${t%%:*}" "${t#*:}" -c "SELECT name FROM tb_buckets WHERE name NOT LIKE '%*'" | sed "s/\$/\t$t/"
done >"$W/where"
got=$(P <<SQL
CREATE TEMP TABLE found (name text, place text);
\\copy found FROM '$W/where'
SELECT count(*) || ' ' || count(DISTINCT name) || ' ' ||
	count(*) FILTER (WHERE place <> (ARRAY['${TARGET[0]}', '${TARGET[1]}', '${TARGET[2]}', '${TARGET[3]}'])[tb_shard(name) + 1])
FROM found;
SQL
)
total=$(P -c "SELECT count(*) FROM tb_status WHERE NOT is_template")
if [ "$got" = "$total $total 0" ]; then
	ok "each of the $total buckets is in its partition's database only"
else
	not_ok "buckets found (rows, names, misplaced), buckets in tb_status" "$got" "$total"
fi

# 14. the calls went on, on the new servers
got=$(P -c "SELECT count(*) FROM calls AS c WHERE c.granted AND tb_shard(c.bucket) > 0 AND c.t0 > (SELECT max(t) FROM fences)")
if [ "$got" -gt 0 ]; then
	ok "$got grants on moved partitions after the last move"
else
	not_ok "no grant on the moved partitions after the moves" "$got"
fi

# 15. nothing left running
px_test_stopped
