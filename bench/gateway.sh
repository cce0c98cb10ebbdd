# bench/gateway.sh: the gateway row of make bench.  Sourced by bench/run.sh
# (with the server and Redis running), not run.
#
# The third article's gateway makes, per request, a lookup of the caller
# (API key to user) and a decision on that user's limit.  bench/gateway.c
# makes that request three ways, from one client process on this machine:
# the lookup alone (the ceiling), the lookup and tb_acquire on the user's
# memory bucket in one statement, and the lookup followed by EVALSHA of
# bench/token_bucket.lua (two round trips).  10,000 and then 100,000 users
# (GATEWAY_USERS), each bucket used once before (so that the runs measure
# buckets in use), capacities that never run dry, 8 and 32 connections,
# GATEWAY_ROUNDS (5) rounds taken in turn, each round starting one later
# in the list of ways.  Writes bench/gateway.csv and prints each way's
# median rate, and tokenbucket's over Redis's and over the lookup alone as
# the median of the rounds' ratios (a round's runs follow one another, so
# the machine's slower and faster spells fall on both sides of a ratio).
# Then, for each number of users, the lookup and the request with the
# limit in turns of 200 ms on one set of connections (bench/alternate.c,
# as bench/keys.sh does), with the lookup twice, the second a control:
# GATEWAY_ROUNDS runs of 5 s and then 3 x BENCH_SECONDS s counted, at 8
# and 32 connections; bench/gateway_turns.csv.

GATEWAY_CSV=$TOP/bench/gateway.csv
: "${GATEWAY_USERS:=10000 100000}"
: "${GATEWAY_ROUNDS:=5}"

gcc -O2 -Wall -Wextra -Werror -o "$TB_TMP/gateway" "$TOP/bench/gateway.c" \
	-I"$($PG_CONFIG --includedir)" -L"$($PG_CONFIG --libdir)" -lpq -lhiredis -lpthread
gcc -O2 -Wall -Wextra -Werror -o "$TB_TMP/alternate" "$TOP/bench/alternate.c" \
	-I"$($PG_CONFIG --includedir)" -L"$($PG_CONFIG --libdir)" -lpq -lpthread
GATEWAY_TURNS_CSV=$TOP/bench/gateway_turns.csv
echo "mode,connections,users,round,requests_per_s" >"$GATEWAY_TURNS_CSV"
GATEWAY_MODES=(lookup tokenbucket lookup_again)
GATEWAY_SHA=$(redis-cli -p "$REDIS_PORT" SCRIPT LOAD "$(cat "$TOP/bench/token_bucket.lua")")

echo "mode,connections,users,round,requests_per_s,granted_share" >"$GATEWAY_CSV"
for users in $GATEWAY_USERS; do
	createdb "gateway$users"
	psql -q -X -d "gateway$users" -v ON_ERROR_STOP=1 >/dev/null <<SQL
CREATE EXTENSION tokenbucket;
CREATE TABLE api_keys (key text PRIMARY KEY, user_id integer NOT NULL);
INSERT INTO api_keys SELECT 'key' || i, i FROM generate_series(1, $users) AS i;
SELECT tb_create('user:*', 1e9, 1e9, memory => true);
SELECT count(tb_acquire('user:' || i)) FROM generate_series(1, $users) AS i;
VACUUM ANALYZE api_keys;
SQL
	redis-cli -p "$REDIS_PORT" EVAL "for i = 1, tonumber(ARGV[1]) do
		redis.call('HSET', 'user:' .. i, 'tokens', 1e9, 'ts', 0) end return 1" 0 "$users" >/dev/null
	for ((round = 1; round <= GATEWAY_ROUNDS; round++)); do
		for c in 8 32; do
			modes=(lookup tokenbucket redis)
			for ((i = 0; i < ${#modes[@]}; i++)); do
				mode=${modes[(i + round - 1) % ${#modes[@]}]}
				line=$("$TB_TMP/gateway" "$mode" "$BENCH_SECONDS" "$c" "$users" \
					"host=$PGHOST port=$PGPORT dbname=gateway$users user=postgres" "$REDIS_PORT" "$GATEWAY_SHA")
				IFS=, read -r m t u rps share <<<"$line"
				echo "$m,$t,$u,$round,$rps,$share" | tee -a "$GATEWAY_CSV"
			done
		done
	done
	for c in 8 32; do
		for ((round = 1; round <= GATEWAY_ROUNDS; round++)); do
			"$TB_TMP/alternate" "$((3 * BENCH_SECONDS))" 5 "$c" "$users" key%d \
				"host=$PGHOST port=$PGPORT dbname=gateway$users user=postgres" \
				'SELECT k.user_id FROM api_keys k WHERE k.key = $1' \
				"SELECT k.user_id, tb_acquire('user:' || k.user_id) FROM api_keys k WHERE k.key = \$1" \
				'SELECT k.user_id FROM api_keys k WHERE k.key = $1' |
				while IFS=, read -r i rate; do
					echo "${GATEWAY_MODES[i]},$c,$users,$round,$rate" | tee -a "$GATEWAY_TURNS_CSV"
				done
		done
	done
done
# medians of the rounds, and the medians of the rounds' ratios
awk -F, "$(cat "$TOP/bench/median.awk")"'
NR > 1 { k = $1 "," $2 "," $3; n[k]++; v[k, n[k]] = $5; rate[k, $4] = $5; users[$3] = 1 }
	END {
		for (u in users) for (c = 8; c <= 32; c *= 4) {
			l = median("lookup," c "," u); t = median("tokenbucket," c "," u); r = median("redis," c "," u)
			printf "%d users, %d connections: lookup alone %d/s, lookup + tb_acquire %d/s, lookup + Redis %d/s: tokenbucket %.2fx Redis, %.2fx the lookup alone\n", u, c, l, t, r, ratio("tokenbucket", "redis", c "," u), ratio("tokenbucket", "lookup", c "," u)
		}
	}' "$GATEWAY_CSV" | sort -n
echo "in turns (the lookup and the request with the limit taking 200 ms turns on one set of connections):"
awk -F, "$(cat "$TOP/bench/median.awk")"'
NR > 1 { k = $1 "," $2 "," $3; n[k]++; v[k, n[k]] = $5; rate[k, $4] = $5; users[$3] = 1 }
	END {
		for (u in users) for (c = 8; c <= 32; c *= 4)
			printf "%d users, %d connections: lookup alone %d/s, lookup + tb_acquire %d/s: %.2fx the lookup alone; control %.2f\n",
				u, c, median("lookup," c "," u), median("tokenbucket," c "," u),
				ratio("tokenbucket", "lookup", c "," u), ratio("lookup_again", "lookup", c "," u)
	}' "$GATEWAY_TURNS_CSV" | sort -n
