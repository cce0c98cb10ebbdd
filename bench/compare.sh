#!/usr/bin/env bash
# bench/compare.sh BASE [OTHER]: `make bench-compare BASE=... [OTHER=...]`.
# The same calls on two revisions of the library (git revisions of this
# checkout; OTHER defaults to the working tree), in one run on one
# server, taking turns: each round installs one build, restarts the
# server, and runs SELECT 1 and tb_acquire on a hot bucket and on random
# ones of 10,000, memory and table buckets, at 8 and 32 clients, then the
# other build.  Both revisions must be of the same extension version (the
# database keeps its objects; only the library changes).  Writes
# bench/compare.csv and prints each row's median rate on each build and
# their ratio.  Not a test: nothing here fails on a speed.

source "$(dirname "$0")/../scripts/common.sh"

BASE=${1:?usage: bench/compare.sh BASE [OTHER]}
OTHER=${2:-}
: "${BENCH_SECONDS:=10}"
: "${COMPARE_ROUNDS:=3}"
CSV=$TOP/bench/compare.csv

tb_install_packages
say "starting a throwaway PostgreSQL $PGVERSION (fsync on)"
TB_SERVER_CONF="fsync = on
shared_buffers = 256MB
max_wal_size = 4GB"
tb_build_install
tb_start_server

# each revision built in a work tree of its own, its library kept aside
BUILDS=$TB_TMP/builds
mkdir -p "$BUILDS"
trap 'rc=$?; tb_remove_trees; (exit $rc); tb_cleanup' EXIT
tb_build_revision "$BUILDS" base "$BASE"
tb_build_revision "$BUILDS" other "$OTHER"
LIBDIR=$($PG_CONFIG --pkglibdir)
use() {	# use NAME: stop the server, put that build's library in place, start it
	"${TB_RUNAS[@]}" "$PGBIN/pg_ctl" -D "$TB_TMP/data" -w -s stop
	# a new file renamed over the old: a mapped library is never written to
	cp "$BUILDS/$1.so" "$LIBDIR/tokenbucket.so.new"
	mv -f "$LIBDIR/tokenbucket.so.new" "$LIBDIR/tokenbucket.so"
	"${TB_RUNAS[@]}" "$PGBIN/pg_ctl" -D "$TB_TMP/data" -l "$TB_TMP/server.log" -w -s start
}

say "loading 10,000 table and 10,000 memory buckets"
createdb bench
psql -q -X -d bench -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE EXTENSION tokenbucket;
INSERT INTO tb_buckets (name, capacity, refill_rate)
SELECT 'k' || i, 1e9, 1e9 FROM generate_series(1, 10000) AS i;
INSERT INTO tb_buckets (name, capacity, refill_rate) VALUES ('hot', 1e9, 1e9);
SELECT tb_create('m:*', 1e9, 1e9, memory => true), tb_create('mhot', 1e9, 1e9, memory => true);
SQL
W=$TB_TMP/workloads
mkdir -p "$W"
echo "SELECT 1;" >"$W/select1.sql"
echo "SELECT tb_acquire('hot');" >"$W/hot_table.sql"
echo "SELECT tb_acquire('mhot');" >"$W/hot_memory.sql"
printf '\\set k random(1, 10000)\nSELECT tb_acquire(%s);\n' "'k' || :k" >"$W/10k_table.sql"
printf '\\set k random(1, 10000)\nSELECT tb_acquire(%s);\n' "'m:' || :k" >"$W/10k_memory.sql"

echo "build,round,workload,clients,tps" >"$CSV"
for round in $(seq "$COMPARE_ROUNDS"); do
	for b in base other; do
		use $b
		psql -q -X -d bench -c "SELECT count(tb_acquire('m:' || i)) FROM generate_series(1, 10000) AS i" >/dev/null
		for c in 8 32; do
			for w in select1 hot_memory 10k_memory hot_table 10k_table; do
				tps=$(PGOPTIONS="-c synchronous_commit=off" pgbench -n -M prepared -c "$c" -j 2 \
					-T "$BENCH_SECONDS" -f "$W/$w.sql" bench 2>&1 |
					sed -n 's/^tps = \([0-9.]*\) (without.*/\1/p')
				printf '%s,%d,%s,%d,%.0f\n' $b "$round" $w "$c" "$tps" | tee -a "$CSV"
			done
		done
	done
done
use other

say "medians of $COMPARE_ROUNDS rounds: base ($BASE) and other (${OTHER:-working tree})"
awk -F, "$(cat "$TOP/bench/median.awk")"'
NR > 1 { k = $1 "," $3 "," $4; n[k]++; v[k, n[k]] = $5; keys[$3 "," $4] = 1 }
	END { for (k in keys) { b = median("base," k); o = median("other," k)
		printf "%-14s %9d %9d   %.2f\n", k, b, o, o / b } }' "$CSV" | sort
