# bench/proxy.sh: the tokenbucket_proxy row of make bench.  Sourced by
# bench/run.sh (after scripts/common.sh and proxy/test/cluster.sh), not run.
#
# Four shard servers and a proxy server on this machine (fsync on,
# synchronous_commit off on the shards, so that a call is what is
# measured), 10,000 table buckets spread over the partitions, each call
# tb_acquire on a random one (always granted).  For 8 and 32 clients:
# directly on one shard, then through the proxy with 1, 2 and 4
# partitions (one server each).  After a warm-up (each proxy session
# opens its connections to the partitions on its first calls), the calls
# made in BENCH_SECONDS are counted (pgbench's per-second log), and so is
# the CPU time every process of each server spent in them (/proc): per
# call on the proxy, and on the shards.  Writes
# bench/proxy.csv; README.md projects from it.

PROXY_CSV=$TOP/bench/proxy.csv
PROXY_WARMUP=8

px_init
for s in s0 s1 s2 s3; do
	px_server "$s" "fsync = on" "synchronous_commit = off" "max_wal_size = 4GB"
done
px_server proxy
px_cluster px1 s0:tb_p0
px_cluster px2 s0:tb_q0 s1:tb_q1
px_cluster px4 s0:tb_r0 s1:tb_r1 s2:tb_r2 s3:tb_r3
for n in 1 2 4; do
	px_psql proxy "px$n" -c "SELECT count(tb_create('k:' || i, 1e9, 1e9)) FROM generate_series(1, 10000) AS i" >/dev/null
done
printf '%s\n' '\set k random(1, 10000)' "SELECT tb_acquire('k:' || :k);" >"$PX/acquire.sql"

# CPU nanoseconds spent so far by the processes of server $1: its
# postmaster and live children (schedstat), and children that exited
# (the postmaster's cutime and cstime, in clock ticks)
px_cpu() {
	local pm pid ns total=0 stat
	pm=$(head -n 1 "$PX/$1/postmaster.pid")
	for pid in "$pm" $(pgrep -P "$pm"); do
		read -r ns _ <"/proc/$pid/schedstat" 2>/dev/null || continue
		total=$((total + ns))
	done
	read -r stat <"/proc/$pm/stat"
	stat=${stat##*) }	# the fields after the command name
	read -r -a stat <<<"$stat"
	echo $((total + (stat[13] + stat[14]) * 1000000000 / $(getconf CLK_TCK)))
}

# px_measure PATH PARTITIONS CLIENTS DB SERVER: pgbench on database DB of
# server SERVER for the warm-up and BENCH_SECONDS more; the calls pgbench
# completed in the seconds after the warm-up (its per-second log), and the
# CPU every server spent in them
px_measure() {
	local path=$1 parts=$2 c=$3 db=$4 server=$5 bench start s i
	local servers=(proxy s0 s1 s2 s3) cpu0=() cpu1=()
	rm -f "$PX"/agg.*
	start=$(date +%s)
	pgbench -n -M prepared -c "$c" -j 2 -T $((PROXY_WARMUP + BENCH_SECONDS + 2)) \
		-l --aggregate-interval=1 --log-prefix="$PX/agg" \
		-h 127.0.0.1 -p "${PX_PORT[$server]}" -U postgres -f "$PX/acquire.sql" "$db" \
		>"$PX/pgbench.out" 2>&1 &
	bench=$!
	sleep $((start + PROXY_WARMUP + 1 - $(date +%s)))
	local t0=$(date +%s)
	for s in "${servers[@]}"; do cpu0+=("$(px_cpu "$s")"); done
	sleep "$BENCH_SECONDS"
	for s in "${servers[@]}"; do cpu1+=("$(px_cpu "$s")"); done
	wait "$bench" || { cat "$PX/pgbench.out" >&2; return 1; }
	local calls proxy_ns=$((cpu1[0] - cpu0[0])) shard_ns=0
	for i in 1 2 3 4; do shard_ns=$((shard_ns + cpu1[i] - cpu0[i])); done
	calls=$(cat "$PX"/agg.* | awk -v t0="$t0" -v t1=$((t0 + BENCH_SECONDS)) \
		'$1 >= t0 && $1 < t1 { n += $2 } END { print n + 0 }')
	awk -v path="$path" -v parts="$parts" -v c="$c" -v n="$calls" -v s="$BENCH_SECONDS" \
		-v pns="$proxy_ns" -v sns="$shard_ns" 'BEGIN {
		printf "%s,%d,%d,%.0f,%.1f,%.1f\n", path, parts, c, n / s, pns / n / 1000, sns / n / 1000 }' |
		tee -a "$PROXY_CSV"
}

echo "path,partitions,clients,calls_per_s,proxy_cpu_us_per_call,shard_cpu_us_per_call" >"$PROXY_CSV"
px_psql s0 postgres -c "CREATE DATABASE direct"
px_psql s0 direct -c "CREATE EXTENSION tokenbucket" \
	-c "SELECT count(tb_create('k:' || i, 1e9, 1e9)) FROM generate_series(1, 10000) AS i" >/dev/null
for c in 8 32; do
	px_measure direct 1 "$c" direct s0
	for n in 1 2 4; do px_measure proxy "$n" "$c" "px$n" proxy; done
done
px_cleanup
