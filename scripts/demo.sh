#!/usr/bin/env bash
# scripts/demo.sh: `make demo`.  On a fresh Debian 12 machine, as root:
# installs what it needs, builds and installs tokenbucket, starts a
# throwaway PostgreSQL, and lets 16 workers hammer one bucket of 2 tokens
# a second (capacity 10) for 10 seconds, printing a row per second: calls
# made, calls granted.  The burst, then the steady rate.  Then the same
# workers on the same limit kept in shared memory (a memory bucket), for
# half as long, logging only the grants: the same burst and rate.  Then
# what tb_stats counted for both, and a picture (gnuplot, PNG) of the
# tokens granted each second against the limit, whose path it prints.
# Then it removes everything it started.

source "$(dirname "$0")/common.sh"

: "${DEMO_SECONDS:=10}"
: "${DEMO_WORKERS:=16}"

tb_install_packages gnuplot-nox
tb_build_install
say "starting a throwaway PostgreSQL $PGVERSION"
tb_start_server

psql -q -X -v ON_ERROR_STOP=1 <<'SQL'
CREATE EXTENSION tokenbucket;
SELECT tb_create('demo', capacity => 10, refill => 2, per => '1 second') \g /dev/null
CREATE UNLOGGED TABLE demo_calls (at timestamptz NOT NULL, granted boolean NOT NULL);
SQL

WORKLOAD=$TB_TMP/worker.sql
echo "INSERT INTO demo_calls SELECT clock_timestamp(), tb_acquire('demo');" >"$WORKLOAD"

say "$DEMO_WORKERS workers call SELECT tb_acquire('demo') as fast as they can" \
	"(bucket: capacity 10, 2 tokens/s)"
START=$(psql -X -A -t -c "SELECT clock_timestamp()")
TABLE_START=$START
pgbench -n -c "$DEMO_WORKERS" -j 2 -T "$DEMO_SECONDS" -f "$WORKLOAD" >"$TB_TMP/pgbench.log" 2>&1 &
BENCH=$!

printf '\n%8s %12s %12s\n' second calls granted
for ((s = 0; s < DEMO_SECONDS; s++)); do
	# wait until second s has passed on the server's clock, then report it
	psql -X -q -o /dev/null -c "SELECT pg_sleep_until('$START'::timestamptz + ($s + 1) * interval '1 second')"
	psql -X -A -t -F ' ' -c "
		SELECT to_char($s + 1, '9999999'), to_char(count(*), '99999999999'),
		       to_char(count(*) FILTER (WHERE granted), '99999999999')
		FROM demo_calls
		WHERE at >= '$START'::timestamptz + $s * interval '1 second'
		  AND at <  '$START'::timestamptz + ($s + 1) * interval '1 second'"
done
wait $BENCH || { cat "$TB_TMP/pgbench.log"; exit 1; }

psql -X -A -t -c "
	SELECT format(E'\n%s calls, %s granted in %s s: at most 10 + 2 x %s = %s allowed.',
	              count(*), count(*) FILTER (WHERE granted),
	              round(extract(epoch FROM max(at) - '$START')::numeric, 2),
	              round(extract(epoch FROM max(at) - '$START')::numeric, 2),
	              floor(10 + 2 * extract(epoch FROM max(at) - '$START')))
	FROM demo_calls"

# the same limit as a memory bucket: only grants are logged, so the calls
# a second are pgbench's own count
psql -q -X -v ON_ERROR_STOP=1 <<'SQL'
SELECT tb_create('demo_memory', capacity => 10, refill => 2, per => '1 second', memory => true) \g /dev/null
CREATE UNLOGGED TABLE demo_grants (at timestamptz NOT NULL);
SQL
echo "INSERT INTO demo_grants SELECT clock_timestamp() WHERE tb_acquire('demo_memory');" >"$WORKLOAD"
MEMORY_SECONDS=$(((DEMO_SECONDS + 1) / 2))
say "the same $DEMO_WORKERS workers on a memory bucket, tb_create(..., memory => true)," \
	"for $MEMORY_SECONDS s: its tokens live in shared memory, and a denial writes nothing"
