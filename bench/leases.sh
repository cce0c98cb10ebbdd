# bench/leases.sh: the lease rows of make bench.  Sourced by bench/run.sh
# (with the server running), not run.
#
# What an in-flight limit costs, against its ceilings, at 1, 8 and 32
# clients, synchronous_commit on (a lease is as durable as a grant), the
# workloads taking turns for LEASES_ROUNDS (3) rounds, medians printed:
#   select1      SELECT 1: the ceiling of any call
#   acquire      tb_acquire on one table bucket: one durable row update
#   update2      two plain UPDATEs of one row of a table of its own, each
#                its own transaction: the ceiling of a lease and its
#                release, two durable writes
#   lease        tb_lease then tb_release on a limit of 64 that 32 clients
#                never fill (one row per slot: the slots spread the
#                writers; a release looks through its limit's slots)
#   lease_xact   BEGIN; tb_lease(..., 'transaction'); COMMIT: a lease
#                freed by its transaction's end, one write
#   lease_key    lease then release on a random one of 10,000 names of a
#                template limit
#   select2      SELECT 1 twice, each its own statement: the ceiling of two
#                calls that write nothing, as a memory lease and release
#   macquire     tb_acquire on one memory bucket
#   mlease       tb_lease then tb_release on a memory limit of 64
#   mlease_key   the same on a random one of 10,000 names of a memory
#                template limit
# A "transaction" of the lease rows is a lease and its release.  Writes
# bench/leases.csv.

LEASES_CSV=$TOP/bench/leases.csv
: "${LEASES_ROUNDS:=3}"

createdb leases
psql -q -X -d leases -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE EXTENSION tokenbucket;
SELECT tb_create('hot', 1e9, 1e9), tb_create_limit('llm', 64), tb_create_limit('lu:*', 10);
SELECT count(tb_release(tb_lease('lu:' || i))) FROM generate_series(1, 10000) AS i;
SELECT tb_create('mhot', 1e9, 1e9, memory => true), tb_create_limit('mllm', 64, memory => true),
       tb_create_limit('mu:*', 10, memory => true);
CREATE TABLE counter (id int PRIMARY KEY, n bigint);
INSERT INTO counter VALUES (1, 0);
SQL
L=$TB_TMP/leases
mkdir -p "$L"
echo "SELECT 1;" >"$L/select1.sql"
echo "SELECT tb_acquire('hot');" >"$L/acquire.sql"
printf 'UPDATE counter SET n = n + 1 WHERE id = 1;\nUPDATE counter SET n = n - 1 WHERE id = 1;\n' >"$L/update2.sql"
printf "SELECT tb_lease('llm') AS id \\\\gset\nSELECT tb_release(:id);\n" >"$L/lease.sql"
printf "BEGIN;\nSELECT tb_lease('llm', 1, 'transaction');\nCOMMIT;\n" >"$L/lease_xact.sql"
printf "\\\\set k random(1, 10000)\nSELECT tb_lease('lu:' || :k) AS id \\\\gset\nSELECT tb_release(:id);\n" >"$L/lease_key.sql"
printf 'SELECT 1;\nSELECT 1;\n' >"$L/select2.sql"
echo "SELECT tb_acquire('mhot');" >"$L/macquire.sql"
printf "SELECT tb_lease('mllm') AS id \\\\gset\nSELECT tb_release(:id);\n" >"$L/mlease.sql"
printf "\\\\set k random(1, 10000)\nSELECT tb_lease('mu:' || :k) AS id \\\\gset\nSELECT tb_release(:id);\n" >"$L/mlease_key.sql"

leases_run() {	# leases_run WORKLOAD CLIENTS ROUND: one pgbench run, a CSV line
	local tps threads=$(($2 < 2 ? 1 : 2))
	tps=$(pgbench -n -M prepared -c "$2" -j "$threads" -T "$BENCH_SECONDS" -f "$L/$1.sql" leases 2>&1 |
		sed -n 's/^tps = \([0-9.]*\) (without.*/\1/p')
	printf '%s,%s,%s,%.0f\n' "$1" "$2" "$3" "${tps:-0}" | tee -a "$LEASES_CSV"
}

echo "workload,clients,round,tps" >"$LEASES_CSV"
psql -q -X -d leases -c "CHECKPOINT"
for c in 1 8 32; do
	for ((round = 1; round <= LEASES_ROUNDS; round++)); do
		for w in select1 acquire update2 lease lease_xact lease_key select2 macquire mlease mlease_key; do
			leases_run $w "$c" $round
		done
	done
done
awk -F, "$(cat "$TOP/bench/median.awk")"'
NR > 1 { k = $1 "," $2; n[k]++; v[k, n[k]] = $4 }
	END {
		for (c = 1; c <= 32; c = (c == 1 ? 8 : c * 4)) {
			s = median("select1," c); a = median("acquire," c); u = median("update2," c)
			l = median("lease," c); x = median("lease_xact," c); k = median("lease_key," c)
			printf "%2d clients: SELECT 1 %d/s, tb_acquire %d/s, two UPDATEs %d/s;" \
				" lease+release %d/s (%.2fx two UPDATEs), transaction lease %d/s (%.2fx tb_acquire)," \
				" per-key lease+release %d/s (%.2fx two UPDATEs)\n",
				c, s, a, u, l, l / u, x, x / a, k, k / u
			s2 = median("select2," c); ma = median("macquire," c)
			ml = median("mlease," c); mk = median("mlease_key," c)
			printf "%2d clients, memory: two SELECT 1 %d/s, tb_acquire %d/s (%.2fx SELECT 1);" \
				" lease+release %d/s (%.2fx two SELECT 1), per-key lease+release %d/s (%.2fx)\n",
				c, s2, ma, ma / s, ml, ml / s2, mk, mk / s2
		}
	}' "$LEASES_CSV"
