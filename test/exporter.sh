#!/usr/bin/env bash
# test/exporter.sh: the Prometheus metrics of prometheus/tokenbucket.yaml,
# end to end.  Known traffic (100 grants and 50 denials on a table bucket,
# 3 waits, grants and denials on per-key memory buckets), then Debian's
# prometheus-postgres-exporter started against the test server with that
# file, connected as a monitoring role given what the Prometheus set-up
# of docs/counters-and-prometheus.md gives it (its SQL block, run as written, with the extension in a
# schema of its own, limits: SELECT on the views, and the role's
# search_path), nothing else, and /metrics scraped
# over loopback with curl: every number must be exact (a wait ended by
# statement_timeout counted as cancelled), every counter a counter, and
# the per-key buckets summed into their template's series rather than
# exported one by one.  Then known traffic on a table limit and a memory
# limit (leases granted, refused, released, expired, ended with their
# sessions, a wait that timed out) and a memory limit template; and two
# quotas' spend and budget (not a refill rate per second), their
# template's keys not exported one by one.
# Prints TAP.
set -euo pipefail
DB=tb_exporter
TOP=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
EXPORTER=
cleanup() {
	if [ -n "$EXPORTER" ]; then
		kill "$EXPORTER" 2>/dev/null || true
		wait "$EXPORTER" 2>/dev/null || true
	fi
	rm -rf "$WORK"
	dropdb --if-exists "$DB" >/dev/null 2>&1 || true
	psql -X -q -c 'DROP ROLE IF EXISTS regress_tb_prometheus' >/dev/null 2>&1 || true
}
trap cleanup EXIT
source "$TOP/test/checks.sh"

# this script's own sessions find the extension in its schema; the
# exporter's role only through what docs/counters-and-prometheus.md gives it
q() { PGOPTIONS="-c search_path=limits,public" psql -X -A -t -q -v ON_ERROR_STOP=1 -d "$DB" "$@"; }

echo "1..20"
createdb "$DB"
q <<'SQL' >/dev/null
CREATE SCHEMA limits;
CREATE EXTENSION tokenbucket SCHEMA limits;
SELECT tb_create('api', 100, 1, '1 hour'), tb_create('queue', 1, 2),
       tb_create('muser:*', 2, 1, '1 hour', memory => true);
-- 150 calls on api: 100 granted, 50 denied
SELECT count(*) FILTER (WHERE tb_acquire('api')) FROM generate_series(1, 150);
-- queue is emptied, then three calls wait half a second each for a token
SELECT tb_acquire('queue'), tb_acquire_wait('queue', 1, '10 s'),
       tb_acquire_wait('queue', 1, '10 s'), tb_acquire_wait('queue', 1, '10 s');
-- five per-key memory buckets: 2 grants and 1 denial each
SELECT count(tb_acquire('muser:' || k)) FROM generate_series(1, 5) AS k, generate_series(1, 3);
-- a wait on a bucket an hour from its token, ended by statement_timeout
SELECT tb_create('stuck', 1, 1, '1 hour'), tb_acquire('stuck');
SELECT tb_create_limit('inflight', 2), tb_create_limit('minflight', 2, memory => true),
       tb_create_limit('mt:*', 1, memory => true);
-- two per-key memory limits: 1 lease each, and 1 refused
SELECT tb_lease('mt:1') IS NOT NULL, tb_lease('mt:2') IS NOT NULL, tb_lease('mt:1') IS NULL;
-- quotas of 100 a day: 30 spent of the table one, 120 asked of the
-- memory one (100 granted); a template's keys
SELECT tb_create_quota('team', 100, '1 day', 'UTC'),
       tb_create_quota('mteam', 100, '1 day', 'UTC', memory => true),
       tb_create_quota('q:*', 10, '1 day', 'UTC');
SELECT tb_acquire('team', 30), tb_acquire('mteam', 60), tb_acquire('mteam', 40),
       tb_acquire('mteam', 20), tb_acquire('q:1', 5);
SQL

# on each limit of 2 slots, in one session: a lease, one with a ttl, one
# refused; the first released, the second's ttl passes, then a lease of 2
# (taking over the expired slot), held until the session ends; in a
# second session a lease of 2 (a table limit counts the 2 slots of the
# gone session then) and a wait that times out, until it ends too
for l in inflight minflight; do
	q >/dev/null <<SQL
SELECT tb_lease('$l') AS a \gset
SELECT tb_lease('$l', ttl => '1 millisecond') IS NOT NULL, tb_lease('$l') IS NULL;
SELECT tb_release(:a);
SELECT pg_sleep(0.05);
SELECT tb_lease('$l', 2) IS NOT NULL;
SQL
	q >/dev/null <<SQL
