#!/usr/bin/env bash
# bench/run.sh: `make bench`.  Same set-up as `make test` (packages, build,
# a throwaway PostgreSQL, here with fsync on, and a throwaway Redis), then
# every scenario at 1, 8 and 32 clients, with synchronous_commit on and
# off, for tokenbucket and the alternatives, in one run:
#
#   A  the token bucket hand-written in PL/pgSQL (SELECT ... FOR UPDATE,
#      arithmetic, UPDATE), on its own table
#   B  one plain SQL UPDATE ... WHERE name = $1 AND <enough> RETURNING, on
#      its own table: the ceiling for one row per bucket
#   C  Redis with a Lua token bucket, called by EVALSHA (redis-benchmark)
#
# tokenbucket runs each scenario twice: on table buckets (tokenbucket) and
# on memory buckets (tokenbucket_memory: the same calls on buckets made
# with memory => true, the library preloaded).
#
# First tokenbucket_proxy, on servers of its own: grants through a
# PL/Proxy database in front of 1, 2 and 4 shard servers, beside the same
# calls made directly, with the CPU time the proxy and the shards spend
# per call (bench/proxy.csv).  Then the gateway's request (bench/gateway.sh:
# the API key lookup and the user's limit in one statement, against the
# lookup and a Redis script in two round trips; bench/gateway.csv), and
# the per-key rows (bench/keys.sh: memory template keys at 10,000,
# 100,000 and 1,000,000 live keys beside named buckets, and under a flood
# of new keys; bench/keys.csv), and the lease rows (bench/leases.sh: a
# lease and its release on a table limit beside tb_acquire, two plain
# UPDATEs and SELECT 1; bench/leases.csv), and the Python client's own
# cost per call (bench/python.py: try_ beside the statement it sends,
# through the bare driver on the same connection, for each driver, taking
# turns call by call; bench/python.csv), and the table bucket at its
# ceilings (bench/table.sh: a grant against a plain UPDATE, a denial
# against SELECT 1, in turns, with each one's instructions;
# bench/table.csv), and AI budgets (bench/budgets.sh: a quota's grant
# against a bucket's, a charge up a three-level hierarchy against
# tb_acquire_all; bench/budgets.csv).  Then the cost of the counters of tb_stats:
# the same calls with tokenbucket.track_stats on and off in turn
# (bench/counters.csv).
#
# Writes bench/results.csv and bench/results.png and prints a table.
# BENCH_SECONDS sets each run's length (default 10); BENCH_ONLY=proxy,
# gateway, leases, keys, python, table, budgets or counters runs that comparison
# alone.
# Not a test: nothing here fails on a speed.

source "$(dirname "$0")/../scripts/common.sh"
source "$TOP/proxy/test/cluster.sh"

: "${BENCH_SECONDS:=10}"
CLIENTS=(1 8 32)
OUT=$TOP/bench/results.csv

tb_install_packages redis-server gnuplot-nox "postgresql-$PGVERSION-plproxy" libhiredis-dev \
	python3-psycopg python3-psycopg2 python3-asyncpg valgrind
tb_build_install

# tokenbucket_proxy first, on servers of its own
trap px_cleanup EXIT
if [ "${BENCH_ONLY:-proxy}" = proxy ]; then
	say "tokenbucket_proxy: direct, and through PL/Proxy to 1, 2 and 4 shards ($BENCH_SECONDS s per run)"
	source "$TOP/bench/proxy.sh"
	[ "${BENCH_ONLY:-}" = proxy ] && exit 0
fi

# Huge pages for the server's shared memory, as for any large one: a new
# backend otherwise faults in, 4 kB at a time, every page of the
# 1,100,000-bucket hash it touches (a million random buckets ran at half
# the rate of 10,000 without them, the same with them).  Set aside for the
# run when we may, given back at the end; huge_pages = try falls back.
HUGEPAGES_BEFORE=
if [ "$(id -u)" -eq 0 ] && [ -w /proc/sys/vm/nr_hugepages ]; then
	HUGEPAGES_BEFORE=$(cat /proc/sys/vm/nr_hugepages)
	echo 1500 >/proc/sys/vm/nr_hugepages || true
