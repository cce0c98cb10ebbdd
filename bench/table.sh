# bench/table.sh: the table bucket at its ceilings, rows of make bench.
# Sourced by bench/run.sh (with the server running), not run.
#
# A grant (tb_acquire on a random one of 10,000 table buckets) against its
# ceiling, a plain UPDATE ... RETURNING of a random one of 10,000 rows of a
# table of its own (alternative B), and a denial (tb_acquire on a random
# one of 10,000 drained table buckets) against its ceiling, SELECT 1; in
# turns (bench/alternate.c: on one set of connections, each statement runs
# alone for 200 ms, then the next, round and round, so that the machine's
# slower and faster spells, which last seconds, fall on all of them
# alike), at 8 and 32 connections, with synchronous_commit on and off,
# TABLE_ROUNDS (3) runs of TABLE_WARMUP (5) s and then 7 x BENCH_SECONDS s
# counted (each statement BENCH_SECONDS, as in a run of its own).
#
# The order of the turns: SELECT 1, the denial, SELECT 1, the grant,
# SELECT 1, the UPDATE, SELECT 1.  A turn begins while the connections
# finish the statements of the turn before, and with synchronous_commit on
# a write's commit takes a while: so each statement compared follows a
# SELECT 1 or the denial, never a write, and is compared with the one of
# the same standing: the denial with the SELECT 1 after it, the grant with
# the UPDATE; the SELECT 1 after the UPDATE against the one after the
# denial shows what following a write costs a statement (the control).
# Writes bench/table.csv and prints each ratio as the median of its runs'
# ratios, with the instructions of one call of each statement beside them
# (bench/callgrind.sh: a single-user backend of this build, on a data
# directory of its own; written to bench/table_instructions.csv).

TABLE_CSV=$TOP/bench/table.csv
TABLE_INSTRUCTIONS_CSV=$TOP/bench/table_instructions.csv
: "${TABLE_ROUNDS:=3}"
: "${TABLE_WARMUP:=5}"		# seconds of each run not counted

source "$TOP/bench/callgrind.sh"
createdb tableturns
psql -q -X -d tableturns -v ON_ERROR_STOP=1 >/dev/null <<SQL
CREATE EXTENSION tokenbucket;
$CG_TABLES
SQL
[ -x "$TB_TMP/alternate" ] || gcc -O2 -Wall -Wextra -Werror -o "$TB_TMP/alternate" "$TOP/bench/alternate.c" \
	-I"$($PG_CONFIG --includedir)" -L"$($PG_CONFIG --libdir)" -lpq -lpthread

TABLE_TURNS=(select1 denial select1_after_denial grant select1_after_grant update select1_after_update)
echo "statement,synchronous_commit,connections,round,requests_per_s" >"$TABLE_CSV"
for sync in on off; do
	for c in 8 32; do
		for ((round = 1; round <= TABLE_ROUNDS; round++)); do
			"$TB_TMP/alternate" "$((7 * BENCH_SECONDS))" "$TABLE_WARMUP" "$c" 10000 %d \
				"host=$PGHOST port=$PGPORT dbname=tableturns user=postgres options='-c synchronous_commit=$sync'" \
				"$CG_SELECT1" "$CG_DENIAL" "$CG_SELECT1" "$CG_GRANT" "$CG_SELECT1" "$CG_UPDATE" "$CG_SELECT1" |
				while IFS=, read -r i rate; do
					printf '%s,%s,%s,%s,%s\n' "${TABLE_TURNS[i]}" "$sync" "$c" "$round" "$rate" | tee -a "$TABLE_CSV"
				done
		done
	done
done

say "the same statements' instructions per call (callgrind, a single-user backend)"
CG_WORK=$TB_TMP/callgrind
mkdir -p "$CG_WORK"
CG_RUNAS=("${TB_RUNAS[@]}")
[ ${#CG_RUNAS[@]} -eq 0 ] || chown postgres: "$CG_WORK"
cg_datadir "$CG_WORK/data" </dev/null
cg_single "$CG_WORK/data" <<SQL
CREATE EXTENSION tokenbucket;
$CG_TABLES
SQL
echo "statement,instructions" >"$TABLE_INSTRUCTIONS_CSV"
for s in select1 denial update grant; do
	case $s in
	select1) stmt=$CG_SELECT1 ;; denial) stmt=$CG_DENIAL ;; update) stmt=$CG_UPDATE ;; grant) stmt=$CG_GRANT ;;
	esac
	printf '%s,%s\n' $s "$(cg_per_call "$CG_WORK/data" "$stmt" "" keyed)" | tee -a "$TABLE_INSTRUCTIONS_CSV"
done

echo "in turns (medians of $TABLE_ROUNDS runs), and instructions per call:"
awk -F, "$(cat "$TOP/bench/median.awk")"'
FNR == 1 { file++; next }
file == 1 { ins[$1] = $2; next }
{ k = $1 "," $2 "," $3; n[k]++; v[k, n[k]] = $5; rate[k, $4] = $5 }
	END {
		for (s = 0; s < 2; s++)
			for (c = 8; c <= 32; c *= 4) {
				sync = s ? "off" : "on"; t = sync "," c
				printf "synchronous_commit %-3s %2d connections: grant %d/s, UPDATE %d/s: %.2fx;" \
					" denial %d/s, SELECT 1 %d/s: %.2fx; control %.2f\n",
					sync, c, median("grant," t), median("update," t), ratio("grant", "update", t),
					median("denial," t), median("select1_after_denial," t),
					ratio("denial", "select1_after_denial", t),
					ratio("select1_after_update", "select1_after_denial", t)
			}
		printf "instructions per call: grant %d, UPDATE %d: %.2fx; denial %d, SELECT 1 %d: %.2fx\n",
			ins["grant"], ins["update"], ins["grant"] / ins["update"],
			ins["denial"], ins["select1"], ins["denial"] / ins["select1"]
	}' "$TABLE_INSTRUCTIONS_CSV" "$TABLE_CSV"
