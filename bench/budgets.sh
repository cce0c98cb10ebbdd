# bench/budgets.sh: what AI budgets cost, rows of make bench.  Sourced by
# bench/run.sh (with the server running), not run.
#
# Issue 49's two ceilings, each on a random one of 10,000 buckets:
#   - a quota's grant (a bucket with a monthly calendar in Europe/Berlin)
#     against a continuous bucket's grant, table and memory: the calendar
#     must cost next to nothing;
#   - a charge up a three-level hierarchy (tb_acquire on a user, whose
#     parents tb_parents gives: its team, then the organisation) against
#     tb_acquire_all over the same three names, table and memory: the
#     parents found without the caller naming them.
# In turns (bench/alternate.c, as bench/table.sh: each statement runs alone
# for 200 ms, then the next, so that the machine's slow and fast spells
# fall on all alike) at 8 connections, BUDGETS_ROUNDS (2) runs; and in
# instructions per call (bench/callgrind.sh: a single-user backend of this
# build, a data directory of its own).  Writes bench/budgets.csv and
# bench/budgets_instructions.csv; prints each ratio (median of the runs).

BUDGETS_CSV=$TOP/bench/budgets.csv
BUDGETS_INSTRUCTIONS_CSV=$TOP/bench/budgets_instructions.csv
: "${BUDGETS_ROUNDS:=2}"

source "$TOP/bench/callgrind.sh"

# Ten thousand of each: continuous buckets and quotas in the table ('k',
# 'q') and in memory ('mk', 'mq'), and users 'u:<team>:<n>' of 100 teams
# 't:<team>' under one organisation 'o', in the table and in memory
# ('mu:', 'mt:', 'mo'); every one holds far more than a run takes (1e9:
# a cost of 1 is above the smallest a bucket accounts for, capacity / 2^32).
BUDGETS_TABLES="INSERT INTO tb_buckets (name, capacity, refill_rate) SELECT 'k' || i, 1e9, 1e9 FROM generate_series(1, 10000) AS i;
INSERT INTO tb_buckets (name, capacity, refill_rate, period, period_anchor, time_zone) SELECT 'q' || i, 1e9, 1e9, '1 month', '2026-01-01', 'Europe/Berlin' FROM generate_series(1, 10000) AS i;
INSERT INTO tb_buckets (name, capacity, refill_rate, memory) SELECT 'mk' || i, 1e9, 1e9, true FROM generate_series(1, 10000) AS i;
INSERT INTO tb_buckets (name, capacity, refill_rate, period, period_anchor, time_zone, memory) SELECT 'mq' || i, 1e9, 1e9, '1 month', '2026-01-01', 'Europe/Berlin', true FROM generate_series(1, 10000) AS i;
INSERT INTO tb_buckets (name, capacity, refill_rate, memory) SELECT p || 'u:' || (i % 100) || ':' || i, 1e9, 1e9, p = 'm' FROM generate_series(1, 10000) AS i, unnest(ARRAY['', 'm']) AS p;
INSERT INTO tb_buckets (name, capacity, refill_rate, memory) SELECT p || 't:' || i, 1e9, 1e9, p = 'm' FROM generate_series(0, 99) AS i, unnest(ARRAY['', 'm']) AS p;
INSERT INTO tb_buckets (name, capacity, refill_rate, memory) VALUES ('o', 1e9, 1e9, false), ('mo', 1e9, 1e9, true);
INSERT INTO tb_parents (child, parent) VALUES ('u:*', 't:{1}'), ('t:*', 'o'), ('mu:*', 'mt:{1}'), ('mt:*', 'mo');
VACUUM ANALYZE;"