fi
restore_hugepages() { [ -z "$HUGEPAGES_BEFORE" ] || echo "$HUGEPAGES_BEFORE" >/proc/sys/vm/nr_hugepages || true; }
say "starting a throwaway PostgreSQL $PGVERSION (fsync on, huge pages: $(sed -n 's/^HugePages_Total: *//p' /proc/meminfo) of 2 MB) and Redis"
TB_SERVER_CONF="fsync = on
shared_buffers = 512MB
max_wal_size = 8GB
checkpoint_timeout = 30min
autovacuum_naptime = 10s
huge_pages = try
tokenbucket.max_memory_buckets = 3000000
tokenbucket.max_template_keys = 1100000"
tb_start_server

REDIS_PORT=$((PGPORT + 1))
"${TB_RUNAS[@]}" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' \
	--appendonly no --dir "$TB_TMP" --daemonize yes --pidfile "$TB_TMP/redis.pid" \
	--logfile "$TB_TMP/redis.log"
trap 'redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true; px_cleanup; restore_hugepages; tb_cleanup' EXIT
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

if [ "${BENCH_ONLY:-gateway}" = gateway ]; then
	say "gateway: the API key lookup and the user's limit, one statement against two round trips ($BENCH_SECONDS s per run)"
	source "$TOP/bench/gateway.sh"
	[ "${BENCH_ONLY:-}" = gateway ] && exit 0
fi
if [ "${BENCH_ONLY:-leases}" = leases ]; then
	say "leases: lease and release on a table limit, beside tb_acquire, two UPDATEs and SELECT 1 ($BENCH_SECONDS s per run)"
	source "$TOP/bench/leases.sh"
	[ "${BENCH_ONLY:-}" = leases ] && exit 0
fi
if [ "${BENCH_ONLY:-keys}" = keys ]; then
	say "keys: memory template keys at 10,000, 100,000 and 1,000,000 live, beside named buckets and SELECT 1; a flood of new keys ($BENCH_SECONDS s per run)"
	source "$TOP/bench/keys.sh"
	[ "${BENCH_ONLY:-}" = keys ] && exit 0
fi
if [ "${BENCH_ONLY:-python}" = python ]; then
	say "python: the client's try_ beside its statement through the bare driver, in turns ($BENCH_SECONDS s per row)"
	createdb python
	psql -q -X -d python -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE EXTENSION tokenbucket;
SELECT tb_create('py:memory', 1e9, 1e9, memory => true), tb_create('py:table', 1e9, 1e9);
SQL
	/usr/bin/python3 "$TOP/bench/python.py" --seconds "$BENCH_SECONDS" --csv "$TOP/bench/python.csv" \
		"host=$PGHOST port=$PGPORT user=$PGUSER dbname=python"
	[ "${BENCH_ONLY:-}" = python ] && exit 0
fi
if [ "${BENCH_ONLY:-table}" = table ]; then
	say "table: a grant against a plain UPDATE, a denial against SELECT 1, in turns ($BENCH_SECONDS s per statement)"
	source "$TOP/bench/table.sh"
	[ "${BENCH_ONLY:-}" = table ] && exit 0
fi
if [ "${BENCH_ONLY:-budgets}" = budgets ]; then
	say "budgets: a quota's grant against a bucket's, a charge up three levels against tb_acquire_all, in turns ($BENCH_SECONDS s per statement)"
	source "$TOP/bench/budgets.sh"
	[ "${BENCH_ONLY:-}" = budgets ] && exit 0
fi

say "loading 10,000 and 1,000,000 buckets"
createdb bench
createdb bench1m
psql -q -X -d bench -v nbuckets=10000 -f "$TOP/bench/setup.sql"
psql -q -X -d bench1m -v nbuckets=1000000 -f "$TOP/bench/setup.sql"

# scenario scripts: $W/<scenario>.<impl>.sql
W=$TB_TMP/workloads
mkdir -p "$W"
plain_update() {	# plain_update KEY-EXPR: alternative B on one key
	echo "UPDATE plain_buckets SET tokens = least(capacity, tokens + extract(epoch FROM statement_timestamp() - ts)::float8 * rate) - 1, ts = greatest(ts, statement_timestamp()) WHERE name = $1 AND least(capacity, tokens + extract(epoch FROM statement_timestamp() - ts)::float8 * rate) >= 1 RETURNING tokens;"
}
echo "SELECT 1;" >"$W/select1.ceiling.sql"
for s in 10k 1m; do
	n=10000; [ $s = 1m ] && n=1000000
	printf '\\set k random(1, %d)\nSELECT tb_acquire(%s);\n' $n "'k' || :k" >"$W/$s.tokenbucket.sql"
	printf '\\set k random(1, %d)\nSELECT tb_acquire(%s);\n' $n "'m:' || :k" >"$W/$s.tokenbucket_memory.sql"
	printf '\\set k random(1, %d)\nSELECT plpgsql_acquire(%s);\n' $n "'k' || :k" >"$W/$s.A_plpgsql.sql"
	printf '\\set k random(1, %d)\n%s\n' $n "$(plain_update "'k' || :k")" >"$W/$s.B_plain_update.sql"
