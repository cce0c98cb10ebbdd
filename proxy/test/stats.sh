#!/usr/bin/env bash
# proxy/test/stats.sh: tokenbucket's counters through tokenbucket_proxy,
# summed over the shards.  Two throwaway servers hold four partitions (a
# holds p0 and p2, b holds p1 and p3) behind a proxy server.  Known
# traffic through the proxy (a named bucket, 20 per-key table buckets and
# 10 per-key memory buckets from templates, spread over every partition),
# then: tb_stats on the proxy lists each bucket once with its exact
# counters; tb_template_stats sums each template over the shards, equal to
# the sum of the shards' own views; the queries of
# prometheus/tokenbucket.yaml run on the proxy as a monitoring role
# granted what the README says and give the same numbers; tb_stats_reset
# of a bucket, a template and everything; a role without the grants is
# refused; quotas made through the proxy show their spend in tb_stats, in
# tb_quotas and in the exporter's quota family; with server b stopped, each of them fails naming a database of
# b and its port.  Prints TAP.
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
source "$TOP/proxy/test/tap.sh"
export PGOPTIONS="-c client_min_messages=warning"

# is DESCRIPTION GOT EXPECTED
is() {
	if [ "$2" = "$3" ]; then ok "$1"; else not_ok "$1" "got:      $2" "expected: $3"; fi
}
# the query of metric family $1 in prometheus/tokenbucket.yaml
yaml_query() {
	awk -v family="$1:" '$0 == family { f = 1; next }
		f && /^  query: \|/ { q = 1; next }
		q && /^  [a-z]/ { exit }
		q { print }' "$TOP/prometheus/tokenbucket.yaml"
}

echo "1..12"
px_init
for s in a b proxy; do px_server "$s"; done
px_cluster tb a:tb_p0 b:tb_p1 a:tb_p2 b:tb_p3
PART_SERVER=(a b a b)

P <<'SQL' >/dev/null
SELECT tb_create('api', 100, 1, '1 hour'), tb_create('user:*', 2, 1, '1 hour'),
       tb_create('muser:*', 2, 1, '1 hour', memory => true);
-- 150 calls on api: 100 granted, 50 denied
SELECT count(*) FILTER (WHERE tb_acquire('api')) FROM generate_series(1, 150);
-- 20 table and 10 memory buckets, 3 calls each: 2 granted, 1 denied
SELECT count(tb_acquire('user:' || k)) FROM generate_series(1, 20) AS k, generate_series(1, 3);
SELECT count(tb_acquire('muser:' || k)) FROM generate_series(1, 10) AS k, generate_series(1, 3);
-- 5 tokens refunded to api
SELECT tb_refund('api', 5);
SQL
spread=$(P -c "SELECT count(DISTINCT tb_shard('user:' || k)) FROM generate_series(1, 20) AS k")

# 1-2. per bucket, from its shard
is "tb_stats on the proxy: api's counters (100 granted, 50 denied, 5 refunded)" \
	"$(P -c "SELECT granted, denied, refunded_tokens, template IS NULL FROM tb_stats WHERE name = 'api'" 2>&1)" \
	"100|50|5|t"
is "tb_stats on the proxy: the 30 per-key buckets, each once, from $spread partitions" \
	"$(P -c "SELECT count(*), count(DISTINCT name), sum(granted), sum(denied) FROM tb_stats WHERE template IS NOT NULL" 2>&1)" \
	"30|30|60|30"

# 3-4. per template, summed over the shards: exact, and the sum of what
# each shard's own view says
is "tb_template_stats on the proxy: each template summed over the shards" \
	"$(P -c "SELECT template, memory, buckets, granted, denied FROM tb_template_stats ORDER BY 1" 2>&1)" \
	"$(printf 'muser:*|t|10|20|10\nuser:*|f|20|40|20')"
for p in 0 1 2 3; do
	px_psql "${PART_SERVER[$p]}" "tb_p$p" -c "SELECT template, buckets, granted, denied, waited, timeouts,
		pauses, cancelled, granted_tokens, refunded_tokens FROM tb_template_stats"
