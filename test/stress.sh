#!/usr/bin/env bash
# test/stress.sh: 64 sessions at once for STRESS_SECONDS (default 20) on a
# mix of buckets: one hot, ten cold (costs 1 to 3), per-user keys from a
# template, an RPM + TPM pair taken together, and a bucket taken by
# waiting.  Every grant records, in its own transaction, the moment it was
# decided (the bucket's updated_at, read back under the row lock the grant
# holds).  Afterwards, for every bucket, every grant and every window length
# w, the tokens granted in [t, t + w] must not exceed capacity + rate x w;
# the saturated hot bucket must grant its configured rate within 1%; and no
# session may have seen an error (a deadlock included).  Prints TAP.
set -euo pipefail
: "${STRESS_SECONDS:=20}"
DB=tb_stress
W=$(mktemp -d)
trap 'rm -rf "$W"; dropdb --if-exists "$DB" >/dev/null 2>&1 || true' EXIT

createdb "$DB"
psql -q -X -v ON_ERROR_STOP=1 -d "$DB" <<'SQL'
CREATE EXTENSION tokenbucket;
CREATE TABLE grants (bucket text NOT NULL, cost float8 NOT NULL, t timestamptz NOT NULL);
CREATE INDEX ON grants (bucket, t);
\o /dev/null
SELECT tb_create('hot', 200, 200);
SELECT tb_create('cold' || n, 5, 2) FROM generate_series(0, 9) AS n;
SELECT tb_create('user:*', 3, 1);
SELECT tb_create('rpm', 5, 20), tb_create('tpm', 500, 1000);
SELECT tb_create('queue', 2, 50);
SQL

# record BUCKETS: the SQL that records a grant on each bucket named
record() { echo "INSERT INTO grants SELECT name, :cost, updated_at FROM tb_buckets WHERE name IN ($1);"; }
cat >"$W/hot.sql" <<PGB
\set cost 1
BEGIN;
SELECT tb_acquire('hot')::int AS granted \gset
\if :granted
$(record "'hot'")
\endif
END;
PGB
cat >"$W/cold.sql" <<PGB
\set n random(0, 9)
\set cost random(1, 3)
BEGIN;
SELECT tb_acquire('cold' || :n, :cost)::int AS granted \gset
\if :granted
$(record "'cold' || :n")
\endif
END;
PGB
cat >"$W/user.sql" <<'PGB'
\set u random(1, 200)
SELECT tb_acquire('user:' || :u);
PGB
cat >"$W/pair.sql" <<PGB
\set cost random(10, 100)
BEGIN;
SELECT tb_acquire_all(ARRAY['tpm', 'rpm'], ARRAY[:cost, 1])::int AS granted \gset
\if :granted
INSERT INTO grants SELECT name, CASE name WHEN 'rpm' THEN 1 ELSE :cost END, updated_at
FROM tb_buckets WHERE name IN ('rpm', 'tpm');
\endif
END;
PGB
cat >"$W/wait.sql" <<PGB
\set cost 1
BEGIN;
SELECT tb_acquire_wait('queue', 1, '100 ms')::int AS granted \gset
\if :granted
$(record "'queue'")
\endif
END;
PGB

echo "1..5"
if pgbench -n -c 64 -j 2 -T "$STRESS_SECONDS" -f "$W/hot.sql@4" -f "$W/cold.sql@3" \
	-f "$W/user.sql@2" -f "$W/pair.sql@2" -f "$W/wait.sql@1" "$DB" >"$W/out" 2>&1 &&
	! grep -qi 'error\|deadlock' "$W/out"; then
	echo "ok 1 - 64 sessions for ${STRESS_SECONDS}s: no error, no deadlock"
else
	echo "not ok 1 - pgbench reported errors"
	sed 's/^/# /' "$W/out" | tail -n 20
fi
grep -E '^(number of transactions actually processed|tps)' "$W/out" | sed 's/^/# /'

psql -X -A -t -v ON_ERROR_STOP=1 -d "$DB" <<'SQL'
WITH windows(w) AS (VALUES (0), (0.01), (0.1), (0.5), (1), (2), (5), (3600)),
checked AS (
	SELECT (SELECT sum(g2.cost) FROM grants g2
	         WHERE g2.bucket = g.bucket
	           AND g2.t BETWEEN g.t AND g.t + w.w * interval '1 second') AS taken,
	       b.capacity + b.refill_rate * w.w AS allowed
	FROM grants g CROSS JOIN windows w JOIN tb_buckets b ON b.name = g.bucket
)
SELECT CASE WHEN count(*) FILTER (WHERE taken > allowed + 1e-9) = 0
            THEN 'ok 2 - no window over capacity + rate x w (' || count(*) || ' windows checked)'
            ELSE 'not ok 2 - ' || count(*) FILTER (WHERE taken > allowed + 1e-9) || ' windows overdrawn'
       END
FROM checked;

SELECT CASE WHEN count(DISTINCT bucket) = 14
            THEN 'ok 3 - every recorded bucket granted something (hot, 10 cold, rpm, tpm, queue)'
            ELSE 'not ok 3 - only ' || count(DISTINCT bucket) || ' buckets granted anything'
       END
FROM grants;

-- saturated, the hot bucket grants its configured rate: what it granted
-- past its first burst, over the time from its first grant to its last
SELECT CASE WHEN abs(rate / 200 - 1) <= 0.01
            THEN 'ok 4 - the saturated hot bucket granted ' || round(rate::numeric, 2) || '/s of 200/s'
            ELSE 'not ok 4 - the saturated hot bucket granted ' || round(rate::numeric, 2) || '/s, not 200/s'
       END
FROM (SELECT (sum(cost) - 200) / extract(epoch FROM max(t) - min(t)) AS rate
      FROM grants WHERE bucket = 'hot') AS hot;

SELECT CASE WHEN count(*) > 0 AND count(*) FILTER (WHERE template = 'user:*') = count(*)
            THEN 'ok 5 - ' || count(*) || ' per-user buckets made from the template, one each'
            ELSE 'not ok 5 - per-user buckets: ' || count(*)
       END
FROM tb_buckets WHERE name LIKE 'user:%' AND name <> 'user:*';
SQL
echo
