#!/usr/bin/env bash
# proxy/test/proxy.sh: tokenbucket_proxy over three throwaway servers holding four
# partitions (p0 and p3 are two databases of server a, p1 is on b, p2 on
# c), and a proxy server in front.  Checks that every function through the
# proxy answers what it answers directly (proxy/test/same.sql); that each
# bucket lives on the partition the documented hash says, computed here
# apart (Python's hashlib); that names with one {tag} share a shard and
# are taken all or nothing, and names without one are refused; that the
# stress test's window check holds for 64 sessions through the proxy; that
# a statement_timeout on the proxy ends a wait on the shard; that a
# stopped shard fails only its own buckets, naming itself; that roles get
# only what they were granted; and that nothing is left running.  Prints
# TAP.
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
source "$TOP/proxy/test/tap.sh"
: "${STRESS_SECONDS:=10}"

# check DESCRIPTION SQL: ok when SQL, run on the proxy database, is true
check() {
	local got
	got=$(P -c "SELECT ($2)::text" 2>&1) || true
	if [ "$got" = true ]; then ok "$1"; else not_ok "$1" "failed: $2" "got: $got"; fi
}
# the partition a name is on, by the rule README.md documents, computed
# without PostgreSQL
expected_partition() {
	/usr/bin/python3 -c '
import hashlib, sys
name = sys.argv[1]
open_ = name.find("{")
close = name.find("}", open_ + 1) if open_ >= 0 else -1
key = name[open_ + 1:close] if open_ >= 0 and close > open_ + 1 else name
h = int(hashlib.md5(key.encode()).hexdigest()[:8], 16)
print(h & (int(sys.argv[2]) - 1))' "$@"
}

echo "1..20"
px_init
for s in a b c proxy; do px_server "$s"; done
px_cluster tb a:tb_p0 b:tb_p1 c:tb_p2 a:tb_p3 2>/dev/null
PART_SERVER=(a b c a)
PART_DB=(tb_p0 tb_p1 tb_p2 tb_p3)
px_psql a postgres -c 'CREATE DATABASE tb_direct'
px_psql a tb_direct -c 'CREATE EXTENSION tokenbucket'

# 1. every function, every error: the same through the proxy as directly
px_psql a tb_direct -v ON_ERROR_STOP=0 -f "$TOP/proxy/test/same.sql" >"$W/direct.out" 2>&1 || true
P -v ON_ERROR_STOP=0 -f "$TOP/proxy/test/same.sql" >"$W/proxy.out" 2>&1 || true
# the proxy's additions: "public.fn(nargs): [dbname] REMOTE ERROR: ", the
# "Remote hint: " prefix, and the notice that it reconnects after an error
sed -E -e 's/public\.tb_[a-z_]+\([0-9]+\): \[[a-z_0-9]+\] REMOTE ERROR: //' \
	-e 's/^(HINT|DETAIL):  Remote (hint|detail): /\1:  /' \
	-e '/PL\/Proxy: dropping stale conn/d' -e '/^LOCATION:/d' "$W/proxy.out" >"$W/proxy.norm"
sed -E '/^LOCATION:/d' "$W/direct.out" >"$W/direct.norm"
errors=$(grep -c '^psql:.*: ERROR:' "$W/direct.norm" || true)
if diff -u "$W/direct.norm" "$W/proxy.norm" >"$W/diff" && [ "$errors" -ge 20 ] &&
	[ "$(wc -l <"$W/direct.norm")" -ge 100 ]; then
	ok "proxy/test/same.sql: the proxy answers as tokenbucket does, $errors errors included"
else
	not_ok "proxy/test/same.sql differs through the proxy ($errors errors directly)" \
		"$(head -n 60 "$W/diff")"
fi

# 2. the same API: every function an application or a DBA calls, with the
# same arguments, defaults, result, strictness, volatility and grants
api_of() {	# api_of SERVER DB EXTENSION
	px_psql "$1" "$2" -v ext="$3" <<'SQL'
SELECT p.oid::regprocedure, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid),
       p.proisstrict, p.provolatile, p.proacl
FROM pg_proc p
JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = :'ext'
WHERE p.proname IN ('tb_acquire', 'tb_try', 'tb_peek', 'tb_acquire_wait', 'tb_acquire_all',
                    'tb_acquire_all_wait', 'tb_try_all', 'tb_refund', 'tb_settle', 'tb_sync',
                    'tb_pause', 'tb_pause_until', 'tb_create', 'tb_alter', 'tb_drop',
                    'tb_reset', 'tb_purge', 'tb_create_quota', 'tb_set_parent', 'tb_set_alerts')