done | awk -F'|' '{ for (i = 2; i <= NF; i++) s[$1, i] += $i; t[$1] = 1 }
	END { for (k in t) { l = k; for (i = 2; i <= 10; i++) l = l "|" s[k, i]; print l } }' |
	sort >"$W/summed"
P -c "SELECT template, buckets, granted, denied, waited, timeouts, pauses, cancelled,
	granted_tokens, refunded_tokens FROM tb_template_stats" | sort >"$W/proxy"
if [ -s "$W/summed" ] && diff -u "$W/summed" "$W/proxy" >"$W/diff"; then
	ok "tb_template_stats on the proxy is the sum of the four shards' own"
else
	not_ok "tb_template_stats is not the shards' sum" "$(cat "$W/diff")"
fi

# 5. prometheus/tokenbucket.yaml's queries on the proxy, as a monitoring
# role granted what the README says
P <<'SQL' >/dev/null
CREATE ROLE regress_tb_monitoring LOGIN;
GRANT USAGE ON FOREIGN SERVER tokenbucket TO regress_tb_monitoring;
GRANT SELECT ON tb_stats, tb_template_stats TO regress_tb_monitoring;
GRANT EXECUTE ON FUNCTION tb_shards_stats(), tb_shards_template_stats(),
	tb_shards_limit_counters(), tb_limit_counters() TO regress_tb_monitoring;
SQL
yaml_query tokenbucket >"$W/buckets.sql"
yaml_query tokenbucket_template >"$W/templates.sql"
families=0 failed=()
for family in $(grep -E '^[a-z_]+:$' "$TOP/prometheus/tokenbucket.yaml" | tr -d :); do
	families=$((families + 1))
	yaml_query "$family" >"$W/family.sql"
	P -c "SET ROLE regress_tb_monitoring" -f "$W/family.sql" >/dev/null 2>"$W/family.err" ||
		failed+=("$family: $(cat "$W/family.err")")
