# bench/keys.sh: the per-key rows of make bench.  Sourced by bench/run.sh
# (with the server running), not run.
#
# Keys made from a memory template, as a gateway's per-user buckets are:
# tb_acquire on a random one of 10,000, then 100,000, then 1,000,000 live
# keys of 'mk:*' (each used once before its run, so that every key of the
# range lives), beside tb_acquire on a random one of 10,000 named memory
# buckets, on one named memory bucket (hot), SELECT 1, and the key's name
# made alone (SELECT 'mk:' || k: the statement without the limit),
# counters on, 8 and 32 clients, in one run, the five taking turns for
# KEYS_ROUNDS (3) rounds, each round starting one later in the list (so
# that none always runs first or last).  Each run counts from KEYS_WARMUP
# (5) seconds after its start: its new backends first map the pages of
# shared memory they touch, which on this VM took a million keys' rate from
# 36,000 to 55,000 a second over its first seconds (a pooled application's
# backends do that once; SELECT 1 has nothing to map).  Printed: the
# median rates, and each ratio as the median of its rounds' ratios (a
# round's runs follow one another, so the machine's slower and faster
# spells, which move a rate by a tenth and more here, fall on both sides
# of a ratio).  Then
# the flood: the 10,000 keys' rate at 8 clients alone, and with one more
# session making FLOOD_RATE (2,000) new keys of another template a second
# (an attacker's made-up user ids), and with one running SELECT 1 as
# often (what any ninth session costs), three rounds in turn.  (Unthrottled,
# one flooding session takes a whole core of a 2-core machine, CPU that
# the others then do not have, whatever the locks.)  Writes
# bench/keys.csv and prints the ratios.
#
# The same five statements are then measured in turns (bench/alternate.c):
# on one set of connections, each statement runs alone for 200 ms, then
# the next, round and round, so that the machine's spells, which last
# seconds, fall on all five alike; SELECT 1 takes two of the turns, the
# second a control (its rate against the first's says how far two runs of
# one statement in turns can differ).  KEYS_ROUNDS runs of KEYS_WARMUP s
# and then 6 x BENCH_SECONDS s counted (each statement BENCH_SECONDS, as
# in a run of its own), for each number of keys and of clients, right
# after that number's pgbench runs.  Writes bench/keys_turns.csv and
# prints its ratios as above.

KEYS_CSV=$TOP/bench/keys.csv
TURNS_CSV=$TOP/bench/keys_turns.csv
: "${FLOOD_RATE:=2000}"		# new keys a second the flooding session makes
: "${KEYS_ROUNDS:=3}"
: "${KEYS_WARMUP:=5}"		# seconds of each run not counted

createdb keys
psql -q -X -d keys -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE EXTENSION tokenbucket;
SELECT tb_create('mk:*', 1e9, 1e9, memory => true), tb_create('flood:*', 1e9, 1e9, memory => true);
SELECT count(tb_create('nm' || i, 1e9, 1e9, memory => true)) FROM generate_series(1, 10000) AS i;
SQL
K=$TB_TMP/keys
mkdir -p "$K"
echo "SELECT 1;" >"$K/select1.sql"
echo "SELECT tb_acquire('nm1');" >"$K/hot.sql"
printf '\\set k random(1, 10000)\nSELECT tb_acquire(%s);\n' "'nm' || :k" >"$K/named.sql"
for n in 10000 100000 1000000; do
	printf '\\set k random(1, %d)\nSELECT tb_acquire(%s);\n' $n "'mk:' || :k" >"$K/keys$n.sql"
	printf '\\set k random(1, %d)\nSELECT %s;\n' $n "'mk:' || :k" >"$K/name$n.sql"
done
printf '\\set k random(1, 1000000000)\nSELECT tb_acquire(%s);\n' "'flood:' || :k || ':' || :client_id" >"$K/flood.sql"

steady() {	# steady FILE CLIENTS: the rate of FILE after KEYS_WARMUP seconds
	pgbench -n -M prepared -c "$2" -j 2 -T "$((KEYS_WARMUP + BENCH_SECONDS))" -P 1 -f "$K/$1" keys 2>&1 |
		awk -v w="$KEYS_WARMUP" '$1 == "progress:" && $2 + 0 > w { sum += $4; n++ }
			END { if (n) printf "%.0f\n", sum / n }'
}

keys_run() {	# keys_run WORKLOAD LIVE CLIENTS [ROUND]: one pgbench run, a CSV line
	local tps
	tps=$(steady "$1.sql" "$3")
	printf '%s,%s,%s,%s,%.0f\n' "$1" "$2" "$3" "${4:-1}" "${tps:-0}" | tee -a "$KEYS_CSV"
}

# turns LIVE CLIENTS ROUND: the five statements (and the control) in turns
TURNS=(select1 hot "name" named keys select1_again)
turns() {
	local i rate
	"$TB_TMP/alternate" "$((6 * BENCH_SECONDS))" "$KEYS_WARMUP" "$2" "$1" %d \
		"host=$PGHOST port=$PGPORT dbname=keys user=postgres" \
		"SELECT 1" "SELECT tb_acquire('nm1')" "SELECT 'mk:' || \$1" \
		"10000|SELECT tb_acquire('nm' || \$1)" "SELECT tb_acquire('mk:' || \$1)" "SELECT 1" |
		while IFS=, read -r i rate; do
			printf '%s,%s,%s,%s,%s\n' "${TURNS[i]}" "$1" "$2" "$3" "$rate" | tee -a "$TURNS_CSV"
		done
}
gcc -O2 -Wall -Wextra -Werror -o "$TB_TMP/alternate" "$TOP/bench/alternate.c" \
	-I"$($PG_CONFIG --includedir)" -L"$($PG_CONFIG --libdir)" -lpq -lpthread

