# bench/gateway.sh: the gateway row of make bench.  Sourced by bench/run.sh
# (with the server and Redis running), not run.
#
# The third article's gateway makes, per request, a lookup of the caller
# (API key to user) and a decision on that user's limit.  bench/gateway.c
# makes that request three ways, from one client process on this machine:
# the lookup alone (the ceiling), the lookup and tb_acquire on the user's
# memory bucket in one statement, and the lookup followed by EVALSHA of
# bench/token_bucket.lua (two round trips).  GATEWAY_USERS users (default
# 10,000), each bucket used once before (so that the runs measure buckets
# in use), capacities that never run dry, 8 and 32 connections, three
# rounds taken in turn.  Writes bench/gateway.csv and prints the rate of
# each way and tokenbucket's over Redis's.

GATEWAY_CSV=$TOP/bench/gateway.csv
: "${GATEWAY_USERS:=10000}"

gcc -O2 -Wall -Wextra -Werror -o "$TB_TMP/gateway" "$TOP/bench/gateway.c" \
	-I"$($PG_CONFIG --includedir)" -L"$($PG_CONFIG --libdir)" -lpq -lhiredis -lpthread

createdb gateway
psql -q -X -d gateway -v ON_ERROR_STOP=1 >/dev/null <<SQL
CREATE EXTENSION tokenbucket;
CREATE TABLE api_keys (key text PRIMARY KEY, user_id integer NOT NULL);
INSERT INTO api_keys SELECT 'key' || i, i FROM generate_series(1, $GATEWAY_USERS) AS i;
SELECT tb_create('user:*', 1e9, 1e9, memory => true);
SELECT count(tb_acquire('user:' || i)) FROM generate_series(1, $GATEWAY_USERS) AS i;
VACUUM ANALYZE api_keys;
SQL
GATEWAY_SHA=$(redis-cli -p "$REDIS_PORT" SCRIPT LOAD "$(cat "$TOP/bench/token_bucket.lua")")
redis-cli -p "$REDIS_PORT" EVAL "for i = 1, tonumber(ARGV[1]) do
	redis.call('HSET', 'user:' .. i, 'tokens', 1e9, 'ts', 0) end return 1" 0 "$GATEWAY_USERS" >/dev/null

echo "mode,connections,users,round,requests_per_s,granted_share" >"$GATEWAY_CSV"
for round in 1 2 3; do
	for c in 8 32; do
		for mode in lookup tokenbucket redis; do
			line=$("$TB_TMP/gateway" "$mode" "$BENCH_SECONDS" "$c" "$GATEWAY_USERS" \
				"host=$PGHOST port=$PGPORT dbname=gateway user=postgres" "$REDIS_PORT" "$GATEWAY_SHA")
			IFS=, read -r m t u rps share <<<"$line"
			echo "$m,$t,$u,$round,$rps,$share" | tee -a "$GATEWAY_CSV"
		done
	done
done
# medians of the rounds, and the ratios
awk -F, 'NR > 1 { k = $1 "," $2; n[k]++; v[k, n[k]] = $5 }
	function median(k,   i, j, x, a) {
		for (i = 1; i <= n[k]; i++) a[i] = v[k, i]
		for (i = 2; i <= n[k]; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) {
			x = a[j]; a[j] = a[j - 1]; a[j - 1] = x }
		return a[int((n[k] + 1) / 2)]
	}
	END {
		for (c = 8; c <= 32; c *= 4) {
			l = median("lookup," c); t = median("tokenbucket," c); r = median("redis," c)
			printf "%d connections: lookup alone %d/s, lookup + tb_acquire %d/s, lookup + Redis %d/s: tokenbucket %.2fx Redis, %.2fx the lookup alone\n", c, l, t, r, t / r, t / l
		}
	}' "$GATEWAY_CSV"