SELECT tb_lease('$l', 2) IS NOT NULL;
SELECT tb_lease_wait('$l', 1, timeout => '100 ms') IS NULL;
SQL
done
# a memory limit counts a session's slots as it exits: wait for that
for _ in $(seq 300); do
	[ "$(q -c "SELECT ended FROM tb_stats WHERE name = 'minflight'")" = 4 ] && break
	sleep 0.1
done

q -c "SET statement_timeout = 200" -c "SELECT tb_acquire_wait('stuck', 1, '1 hour')" >/dev/null 2>&1 || true

# the monitoring role: the first block under "## Prometheus" of
# docs/counters-and-prometheus.md, as written (its role named for the tests)
/usr/bin/python3 - "$TOP/docs/counters-and-prometheus.md" >"$WORK/grants.sql" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
block = re.search(r'^## Prometheus\n.*?```sql\n(.*?)```', text, re.S | re.M).group(1)
print(re.sub(r'\bprometheus\b', 'regress_tb_prometheus', block))
PY
psql -X -q -v ON_ERROR_STOP=1 -d "$DB" -f "$WORK/grants.sql" >/dev/null

# the exporter, as the monitoring role, on a free port of loopback
PORT=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
DATA_SOURCE_NAME="host=127.0.0.1 port=$PGPORT user=regress_tb_prometheus dbname=$DB sslmode=disable" \
	prometheus-postgres-exporter --extend.query-path="$TOP/prometheus/tokenbucket.yaml" \
	--web.listen-address="127.0.0.1:$PORT" --log.level=warn >"$WORK/exporter.log" 2>&1 &
EXPORTER=$!

# scrape until the exporter answers with our metrics (it starts in well
# under a second; 30 s leaves room for a busy machine)
METRICS=$WORK/metrics
for _ in $(seq 300); do
	if curl -sf "http://127.0.0.1:$PORT/metrics" -o "$METRICS" &&
		grep -q '^tokenbucket_granted_total' "$METRICS"; then
		break
	fi
	sleep 0.1
done
if grep -q '^tokenbucket_granted_total' "$METRICS" 2>/dev/null; then
	echo "ok 1 - /metrics over HTTP on loopback has tokenbucket's series"
else
	echo "not ok 1 - no tokenbucket series from the exporter"
	sed 's/^/# /' "$WORK/exporter.log" "$METRICS" 2>/dev/null | grep -i 'tokenbucket\|error' | head -20
fi

# metric NAME LABEL=VALUE: the value of the series with that label
metric() {
	awk -v name="$1" -v label="$2=\"$3\"" '
		$1 ~ "^" name "\\{" && index($1, label) { print $2; exit }' "$METRICS"
}
# expect N DESCRIPTION ACTUAL EXPECTED
expect() {
	if [ "$3" = "$4" ]; then
		echo "ok $1 - $2: $3"
	else
		echo "not ok $1 - $2: got '$3', expected '$4'"
	fi
}

expect 2 "api: granted_total" "$(metric tokenbucket_granted_total bucket api)" 100
expect 3 "api: granted_tokens_total" "$(metric tokenbucket_granted_tokens_total bucket api)" 100
expect 4 "api: denied_total" "$(metric tokenbucket_denied_total bucket api)" 50
expect 5 "queue: waited_total, granted_total (the 3 waits and the first call)" \
	"$(metric tokenbucket_waited_total bucket queue) $(metric tokenbucket_granted_total bucket queue)" "3 4"
# three waits of half a second each: 1 to 30 seconds, whatever the machine
wait_seconds=$(metric tokenbucket_wait_seconds_total bucket queue)
if awk -v s="${wait_seconds:-0}" 'BEGIN { exit !(s >= 1 && s < 30) }'; then
	echo "ok 6 - queue: wait_seconds_total is the three half-second waits ($wait_seconds s)"
else
	echo "not ok 6 - queue: wait_seconds_total is '$wait_seconds', not 1 to 30 s"
fi
expect 7 "muser:*: the template's series sums its five buckets (granted, denied, buckets)" \
	"$(metric tokenbucket_template_granted_total template 'muser:*') $(metric tokenbucket_template_denied_total template 'muser:*') $(metric tokenbucket_template_buckets template 'muser:*')" \
	"10 5 5"
expect 8 "api: limit and level gauges (capacity, refill rate per second x 3600, tokens < 1)" \
	"$(metric tokenbucket_capacity_tokens bucket api) $(awk -v r="$(metric tokenbucket_refill_rate_tokens_per_second bucket api)" 'BEGIN { printf "%.0f", r * 3600 }') $(awk -v t="$(metric tokenbucket_tokens bucket api)" 'BEGIN { print (t < 1) }')" \
	"100 1 1"