echo "workload,live_keys,clients,round,tps" >"$KEYS_CSV"
echo "workload,live_keys,clients,round,tps" >"$TURNS_CSV"
made=0
for n in 10000 100000 1000000; do
	psql -q -X -d keys -c "SELECT count(tb_acquire('mk:' || i)) FROM generate_series($made + 1, $n) AS i" >/dev/null
	made=$n
	for c in 8 32; do
		order=(select1 hot "name$n" named "keys$n")
		for ((round = 1; round <= KEYS_ROUNDS; round++)); do
			for ((i = 0; i < ${#order[@]}; i++)); do
				keys_run "${order[(i + round - 1) % ${#order[@]}]}" $n "$c" $round
			done
		done
	done
	for c in 8 32; do
		for ((round = 1; round <= KEYS_ROUNDS; round++)); do
			turns $n "$c" $round
		done
	done
done

# the flood: one session making new keys beside the 8 on existing ones;
# and, for what any ninth session costs them on this machine, one running
# SELECT 1 as often
# beside FILE: the 10,000 keys' rate at 8 clients while one more session
# runs FILE FLOOD_RATE times a second (its pgbench output in $K/beside.out)
beside() {
	pgbench -n -M prepared -c 1 -R "$FLOOD_RATE" -T "$((KEYS_WARMUP + BENCH_SECONDS + 2))" -f "$K/$1" keys \
		>"$K/beside.out" 2>&1 &
	local other=$!
	sleep 1
	steady keys10000.sql 8
	wait $other || true
}
for round in 1 2 3; do
	keys_run keys10000 1000000 8 "$round"
	tps=$(beside flood.sql)
	flooded=$(sed -n 's/^tps = \([0-9.]*\) (without.*/\1/p' "$K/beside.out")
	printf '%s,%s,%s,%s,%.0f\n' keys10000_flooded 1000000 8 "$round" "${tps:-0}" | tee -a "$KEYS_CSV"
	printf '%s,%s,%s,%s,%.0f\n' flood_new_keys 1000000 1 "$round" "${flooded:-0}" | tee -a "$KEYS_CSV"
	tps=$(beside select1.sql)
	printf '%s,%s,%s,%s,%.0f\n' keys10000_beside_select1 1000000 8 "$round" "${tps:-0}" | tee -a "$KEYS_CSV"
done

awk -F, "$(cat "$TOP/bench/median.awk")"'
NR > 1 { k = $1 "," $2 "," $3; n[k]++; v[k, n[k]] = $5; rate[k, $4] = $5 }
	END {
		for (live = 10000; live <= 1000000; live *= 10)
			for (c = 8; c <= 32; c *= 4) {
				s = median("select1," live "," c); nm = median("named," live "," c)
				k = median("keys" live "," live "," c); h = median("hot," live "," c)
				a = median("name" live "," live "," c)
				printf "%7d live keys, %2d clients: SELECT 1 %d/s, hot %d/s, name alone %d/s, named %d/s, keys %d/s:" \
					" hot %.2fx SELECT 1; keys %.2fx named, %.2fx SELECT 1, %.2fx the name alone\n",
					live, c, s, h, a, nm, k, ratio("hot", "select1", live "," c),
					ratio("keys" live, "named", live "," c), ratio("keys" live, "select1", live "," c),
					ratio("keys" live, "name" live, live "," c)
			}
		a = median("keys10000,1000000,8"); f = median("keys10000_flooded,1000000,8")
		printf "flood: 10,000 keys at 8 clients %d/s alone, %d/s beside a session making %d new keys a second: %.2fx\n",
			a, f, median("flood_new_keys,1000000,1"), ratio("keys10000_flooded", "keys10000", "1000000,8")
		b = median("keys10000_beside_select1,1000000,8")
		printf "       %d/s beside a session running SELECT 1 as often: %.2fx (the flood %.2fx of that)\n",
			b, ratio("keys10000_beside_select1", "keys10000", "1000000,8"),
			ratio("keys10000_flooded", "keys10000_beside_select1", "1000000,8")
	}' "$KEYS_CSV"

echo "in turns (the same statements taking 200 ms turns on one set of connections):"
awk -F, "$(cat "$TOP/bench/median.awk")"'
NR > 1 { k = $1 "," $2 "," $3; n[k]++; v[k, n[k]] = $5; rate[k, $4] = $5 }
	END {
		for (live = 10000; live <= 1000000; live *= 10)
			for (c = 8; c <= 32; c *= 4) {
				t = live "," c
				printf "%7d live keys, %2d clients: SELECT 1 %d/s, hot %d/s, name alone %d/s, named %d/s, keys %d/s:" \
					" hot %.2fx SELECT 1; keys %.2fx named, %.2fx SELECT 1, %.2fx the name alone; control %.2f\n",
					live, c, median("select1," t), median("hot," t), median("name," t), median("named," t),
					median("keys," t), ratio("hot", "select1", t), ratio("keys", "named", t),
					ratio("keys", "select1", t), ratio("keys", "name", t), ratio("select1_again", "select1", t)
			}
	}' "$TURNS_CSV"
