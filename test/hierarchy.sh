#!/usr/bin/env bash
# test/hierarchy.sh: 32 sessions at once for HIERARCHY_SECONDS (default 5)
# charge 20 users of one team, whose team is under an organisation, each
# charge 1 to 3 tokens up the three levels: table buckets (a named org and
# team, users from a template) and memory buckets alike.  The team holds
# 200 tokens and gains next to none, so it runs dry.  Afterwards, by
# tb_stats: the team granted no more than it holds, it granted exactly
# what its users were granted, and so did the organisation (a charge took
# from every level or from none); and no session saw an error.  Prints
# TAP.
set -euo pipefail
: "${HIERARCHY_SECONDS:=5}"
DB=tb_hierarchy
W=$(mktemp -d)
trap 'rm -rf "$W"; dropdb --if-exists "$DB" >/dev/null 2>&1 || true' EXIT

createdb "$DB"
psql -q -X -v ON_ERROR_STOP=1 -d "$DB" >/dev/null <<'SQL'
CREATE EXTENSION tokenbucket;
SELECT tb_create('org', 1000, 1, '1000 days'), tb_create('team:t', 200, 1, '1000 days'),
       tb_create('user:t:*', 50, 1, '1000 days');
SELECT tb_create('morg', 1000, 1, '1000 days', memory => true),
       tb_create('team:m', 200, 1, '1000 days', memory => true),
       tb_create('user:m:*', 50, 1, '1000 days', memory => true);
SELECT tb_set_parent('user:t:*', 'team:t'), tb_set_parent('team:t', 'org'),
       tb_set_parent('user:m:*', 'team:m'), tb_set_parent('team:m', 'morg');
SQL
for kind in t m; do
	cat >"$W/$kind.sql" <<EOF2
\set u random(1, 20)
\set c random(1, 3)
SELECT tb_acquire('user:$kind:' || :u, :c);
SELECT granted FROM tb_try('user:$kind:' || :u, :c);
EOF2
done

echo "1..3"
if pgbench -n -c 32 -j 2 -T "$HIERARCHY_SECONDS" -f "$W/t.sql" -f "$W/m.sql" "$DB" >"$W/out" 2>&1 &&
	! grep -qi 'error\|deadlock' "$W/out"; then
	echo "ok 1 - 32 sessions for ${HIERARCHY_SECONDS}s on users of two teams: no error, no deadlock"
else
	echo "not ok 1 - pgbench reported errors"
	grep -i -m 5 'error\|deadlock' "$W/out" | sed 's/^/# /'
fi
grep -E '^(number of transactions actually processed|tps)' "$W/out" | sed 's/^/# /'

# each kind: the team's, its users' and the org's grants, in tokens
psql -X -A -t -v ON_ERROR_STOP=1 -d "$DB" <<'SQL'
WITH k(kind, team, org) AS (VALUES ('table', 'team:t', 'org'), ('memory', 'team:m', 'morg')),
g AS (
	SELECT k.kind, k.team,
	       (SELECT granted_tokens FROM tb_stats WHERE name = k.team) AS team_tokens,
	       (SELECT granted_tokens FROM tb_stats WHERE name = k.org) AS org_tokens,
	       (SELECT sum(granted_tokens) FROM tb_stats
	        WHERE name LIKE 'user:' || right(k.team, 1) || ':%') AS user_tokens,
	       (SELECT tokens FROM tb_status WHERE name = k.team) AS team_left
	FROM k)
SELECT CASE WHEN team_tokens BETWEEN 197 AND 200.001 AND team_left > -1e-9
                 AND user_tokens = team_tokens AND org_tokens = team_tokens
            THEN 'ok' ELSE 'not ok' END
       || ' ' || CASE kind WHEN 'table' THEN 2 ELSE 3 END || ' - ' || kind
       || ' buckets: the team granted ' || team_tokens || ' of its 200 ('
       || round(team_left::numeric, 6) || ' left), its users ' || user_tokens
       || ', the organisation ' || org_tokens
       || CASE WHEN user_tokens = team_tokens AND org_tokens = team_tokens
               THEN ', all the same' ELSE ' (NOT the same)' END
FROM g ORDER BY kind DESC;
SQL