done
buckets=$(P -c "SET ROLE regress_tb_monitoring" -F ' ' -f "$W/buckets.sql" 2>&1 | awk '$1 == "api" { print $3, $5 }')
templates=$(P -c "SET ROLE regress_tb_monitoring" -F ' ' -f "$W/templates.sql" 2>&1 | awk '{ print $1, $3, $4 }' | sort | tr '\n' ' ')
if [ -s "$W/buckets.sql" ] && [ -s "$W/templates.sql" ] && [ "$buckets" = "100 50" ] &&
	[ "$templates" = "muser:* 10 20 user:* 20 40 " ] && [ $families -ge 2 ] && [ ${#failed[@]} -eq 0 ]; then
	ok "prometheus/tokenbucket.yaml's $families queries run on the proxy as a monitoring role: api 100/50, templates summed"
else
	not_ok "the exporter's queries on the proxy" "buckets: $buckets" "templates: $templates" "${failed[@]}"
fi

# 6-8. resets: a bucket on its shard, a template on every shard, everything
P -c "SELECT tb_stats_reset('api')" >/dev/null
is "tb_stats_reset('api') through the proxy: api from zero, the others kept" \
	"$(P -c "SELECT sum(granted) FILTER (WHERE name = 'api'), sum(granted) FROM tb_stats" 2>&1)" \
	"0|60"
P -c "SELECT tb_stats_reset('user:*')" >/dev/null
is "tb_stats_reset('user:*') through the proxy: the template and its buckets from zero on every shard" \
	"$(P -c "SELECT string_agg(template || ' ' || granted, ', ' ORDER BY template) FROM tb_template_stats" 2>&1)" \
	"muser:* 20, user:* 0"
out=$(P -c "SET ROLE regress_tb_monitoring" -c "SELECT tb_stats_reset()" 2>&1 || true)
P -c "SELECT tb_stats_reset()" >/dev/null
if grep -q 'permission denied for function tb_stats_reset' <<<"$out" &&
	[ "$(P -c "SELECT sum(granted) FROM tb_stats" -c "SELECT sum(granted) FROM tb_template_stats")" = "$(printf '0\n0')" ]; then
	ok "tb_stats_reset() through the proxy: every counter of every shard from zero; refused to a monitoring role"
else
	not_ok "tb_stats_reset()" "$out" "$(P -c "SELECT * FROM tb_template_stats")"
fi

# 9-10. quotas (tokenbucket 1.9) made through the proxy, over every
# partition: tb_stats ends with each one's spend, remaining and period end
# as its shard's own tb_stats says, tb_quotas lists every shard's with
# the partition each came from, and the exporter's quota family, as the
# monitoring role, finds them all
P -c "SELECT tb_create_quota('q' || k, 100, '1 month', 'Europe/Paris') FROM generate_series(1, 8) AS k" \
	-c "SELECT count(tb_acquire('q' || k, 10 * k)) FROM generate_series(1, 8) AS k" >/dev/null
for p in 0 1 2 3; do
	px_psql "${PART_SERVER[$p]}" "tb_p$p" -c "SELECT s.name, s.spent, s.remaining, s.period_end, $p, q.budget,
		q.period, q.time_zone, q.period_start FROM tb_stats AS s JOIN tb_quotas AS q USING (name)"
done | sort >"$W/quotas.shards"
P -c "SELECT s.name, s.spent, s.remaining, s.period_end, q.shard, q.budget, q.period, q.time_zone,
	q.period_start FROM tb_stats AS s JOIN tb_quotas AS q USING (name)" 2>&1 | sort >"$W/quotas.proxy"
spend=$(P -c "SELECT string_agg(concat_ws(' ', name, spent, remaining), ', ' ORDER BY name)
              FROM tb_stats WHERE spent IS NOT NULL" 2>&1)
if [ "$spend" = "q1 10 90, q2 20 80, q3 30 70, q4 40 60, q5 50 50, q6 60 40, q7 70 30, q8 80 20" ] &&
	[ "$(cut -d'|' -f5 "$W/quotas.shards" | sort -u | wc -l)" -gt 1 ] &&
	diff -u "$W/quotas.shards" "$W/quotas.proxy" >"$W/diff"; then
	ok "tb_stats and tb_quotas on the proxy: 8 quotas' spend, remaining and period, as their shards say"
else
	not_ok "quotas through the proxy" "spend: $spend" "$(head -n 20 "$W/diff")"
fi
yaml_query tokenbucket_quota >"$W/quota.sql"
quotas=$(P -c "SET ROLE regress_tb_monitoring" -F ' ' -f "$W/quota.sql" 2>&1 |
	awk '{ print $1, $3, $4, ($5 > 1.7e9), $6 }' | sort | paste -sd ' ')
if [ "$quotas" = "q1 10 90 1 100 q2 20 80 1 100 q3 30 70 1 100 q4 40 60 1 100 q5 50 50 1 100 q6 60 40 1 100 q7 70 30 1 100 q8 80 20 1 100" ]; then
	ok "prometheus/tokenbucket.yaml's quota family on the proxy, as a monitoring role: each quota's spend and budget"
else
	not_ok "the exporter's quotas on the proxy" "$quotas"
fi

# 11. a server down: each call names a database of it and its port
px_stop b
named=0
for call in "SELECT count(*) FROM tb_stats" "SELECT count(*) FROM tb_template_stats" \
	"SELECT tb_stats_reset()"; do
	out=$(P -c "$call" 2>&1 || true)
	grep -Eq "ERROR:.*\[tb_p[13]\].*port ${PX_PORT[b]}" <<<"$out" && named=$((named + 1))
done
if [ $named -eq 3 ]; then
	ok "server b stopped: tb_stats, tb_template_stats and tb_stats_reset() fail naming its database and port"
else
	not_ok "a stopped server: $named of 3 calls named it" "$out"
fi

# 12. nothing left running
px_test_stopped