ORDER BY p.oid::regprocedure::text
SQL
}
api_of a tb_direct tokenbucket >"$W/api.direct"
api_of proxy tb tokenbucket_proxy >"$W/api.proxy"
if [ "$(wc -l <"$W/api.direct")" -eq 28 ] && diff -u "$W/api.direct" "$W/api.proxy" >"$W/api.diff"; then
	ok "the proxy has tokenbucket's 28 functions, the same signatures, defaults, results, labels and grants"
else
	not_ok "the proxy's API differs" "$(head -n 30 "$W/api.diff")"
fi

# 3-4. routing: 400 per-key buckets, made through the proxy, each found in
# the database its partition names, and nowhere else
P -c "SELECT tb_create('k:*', 1, 1)" \
	-c "SELECT count(tb_acquire(n)) FROM (SELECT 'k:' || i AS n FROM generate_series(1, 300) AS i
	    UNION ALL SELECT 'k:{t' || i || '}x' FROM generate_series(1, 50) AS i
	    UNION ALL SELECT 'k:{' || i || '}' FROM generate_series(1, 50) AS i) AS names" >/dev/null
for p in 0 1 2 3; do
	px_psql "${PART_SERVER[$p]}" "${PART_DB[$p]}" \
		-c "SELECT name FROM tb_buckets WHERE template = 'k:*'" | sed "s/\$/ $p/"
done | sort >"$W/found"
/usr/bin/python3 - "$W/found" <<'PY' >"$W/expected"
import hashlib, sys
names = ['k:%d' % i for i in range(1, 301)] + ['k:{t%d}x' % i for i in range(1, 51)] + \
        ['k:{%d}' % i for i in range(1, 51)]
for name in names:
    o = name.find('{'); c = name.find('}', o + 1) if o >= 0 else -1
    key = name[o + 1:c] if o >= 0 and c > o + 1 else name
    print(name, int(hashlib.md5(key.encode()).hexdigest()[:8], 16) & 3)
PY
sort -o "$W/expected" "$W/expected"
if diff -q "$W/expected" "$W/found" >/dev/null &&
	[ "$(awk '{print $2}' "$W/found" | sort -u | wc -l)" -eq 4 ]; then
	ok "400 buckets each on the partition md5 of its shard key says, every partition used"
else
	not_ok "buckets not where the hash puts them" "$(diff "$W/expected" "$W/found" | head -n 10)"
fi
mismatch=0
for name in 'a' '{user42}:rpm' 'x{}y{z}' '{{a}}' 'a{b' 'naïve{ü}'; do
	[ "$(P -c "SELECT tb_shard('$name')")" = "$(expected_partition "$name" 4)" ] ||
		mismatch=$((mismatch + 1))
done
if [ $mismatch -eq 0 ]; then
	ok "tb_shard() agrees with the documented rule on edge cases ({}, {{, no }, multibyte)"
else
	not_ok "tb_shard() disagrees on $mismatch names"
fi

# 5-7. hash tags: one shard, all or nothing; different keys refused
P -c "SELECT tb_create('{user42}:rpm', 3, 1, '1000 hours'), tb_create('{user42}:tpm', 100, 1, '1000 hours'),
             tb_create('solo', 5, 1, '1000 hours')" >/dev/null
p=$(P -c "SELECT tb_shard('{user42}:rpm')")
on_shard=$(px_psql "${PART_SERVER[$p]}" "${PART_DB[$p]}" \
	-c "SELECT count(*) FROM tb_buckets WHERE name LIKE '{user42}:%'")
if [ "$on_shard" = 2 ]; then
	ok "{user42}:rpm and {user42}:tpm are both on partition $p"
else
	not_ok "tagged buckets split: $on_shard of 2 on partition $p"
fi
check "tagged names are taken all or nothing: a refused tpm leaves rpm untouched" \
	"tb_acquire_all(ARRAY['{user42}:rpm', '{user42}:tpm'], ARRAY[1, 60])
	 AND NOT tb_acquire_all(ARRAY['{user42}:rpm', '{user42}:tpm'], ARRAY[1, 50])
	 AND (SELECT round(remaining) = 2 FROM tb_peek('{user42}:rpm', 0))
	 AND (SELECT round(remaining) = 40 FROM tb_peek('{user42}:tpm', 0))"