# name, statement ($1: the random key, text)
BUDGETS_STATEMENTS=(
	"grant|SELECT tb_acquire('k' || \$1)"
	"quota|SELECT tb_acquire('q' || \$1)"
	"memory_grant|SELECT tb_acquire('mk' || \$1)"
	"memory_quota|SELECT tb_acquire('mq' || \$1)"
	"acquire_all|SELECT tb_acquire_all(ARRAY['u:' || \$1::int % 100 || ':' || \$1, 't:' || \$1::int % 100, 'o'])"
	"hierarchy|SELECT tb_acquire('u:' || \$1::int % 100 || ':' || \$1)"
	"memory_acquire_all|SELECT tb_acquire_all(ARRAY['mu:' || \$1::int % 100 || ':' || \$1, 'mt:' || \$1::int % 100, 'mo'])"
	"memory_hierarchy|SELECT tb_acquire('mu:' || \$1::int % 100 || ':' || \$1)"
)

createdb budgets
psql -q -X -d budgets -v ON_ERROR_STOP=1 >/dev/null <<SQL
CREATE EXTENSION tokenbucket;
$BUDGETS_TABLES
SQL
[ -x "$TB_TMP/alternate" ] || gcc -O2 -Wall -Wextra -Werror -o "$TB_TMP/alternate" "$TOP/bench/alternate.c" \
	-I"$($PG_CONFIG --includedir)" -L"$($PG_CONFIG --libdir)" -lpq -lpthread

# the pairs compared, each in runs of its own two statements
echo "statement,round,requests_per_s" >"$BUDGETS_CSV"
for pair in "0 1" "2 3" "4 5" "6 7"; do
	read -r a b <<<"$pair"
	for ((round = 1; round <= BUDGETS_ROUNDS; round++)); do
		names=("${BUDGETS_STATEMENTS[a]%%|*}" "${BUDGETS_STATEMENTS[b]%%|*}")
		"$TB_TMP/alternate" "$((2 * BENCH_SECONDS))" 3 8 10000 %d \
			"host=$PGHOST port=$PGPORT dbname=budgets user=postgres options='-c synchronous_commit=off'" \
			"${BUDGETS_STATEMENTS[a]#*|}" "${BUDGETS_STATEMENTS[b]#*|}" |
			while IFS=, read -r i rate; do
				printf '%s,%s,%s\n' "${names[i]}" "$round" "$rate" | tee -a "$BUDGETS_CSV"
			done
	done
done

say "the same statements' instructions per call (callgrind, a single-user backend)"
CG_WORK=$TB_TMP/callgrind-budgets
mkdir -p "$CG_WORK"
CG_RUNAS=("${TB_RUNAS[@]}")
[ ${#CG_RUNAS[@]} -eq 0 ] || chown postgres: "$CG_WORK"
# room for the 30,102 memory buckets (the default is 10,000)
echo "tokenbucket.max_memory_buckets = 50000" | cg_datadir "$CG_WORK/data"
cg_single "$CG_WORK/data" <<SQL
CREATE EXTENSION tokenbucket;
$BUDGETS_TABLES
SQL
echo "statement,instructions" >"$BUDGETS_INSTRUCTIONS_CSV"
for s in "${BUDGETS_STATEMENTS[@]}"; do
	printf '%s,%s\n' "${s%%|*}" "$(cg_per_call "$CG_WORK/data" "${s#*|}" "" keyed)" | tee -a "$BUDGETS_INSTRUCTIONS_CSV"
done

echo "in turns at 8 connections, synchronous_commit off (medians of $BUDGETS_ROUNDS runs), and instructions per call:"
awk -F, "$(cat "$TOP/bench/median.awk")"'
FNR == 1 { file++; next }
file == 1 { ins[$1] = $2; next }
{ n[$1]++; v[$1, n[$1]] = $3; rate[$1 ",", $2] = $3 }
END {
	split("grant quota memory_grant memory_quota acquire_all hierarchy memory_acquire_all memory_hierarchy", s, " ")
	for (i = 1; i <= 8; i += 2)
		printf "%-18s %8d/s against %-18s %8d/s: %.2fx; instructions %d against %d: %.3fx\n",
			s[i + 1], median(s[i + 1]), s[i], median(s[i]), ratio(s[i + 1], s[i], ""),
			ins[s[i + 1]], ins[s[i]], ins[s[i + 1]] / ins[s[i]]
}' "$BUDGETS_INSTRUCTIONS_CSV" "$BUDGETS_CSV"