expect 9 "per-key buckets are not exported one by one" \
	"$(grep -c 'bucket="muser:' "$METRICS" || true)" 0
expect 10 "counters are typed counter, levels gauge" \
	"$(grep -c '^# TYPE tokenbucket_[a-z_]*_total counter$' "$METRICS") $(grep -c '^# TYPE tokenbucket_\(tokens\|capacity_tokens\|refill_rate_tokens_per_second\|template_buckets\) gauge$' "$METRICS")" \
	"38 4"
# since: when counting started, as seconds since the epoch, in the past
start=$(metric tokenbucket_start_time_seconds bucket api)
now=$(date +%s)
if awk -v s="${start:-0}" -v now="$now" 'BEGIN { exit !(s > now - 86400 && s <= now + 1) }'; then
	echo "ok 11 - start_time_seconds says when counting started ($start)"
else
	echo "not ok 11 - start_time_seconds is '$start' (now $now)"
fi

expect 12 "stuck: a wait ended by statement_timeout counts as cancelled, not as a timeout" \
	"$(metric tokenbucket_cancelled_total bucket stuck) $(metric tokenbucket_timeouts_total bucket stuck)" "1 0"

# a reset shows in the next scrape: the counter starts again from zero
q -c "SELECT tb_stats_reset('api')" >/dev/null
curl -sf "http://127.0.0.1:$PORT/metrics" -o "$METRICS"
expect 13 "after tb_stats_reset('api'), the next scrape says granted_total 0" \
	"$(metric tokenbucket_granted_total bucket api)" 0

# limit NAME: its leases, slots, refused, waited, timeouts, released,
# ended and expired, in one line
limit() {
	local m out=""
	for m in leases slots refused waited timeouts released_slots ended_slots expired_slots; do
		out="$out $(metric "tokenbucket_limit_${m}_total" limit "$1")"
	done
	echo $out
}
expect 14 "table limit: leases slots refused waited timeouts released ended expired (ended: counted as the next lease takes the slots over)" \
	"$(limit inflight)" "4 6 1 1 1 1 2 1"
expect 15 "memory limit: the same, ended counted as each session exits" \
	"$(limit minflight)" "4 6 1 1 1 1 4 1"
expect 16 "memory limit template: mt:* sums its names (leases, refused), which are not exported one by one" \
	"$(metric tokenbucket_limit_template_leases_total template 'mt:*') $(metric tokenbucket_limit_template_refused_total template 'mt:*') $(grep -c 'limit="mt:' "$METRICS" || true)" \
	"2 1 0"
expect 17 "the monitoring role was granted EXECUTE on no function (the docs give it none)" \
	"$(q -c "SELECT count(*) FROM pg_proc p, aclexplode(p.proacl) AS a
	         WHERE a.grantee = 'regress_tb_prometheus'::regrole")" 0
# quotas: spent, remaining and the period's end (the next UTC midnight)
end=$(q -c "SELECT extract(epoch FROM date_trunc('day', now() AT TIME ZONE 'UTC') + interval '1 day')::bigint")
expect 18 "quotas: spent, remaining, period_end_seconds (team, then mteam), four gauges" \
	"$(metric tokenbucket_quota_spent bucket team) $(metric tokenbucket_quota_remaining bucket team) $(awk -v e="$(metric tokenbucket_quota_period_end_seconds bucket team)" 'BEGIN { printf "%.0f", e }') $(metric tokenbucket_quota_spent bucket mteam) $(metric tokenbucket_quota_remaining bucket mteam) $(grep -c '^# TYPE tokenbucket_quota_[a-z_]* gauge$' "$METRICS")" \
	"30 70 $end 100 0 4"
expect 19 "a quota template's keys are not exported one by one, nor are rate buckets as quotas" \
	"$(grep -c '^tokenbucket_quota_[a-z_]*{.*bucket="\(q:\|api\)' "$METRICS" || true)" 0
# a quota's refill_rate is its budget per period, not per second: it has
# no refill_rate_tokens_per_second series (rate(granted_tokens_total) /
# refill_rate would be off by the period's seconds) but a budget gauge
expect 20 "quotas: budget_tokens (team, mteam), no refill rate per second; api keeps its refill rate" \
	"$(metric tokenbucket_quota_budget_tokens bucket team) $(metric tokenbucket_quota_budget_tokens bucket mteam) $(grep -c '^tokenbucket_refill_rate_tokens_per_second{.*bucket="\(team\|mteam\|q:1\)"' "$METRICS" || true) $(grep -c '^tokenbucket_refill_rate_tokens_per_second{.*bucket="api"' "$METRICS" || true)" \
	"100 100 0 1"