out=$(P -c "\\set VERBOSITY verbose" -c "SELECT tb_acquire_all(ARRAY['{user42}:rpm', 'solo'])" 2>&1 || true)
if grep -q '^ERROR:  22023: token buckets "{user42}:rpm" and "solo" are not kept on one shard' <<<"$out" &&
	grep -q "^HINT:  Give buckets taken together one hash tag" <<<"$out" &&
	[ "$(P -c "SELECT round(remaining) FROM tb_peek('{user42}:rpm', 0)")" = 2 ] &&
	[ "$(P -c "SELECT round(remaining) FROM tb_peek('solo', 0)")" = 5 ]; then
	ok "names with different shard keys: 22023 with a hint about tags, nothing taken"
else
	not_ok "a cross-shard tb_acquire_all was not refused cleanly" "$out"
fi

# 8-9. tokenbucket 1.9's parents: one hash tag keeps a parent on its
# child's partition, where it refuses at its own level, named in
# denied_by; a parent of another shard key is refused, nothing written
P -c "SELECT tb_create('{org}:root', 10, 1, '1000 hours'), tb_create('{org}:leaf', 4, 1, '1000 hours'),
             tb_create('{org}:leaf2', 10, 1, '1000 hours'), tb_set_parent('{org}:leaf', '{org}:root'),
             tb_set_parent('{org}:leaf2', '{org}:root')" >/dev/null
got=$(P -c "SELECT granted, denied_by FROM tb_try('{org}:leaf', 3)" \
	-c "SELECT granted, denied_by FROM tb_try('{org}:leaf', 2)" \
	-c "SELECT granted, denied_by FROM tb_try('{org}:leaf2', 8, 0)" \
	-c "SELECT granted, denied_by FROM tb_peek('{org}:leaf2', 7)" 2>&1 || true)
if [ "$got" = "$(printf 't|\nf|{org}:leaf\nf|{org}:root\nt|')" ]; then
	ok "a hierarchy under one hash tag refuses at the right level through the proxy, in denied_by"
else
	not_ok "denied_by through the proxy" "got: $got"
fi
refused=0
for pair in "'solo', '{user42}:rpm'" "'{org}:x', 'solo'" "'u:*', '{org}:root'" "'{org}:u:*', 'team:{1}'"; do
	out=$(P -c "\\set VERBOSITY verbose" -c "SELECT tb_set_parent($pair)" 2>&1 || true)
	grep -q '^ERROR:  22023: .* are not kept on one shard' <<<"$out" &&
		grep -q '^HINT:  Give a child and its parent one hash tag' <<<"$out" && refused=$((refused + 1))
done
written=0
for p in 0 1 2 3; do
	written=$((written + $(px_psql "${PART_SERVER[$p]}" "${PART_DB[$p]}" \
		-c "SELECT count(*) FROM tb_parents WHERE child IN ('solo', '{org}:x', 'u:*', '{org}:u:*')")))
done
if [ $refused -eq 4 ] && [ $written -eq 0 ] &&
	P -c "SELECT tb_set_parent('{org}:u:*', '{org}:root'), tb_set_parent('solo', NULL)" >/dev/null; then
	ok "tb_set_parent of a parent on another shard key: 22023 with a hint about tags, nothing written"
else
	not_ok "tb_set_parent across shard keys" "refused $refused of 4, rows written $written" "$out"
fi

# 10. a settle or refund told when its reservation was made (reserved_at,
# the proxy's now() before the call that reserved) gives back up the link
# of tb_parents written before it, to the parent charged; without it, to
# the bucket alone
got=$(P -At <<'SQL' 2>&1 || true
SELECT tb_create('{org}:top', 10, 1, '1000 hours'), tb_create('{org}:kid', 10, 1, '1000 hours'),
       tb_set_parent('{org}:kid', '{org}:top');
SELECT now() AS reserved_at \gset
SELECT tb_acquire('{org}:kid', 6);
SELECT round(remaining) FROM tb_peek('{org}:top', 0);
SELECT round(tb_settle('{org}:kid', 6, 2, :'reserved_at'));
SELECT round(remaining) FROM tb_peek('{org}:top', 0);
SELECT round(tb_refund('{org}:kid', 1, :'reserved_at'));
SELECT round(remaining) FROM tb_peek('{org}:top', 0);
SELECT round(tb_refund('{org}:kid', 1));
SELECT round(remaining) FROM tb_peek('{org}:top', 0);
SQL
)
if [ "$got" = "$(printf '||\nt\n4\n8\n8\n9\n9\n10\n9')" ]; then
	ok "tb_settle and tb_refund with reserved_at through the proxy give back to the parent charged, without it to the bucket alone"