done
for s in hot empty; do
	echo "SELECT tb_acquire('$s');" >"$W/$s.tokenbucket.sql"
	echo "SELECT tb_acquire('m$s');" >"$W/$s.tokenbucket_memory.sql"
	echo "SELECT plpgsql_acquire('$s');" >"$W/$s.A_plpgsql.sql"
	plain_update "'$s'" >"$W/$s.B_plain_update.sql"
done
echo "SELECT tb_acquire_all('{rpm,tpm}', '{1,100}');" >"$W/all.tokenbucket.sql"
echo "SELECT tb_acquire_all('{mrpm,mtpm}', '{1,100}');" >"$W/all.tokenbucket_memory.sql"
echo "SELECT plpgsql_acquire_all('{rpm,tpm}', '{1,100}');" >"$W/all.A_plpgsql.sql"
# the empty bucket of A and B never refills either
for db in bench bench1m; do
	psql -q -X -d $db -c "UPDATE plain_buckets SET tokens = 0, rate = 1e-9 WHERE name = 'empty'"
done
# start measuring from a checkpoint and warm caches
psql -q -X -c "CHECKPOINT"
for db in bench bench1m; do
	pgbench -n -M prepared -c 8 -j 2 -T 2 -f "$W/10k.tokenbucket.sql" $db >/dev/null 2>&1
done

echo "scenario,implementation,synchronous_commit,clients,tps,p50_ms,p99_ms,wal_bytes_per_call" >"$OUT"

# percentile P (0-100) of the latencies (microseconds) in pgbench's logs, in ms
percentile() {
	cat "$TB_TMP"/lat.* | awk '{print $3}' | sort -n |
		awk -v p="$1" '{v[NR] = $1} END {i = int(NR * p / 100); if (i < 1) i = 1; printf "%.3f", v[i] / 1000}'
}

run_pg() {	# run_pg SCENARIO IMPL DB SYNC CLIENTS
	local scenario=$1 impl=$2 db=$3 sync=$4 c=$5 lsn0 lsn1 out tps n wal
	local threads=$((c < 2 ? 1 : 2))
	rm -f "$TB_TMP"/lat.*
	lsn0=$(psql -X -A -t -d "$db" -c "SELECT pg_current_wal_insert_lsn()")
	out=$(PGOPTIONS="-c synchronous_commit=$sync" pgbench -n -M prepared -c "$c" -j "$threads" \
		-T "$BENCH_SECONDS" -f "$W/$scenario.$impl.sql" -l --log-prefix="$TB_TMP/lat" "$db" 2>&1)
	lsn1=$(psql -X -A -t -d "$db" -c "SELECT pg_current_wal_insert_lsn()")
	tps=$(sed -n 's/^tps = \([0-9.]*\) (without.*/\1/p' <<<"$out")
	n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
	if [ -z "$tps" ] || [ -z "$n" ] || [ "$n" -eq 0 ]; then
		echo "$out" >&2
		return 1
	fi
	wal=$(psql -X -A -t -d "$db" -c "SELECT round(pg_wal_lsn_diff('$lsn1', '$lsn0') / $n, 1)")
	printf '%s,%s,%s,%d,%.0f,%s,%s,%s\n' "$scenario" "$impl" "$sync" "$c" "$tps" \
		"$(percentile 50)" "$(percentile 99)" "$wal" | tee -a "$OUT"
}