START=$(psql -X -A -t -c "SELECT clock_timestamp()")
MEMORY_START=$START
pgbench -n -c "$DEMO_WORKERS" -j 2 -T "$MEMORY_SECONDS" -P 1 -f "$WORKLOAD" >"$TB_TMP/pgbench.log" 2>&1 ||
	{ cat "$TB_TMP/pgbench.log"; exit 1; }
printf '\n%8s %12s %12s\n' second calls granted
s=0
while read -r tps; do
	granted=$(psql -X -A -t -c "
		SELECT count(*) FROM demo_grants
		WHERE at >= '$START'::timestamptz + $s * interval '1 second'
		  AND at <  '$START'::timestamptz + ($s + 1) * interval '1 second'")
	s=$((s + 1))
	printf '%8d %12.0f %12d\n' "$s" "$tps" "$granted"
done < <(sed -n 's/^progress: [0-9.]* s, \([0-9.]*\) tps.*/\1/p' "$TB_TMP/pgbench.log")
calls=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$TB_TMP/pgbench.log")
psql -X -A -t -c "
	SELECT format(E'\n%s calls, %s granted in %s s: at most 10 + 2 x %s = %s allowed.',
	              $calls, count(*),
	              round(extract(epoch FROM clock_timestamp() - '$START')::numeric, 2),
	              round(extract(epoch FROM clock_timestamp() - '$START')::numeric, 2),
	              floor(10 + 2 * extract(epoch FROM clock_timestamp() - '$START')))
	FROM demo_grants"
say "what the counters saw: SELECT ... FROM tb_stats (the grants each run logged, beside them)"
psql -X -q -c "
	SELECT s.name, s.memory, s.granted, s.denied, s.granted_tokens,
	       CASE s.name WHEN 'demo' THEN (SELECT count(*) FROM demo_calls WHERE granted)
	                   ELSE (SELECT count(*) FROM demo_grants) END AS grants_logged
	FROM tb_stats AS s ORDER BY s.name"

# The picture: tokens granted in each second of each run, against the
# limit (2 a second, after the burst of the 10 the bucket held).
PNG=${DEMO_PNG:-/tmp/tokenbucket-demo.png}
for run in table memory; do
	if [ $run = table ]; then
		from="demo_calls WHERE granted"; start=$TABLE_START
	else
		from="demo_grants"; start=$MEMORY_START
	fi
	psql -X -A -t -F ' ' -c "
		SELECT s + 0.5, count(g.at)
		FROM generate_series(0, $DEMO_SECONDS - 1) AS s
		LEFT JOIN (SELECT at FROM $from) AS g
		       ON g.at >= '$start'::timestamptz + s * interval '1 second'
		      AND g.at <  '$start'::timestamptz + (s + 1) * interval '1 second'
		WHERE s < CASE '$run' WHEN 'table' THEN $DEMO_SECONDS ELSE $MEMORY_SECONDS END
		GROUP BY s ORDER BY s" >"$TB_TMP/$run.dat"
done
gnuplot <<GP
set terminal pngcairo size 900,500 font ',10' noenhanced
set output '$PNG'
set title "$DEMO_WORKERS workers calling tb_acquire as fast as they can: tokens granted each second"
set xlabel 'seconds since the run started'
set ylabel 'tokens granted in that second'
set xrange [0:$DEMO_SECONDS]
set yrange [0:*]
set grid ytics
set key top right
set style fill solid 0.5
set boxwidth 0.4
plot '$TB_TMP/table.dat' using (\$1 - 0.2):2 with boxes title 'table bucket', \
     '$TB_TMP/memory.dat' using (\$1 + 0.2):2 with boxes title 'memory bucket', \
     2 with lines lw 2 dt 2 title 'limit: 2 tokens a second (after a burst of 10)'
GP
echo
echo "The picture of both runs: $PNG"

say "stopping the server and removing its files"