else
	not_ok "tb_settle and tb_refund with reserved_at through the proxy" "got: $got"
fi

# 11-12. the stress test's window check, 64 sessions through the proxy: a hot
# bucket, per-user buckets from a template, a tagged pair taken together.
# Each grant is recorded with the proxy's clock just before and just after
# the call; all servers share this machine's clock.  The first seconds go
# to connecting: each proxy session opens its own connection to each
# partition it calls, at tens of milliseconds a connection on a busy
# machine, so throughput is make bench's business, not this test's.
P <<'SQL' >/dev/null
CREATE TABLE grants (bucket text NOT NULL, cost float8 NOT NULL, t0 timestamptz NOT NULL,
                     t timestamptz NOT NULL);
CREATE INDEX ON grants (bucket, t0);
CREATE FUNCTION record_between(bucket text, cost float8, t0 timestamptz) RETURNS void
	LANGUAGE sql AS 'INSERT INTO grants VALUES (bucket, cost, t0, clock_timestamp())';
SELECT tb_create('hot', 200, 200), tb_create('user:*', 3, 1),
       tb_create('{pair}:rpm', 5, 20), tb_create('{pair}:tpm', 500, 1000);
SQL
cat >"$W/hot.sql" <<'SQL'
SELECT CASE WHEN tb_acquire('hot') THEN record_between('hot', 1, t0) END
FROM (SELECT clock_timestamp() AS t0) AS before;
SQL
cat >"$W/user.sql" <<'SQL'
\set u random(1, 50)
SELECT CASE WHEN tb_acquire('user:' || :u) THEN record_between('user:' || :u, 1, t0) END
FROM (SELECT clock_timestamp() AS t0) AS before;
SQL
cat >"$W/pair.sql" <<'SQL'
\set tokens random(10, 120)
SELECT CASE WHEN tb_acquire_all(ARRAY['{pair}:rpm', '{pair}:tpm'], ARRAY[1, :tokens])
            THEN (record_between('{pair}:rpm', 1, t0), record_between('{pair}:tpm', :tokens, t0)) END
FROM (SELECT clock_timestamp() AS t0) AS before;
SQL
if pgbench -n -c 64 -j 2 -T "$STRESS_SECONDS" -h 127.0.0.1 -p "${PX_PORT[proxy]}" -U postgres \
	-f "$W/hot.sql@4" -f "$W/user.sql@3" -f "$W/pair.sql@3" tb >"$W/pgbench" 2>&1 &&
	! grep -qi 'error' "$W/pgbench"; then
	ok "64 sessions through the proxy for ${STRESS_SECONDS}s: no error"
else
	not_ok "pgbench through the proxy reported errors" "$(tail -n 20 "$W/pgbench")"
fi
grep -E '^(number of transactions actually processed|tps)' "$W/pgbench" | sed 's/^/# /'
checked=$(P -F ' ' -f "$TOP/test/load/windows.sql" 2>&1) || true
grants=$(P -c "SELECT count(*) FROM grants")
if [[ $checked =~ ^[0-9]+\ 0$ ]] &&
	[ "$(P -c "SELECT count(*) FILTER (WHERE bucket = 'hot') > 100
	                  AND count(*) FILTER (WHERE bucket = '{pair}:tpm') > 0
	                  AND count(DISTINCT bucket) FILTER (WHERE bucket LIKE 'user:%') > 10 FROM grants")" = t ]; then
	ok "no window over capacity + rate x w through the proxy (${checked% 0} windows, $grants grants)"
else
	not_ok "windows through the proxy" "checked, overdrawn: $checked; grants: $grants"
fi

# 13-14. a statement_timeout on the proxy ends a wait, on the shard too: the
# waiting call is cancelled there and takes nothing later
P -c "SELECT tb_create('slow', 1, 1, '4 s'), tb_acquire('slow')" >/dev/null
p=$(P -c "SELECT tb_shard('slow')")
out=$(P -v ON_ERROR_STOP=0 2>&1 <<'SQL' || true
SELECT clock_timestamp() AS t0 \gset
SET statement_timeout = '300ms';
SELECT tb_acquire_wait('slow');
RESET statement_timeout;
SELECT clock_timestamp() - :'t0' < interval '10 s';
SQL
)
if grep -q 'canceling statement due to statement timeout' <<<"$out" && [ "${out##*$'\n'}" = t ]; then
	ok "statement_timeout = 300ms on the proxy ends tb_acquire_wait in under 10 s"