# The cost of the counters (tb_stats): the hot bucket at 8 clients, with
# tokenbucket.track_stats on and off in turn, three rounds, synchronous
# commit off so that the call is all there is.  Writes bench/counters.csv
# and prints each kind's rate with counters over without.
run_counters() {
	local csv=$TOP/bench/counters.csv round stats impl tps
	echo "implementation,track_stats,round,tps" >"$csv"
	for round in 1 2 3; do
		for stats in on off; do
			for impl in tokenbucket tokenbucket_memory; do
				tps=$(PGOPTIONS="-c synchronous_commit=off -c tokenbucket.track_stats=$stats" \
					pgbench -n -M prepared -c 8 -j 2 -T "$BENCH_SECONDS" -f "$W/hot.$impl.sql" bench 2>&1 |
					sed -n 's/^tps = \([0-9.]*\) (without.*/\1/p')
				printf '%s,%s,%d,%.0f\n' "$impl" "$stats" "$round" "$tps" | tee -a "$csv"
			done
		done
	done
	awk -F, 'NR > 1 { sum[$1 "," $2] += $4 }
		END { for (impl in sum) if (impl ~ /,on$/) { base = impl; sub(/,on$/, "", base)
			printf "%s: %.1f%% of the rate without counters\n", base,
				100 * sum[base ",on"] / sum[base ",off"] } }' "$csv" | sort
}
if [ "${BENCH_ONLY:-counters}" = counters ]; then
	say "counters: tokenbucket.track_stats on and off in turn ($BENCH_SECONDS s per run)"
	run_counters
fi
# BENCH_ONLY=counters (or proxy or gateway, which ended above): that, and nothing else
[ -n "${BENCH_ONLY:-}" ] && exit 0

say "PostgreSQL: $BENCH_SECONDS s per run"
for sync in on off; do
	for c in "${CLIENTS[@]}"; do
		run_pg select1 ceiling bench $sync "$c"
		for impl in tokenbucket tokenbucket_memory A_plpgsql B_plain_update; do
			run_pg 10k $impl bench $sync "$c"
			run_pg hot $impl bench $sync "$c"
			run_pg 1m $impl bench1m $sync "$c"
			run_pg empty $impl bench $sync "$c"
		done
		run_pg all tokenbucket bench $sync "$c"
		run_pg all tokenbucket_memory bench $sync "$c"
		run_pg all A_plpgsql bench $sync "$c"
	done
done

say "Redis + Lua (EVALSHA through redis-benchmark)"
SHA=$(redis-cli -p "$REDIS_PORT" SCRIPT LOAD "$(cat "$TOP/bench/token_bucket.lua")")
redis-cli -p "$REDIS_PORT" HSET empty tokens 0 ts "$(date +%s)" >/dev/null
run_redis() {	# run_redis SCENARIO CLIENTS KEY CAPACITY RATE [RANDOM-RANGE]
	local scenario=$1 c=$2 key=$3 cap=$4 rate=$5 range=${6:-} line
	local n=$((BENCH_SECONDS * 40000))
	line=$(redis-benchmark -p "$REDIS_PORT" -c "$c" -n "$n" ${range:+-r $range} --csv \
		EVALSHA "$SHA" 1 "$key" "$cap" "$rate" 1 | tail -n 1 | tr -d '"')
	IFS=, read -r _ rps _ _ p50 _ p99 _ <<<"$line"
	printf '%s,C_redis_lua,n/a,%d,%.0f,%s,%s,\n' "$scenario" "$c" "$rps" "$p50" "$p99" | tee -a "$OUT"
}
for c in "${CLIENTS[@]}"; do
	run_redis 10k "$c" 'k:__rand_int__' 1e9 1e9 10000
	run_redis hot "$c" hot 1e9 1e9
	run_redis 1m "$c" 'm:__rand_int__' 1e9 1e9 1000000
	run_redis empty "$c" empty 1 1e-9
done

say "sizes at 1,000,000 buckets"
SIZES=$(psql -X -A -t -d bench1m -c "
	SELECT 'tokenbucket: ' || round(pg_total_relation_size('tb_buckets') / count(*)::numeric) || ' bytes per bucket (table ' ||
	       pg_size_pretty(pg_table_size('tb_buckets')) || ', indexes ' || pg_size_pretty(pg_indexes_size('tb_buckets')) || ')'
	FROM tb_buckets
	UNION ALL
	SELECT 'plain table of A and B: ' || round(pg_total_relation_size('plain_buckets') / count(*)::numeric) || ' bytes per bucket'
	FROM plain_buckets")
REDIS_KEYS=$(redis-cli -p "$REDIS_PORT" DBSIZE)
REDIS_MEM=$(redis-cli -p "$REDIS_PORT" INFO memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p' | tr -d '\r')
echo "$SIZES"
echo "Redis: $((REDIS_MEM / REDIS_KEYS)) bytes per key (used_memory over $REDIS_KEYS keys)"

bash "$TOP/bench/report.sh" "$OUT"
