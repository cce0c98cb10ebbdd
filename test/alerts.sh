#!/usr/bin/env bash
# test/alerts.sh: alerts fire exactly once under 64 sessions.  Four quotas
# of 500 (a table one, a memory one, and a key of a table template and of
# a memory template), each with thresholds at 20, 40, 60, 80, 90, 95 and
# 100% of its budget, charged 1 at a time by 64 sessions at once until
# they are spent, a quarter of the transactions rolling back on purpose
# 10 ms after their charge (so that some crossings are undone, a memory
# quota's after others have charged beyond them).  Then every quota has exactly
# one event per threshold, each written at or below its threshold's level,
# and a session that listened on tb_alerts heard each event once and
# nothing else (no rolled-back charge was sent).  Prints TAP.
set -euo pipefail
DB=tb_alerts
W=$(mktemp -d /tmp/alerts-XXXXXX)
trap 'exec 3>&- 2>/dev/null || true; kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$W"; dropdb --if-exists "$DB" >/dev/null 2>&1 || true' EXIT
source "$(dirname "$0")/checks.sh"

createdb "$DB"
q >/dev/null <<'SQL'
CREATE EXTENSION tokenbucket;
SELECT tb_create_quota('tq', 500, '1 day'), tb_create_quota('mq', 500, '1 day', memory => true),
	tb_create_quota('tu:*', 500, '1 day'), tb_create_quota('mu:*', 500, '1 day', memory => true);
SELECT tb_set_alerts(b, '{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1}') FROM unnest('{tq,mq,tu:*,mu:*}'::text[]) AS b;
SQL
cat >"$W/charge.sql" <<'SQL'
\set b random(1, 4)
\set r random(1, 4)
BEGIN;
SELECT tb_acquire(CASE :b WHEN 1 THEN 'tq' WHEN 2 THEN 'mq' WHEN 3 THEN 'tu:1' ELSE 'mu:1' END, 1);
\if :r = 1
SELECT pg_sleep(0.01);
ROLLBACK;
\else
COMMIT;
\endif
SQL

# the listener: psql fed through a fifo, which prints what it heard after
# its next command
mkfifo "$W/fifo"
psql -X -q -d "$DB" <"$W/fifo" >"$W/heard" 2>&1 &
exec 3>"$W/fifo"
echo "LISTEN tb_alerts;" >&3

echo "1..5"
# 64 x 50 transactions: 800 a quota, 600 of them committed, for 500 tokens
if pgbench -n -c 64 -j 2 -t 50 -f "$W/charge.sql" "$DB" >"$W/out" 2>&1 &&
	! grep -qi 'error\|deadlock' "$W/out"; then
	echo "ok 1 - 64 sessions charging four quotas, a quarter rolled back: no error"
else
	echo "not ok 1 - pgbench reported errors"
	grep -i -m 5 'error\|deadlock' "$W/out" | sed 's/^/# /'
	tail -n 20 "$W/out" | sed 's/^/# /'
fi
grep -E '^(number of transactions actually processed|tps)' "$W/out" | sed 's/^/# /'
n=1
echo "SELECT 1;" >&3
exec 3>&-
wait

check "every quota spent to its budget" \
	"(SELECT count(*) FROM tb_quotas WHERE name IN ('tq', 'mq', 'tu:1', 'mu:1') AND remaining < 1) = 4"
check "exactly one event per quota and threshold (44)" \
	"(SELECT count(*) = 44 AND count(DISTINCT (bucket, threshold)) = 44
	    AND count(DISTINCT bucket) = 4 AND count(DISTINCT period_start) = 1 FROM tb_alert_events)"
check "each event written at or below its threshold's level" \
	"(SELECT bool_and(remaining <= (1 - threshold) * budget + 1e-9) FROM tb_alert_events)"
heard=$(grep -c 'Asynchronous notification "tb_alerts"' "$W/heard" || true)
ids=$(grep -o '{"id" : [0-9]*' "$W/heard" | sort -u | wc -l)
events=$(psql -X -A -t -d "$DB" -c "SELECT string_agg(id::text, ' ' ORDER BY id) FROM tb_alert_events")
heard_ids=$(grep -o '{"id" : [0-9]*' "$W/heard" | sed 's/.* //' | sort -n | tr '\n' ' ' | sed 's/ $//')
if [ "$heard" = 44 ] && [ "$ids" = 44 ] && [ "$heard_ids" = "$events" ]; then
	echo "ok 5 - the listener heard each event once, and nothing else (44)"
else
	echo "not ok 5 - heard $heard notifications of $ids ids: $heard_ids; events: $events"
fi