else
	not_ok "statement_timeout did not end the wait" "$out"
fi
still=1
for _ in $(seq 100); do
	still=$(px_psql "${PART_SERVER[$p]}" postgres \
		-c "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%tb_acquire_wait%' AND pid <> pg_backend_pid()")
	[ "$still" = 0 ] && break
	sleep 0.1
done
sleep 5  # the token the cancelled wait would have taken is there by now
if [ "$still" = 0 ] && [ "$(P -c "SELECT granted FROM tb_peek('slow')")" = t ]; then
	ok "the cancelled wait is gone from its shard, and took no token afterwards"
else
	not_ok "the wait went on on partition $p" "waiting sessions: $still" \
		"peek: $(P -c "SELECT * FROM tb_peek('slow')")"
fi

# 15-17. one shard down: its buckets fail, naming it; the others go on;
# back up, it serves again
P -c "SELECT tb_create('b' || i, 5, 1) FROM generate_series(1, 40) AS i" >/dev/null
px_stop c
down=0 up=0 named=0 other=0
for i in $(seq 1 40); do
	if out=$(P -c "SELECT tb_acquire('b$i')" 2>&1); then
		[ "$out" = t ] && up=$((up + 1))
		[ "$(expected_partition "b$i" 4)" != 2 ] || other=$((other + 1))
	else
		down=$((down + 1))
		grep -q "\[tb_p2\].*port ${PX_PORT[c]}" <<<"$out" && named=$((named + 1))
		[ "$(expected_partition "b$i" 4)" = 2 ] || other=$((other + 1))
	fi
done
if [ $down -gt 0 ] && [ $named -eq $down ] && [ $other -eq 0 ] && [ $((up + down)) -eq 40 ]; then
	ok "partition 2 stopped: its $down buckets fail naming tb_p2 and its port, the other $up are granted"
else
	not_ok "a stopped shard" "down $down (named $named), granted $up, wrongly routed $other" "$out"
fi
out=$(P -c "SELECT * FROM tb_status" 2>&1 || true)
if grep -q 'ERROR:.*\[tb_p2\]' <<<"$out"; then
	ok "tb_status fails while a partition is down, naming it"
else
	not_ok "tb_status with a partition down" "$out"
fi
px_start c
ok_again=0
for i in $(seq 1 40); do
	[ "$(expected_partition "b$i" 4)" = 2 ] || continue
	# the first call may find the connection the shutdown broke
	P -c "SELECT tb_acquire('b$i')" >/dev/null 2>&1 ||
		P -c "SELECT tb_acquire('b$i')" >/dev/null 2>&1 || continue
	ok_again=$((ok_again + 1))
done
if [ $ok_again -eq $down ]; then
	ok "partition 2 started again: its $down buckets are granted again"
else
	not_ok "after the restart, $ok_again of $down buckets answer"
fi

# 18-19. privileges: a role gets what tokenbucket gives it, no more
P <<'SQL' >/dev/null
CREATE ROLE regress_tb_proxy_worker;
GRANT USAGE ON FOREIGN SERVER tokenbucket TO regress_tb_proxy_worker;
SQL
out=$(P -c "SET ROLE regress_tb_proxy_worker" -c "SELECT tb_acquire('b1', 0)" \
	-c "SELECT granted FROM tb_try('b1', 0)" 2>&1 || true)
if [ "$out" = "$(printf 't\nt')" ]; then
	ok "a role with USAGE on the server spends through the proxy"
else
	not_ok "a worker role cannot spend" "$out"
fi
denied=0
for call in "tb_create('x', 1, 1)" "tb_create('x:*', 1, 1)" "tb_drop('b1')" "tb_purge()" \
	"tb_refund('b1', 1)" "tb_pause('b1', '1 s')" "tb_reset('b1')" "tb_alter('b1', 2)" \
	"* FROM tb_status" "tb_shards_drop('b1')" "tb_refund('b1', 1, now())" \
	"tb_settle('b1', 1, 1, now())"; do
	out=$(P -c "SET ROLE regress_tb_proxy_worker" -c "SELECT $call" 2>&1 || true)
	grep -q 'permission denied' <<<"$out" && denied=$((denied + 1))
done
if [ $denied -eq 12 ]; then
	ok "the same role may not make, change, drop, purge, refund, settle, pause, reset or read tb_status"
else
	not_ok "only $denied of 12 privileged calls were refused"
fi

# 20. nothing left running
px_test_stopped
