#!/usr/bin/env bash
# proxy/test/partitions.sh: tokenbucket_proxy on every partition layout
# PL/Proxy accepts, on one throwaway server holding four partition
# databases and a proxy server in front: options named partition_N, the
# names mixed (p, partition_1, p2, ...), modular_mapping on the server and
# on its wrapper, a cluster given by the
# plproxy.get_cluster_* functions instead of a foreign server, and four
# partitions sharing two databases.  For each: tb_partitions() counts
# what PL/Proxy counts; every bucket lands where tb_shard() says, which is
# where PL/Proxy's mapping puts its hash (computed here apart, with
# Python's hashlib); a template is made, changed, purged and dropped on
# every database, each once; tb_status lists each bucket once.  With no
# cluster at all, calls meant for every partition fail with 42704 rather
# than doing nothing.  Prints TAP.
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
source "$TOP/proxy/test/tap.sh"
export PGOPTIONS="-c client_min_messages=warning"

DBS=(tb_q0 tb_q1 tb_q2 tb_q3)
conn() { echo "host=127.0.0.1 port=${PX_PORT[a]} dbname=$1"; }

echo "1..15"
px_init
px_server a
px_server proxy
for db in "${DBS[@]}"; do
	px_psql a postgres -c "CREATE DATABASE $db"
	px_psql a "$db" -c 'CREATE EXTENSION tokenbucket' -c 'CREATE EXTENSION tokenbucket_shard'
done
px_psql proxy postgres -c 'CREATE DATABASE tb'
P -c 'CREATE EXTENSION tokenbucket_proxy CASCADE'

# cluster OPTIONS: the foreign server tokenbucket made again with these
# options, mapped to the shards' postgres
cluster() {
	P <<SQL
DROP SERVER IF EXISTS tokenbucket CASCADE;
CREATE SERVER tokenbucket FOREIGN DATA WRAPPER plproxy OPTIONS ($1);
CREATE USER MAPPING FOR PUBLIC SERVER tokenbucket OPTIONS (user 'postgres');
SQL
}

# layout DESCRIPTION MAPPING DB...: with the cluster just configured, whose
# partition i is database DB[i] and which maps hashes by MAPPING (mask or
# modulo), make a template and 60 buckets from it through the proxy and
# check where they are, what tb_shard, tb_partitions and tb_status say,
# and that tb_alter, tb_purge and tb_drop reach every database once
layout() {
	local desc=$1 mapping=$2 parts=$#
	shift 2
	parts=$#
	local dbs=("$@") unique found expected got problems=()
	unique=$(printf '%s\n' "${dbs[@]}" | sort -u | wc -l)
	got=$(P -c "SELECT tb_partitions()" 2>&1) || true
	[ "$got" = "$parts" ] || problems+=("tb_partitions() = $got, not $parts")
	P -c "SELECT tb_create('zz:*', 5, 1000)" \
		-c "SELECT count(tb_acquire('zz:' || i)) FROM generate_series(1, 60) AS i" >/dev/null 2>"$W/err" ||
		problems+=("making buckets: $(cat "$W/err")")
	# where each bucket is, and where tb_shard says it is
	for db in $(printf '%s\n' "${dbs[@]}" | sort -u); do
		px_psql a "$db" -c "SELECT name FROM tb_buckets WHERE template = 'zz:*'" | sed "s/\$/ $db/"
	done | sort >"$W/found"
	/usr/bin/python3 - "$mapping" "${dbs[@]}" <<'PY' | sort >"$W/expected"
import hashlib, sys
mapping, dbs = sys.argv[1], sys.argv[2:]
for i in range(1, 61):
    h = int(hashlib.md5(('zz:%d' % i).encode()).hexdigest()[:8], 16)
    signed = h - (1 << 32) if h >= 1 << 31 else h
    # C's % truncates towards zero: abs(signed % n) is abs(signed) % n
    p = h & (len(dbs) - 1) if mapping == 'mask' else abs(signed) % len(dbs)
    print('zz:%d %s' % (i, dbs[p]))
PY
	diff -q "$W/expected" "$W/found" >/dev/null ||
		problems+=("buckets not where PL/Proxy's mapping puts them: $(diff "$W/expected" "$W/found" | head -n 4 | tr '\n' ' ' || true)")
	P -c "SELECT 'zz:' || i || ' ' || tb_shard('zz:' || i) FROM generate_series(1, 60) AS i" \
		2>&1 | sort >"$W/shard" || true
	awk -v dbs="${dbs[*]}" 'BEGIN { split(dbs, d, " "); for (i in d) p[d[i]] = i - 1 }
		{ print $1, p[$2] }' "$W/expected" | sort >"$W/shard.expected"
	# several partitions may share a database: tb_shard names one of them
	if [ "$unique" -eq "$parts" ] && ! diff -q "$W/shard.expected" "$W/shard" >/dev/null; then
		problems+=("tb_shard() disagrees: $(diff "$W/shard.expected" "$W/shard" | head -n 4 | tr '\n' ' ' || true)")
	fi
	if [ ${#problems[@]} -eq 0 ]; then
		ok "$desc: $parts partitions, 60 buckets each where PL/Proxy's $mapping mapping puts it, tb_shard() agrees"
	else
		not_ok "$desc: routing" "${problems[@]}"
	fi
	problems=()
	got=$(P -c "SELECT count(*) FILTER (WHERE NOT is_template) || ' ' || count(DISTINCT name) FILTER (WHERE NOT is_template)
	                   || ' ' || count(*) FILTER (WHERE is_template)
	            FROM tb_status WHERE name LIKE 'zz:%'" 2>&1) || true
	[ "$got" = "60 60 $unique" ] ||
		problems+=("tb_status: buckets, distinct names, template rows = $got, not 60 60 $unique")
	P -c "SELECT tb_alter('zz:*', 7)" >/dev/null 2>&1 || problems+=("tb_alter failed")
	for db in $(printf '%s\n' "${dbs[@]}" | sort -u); do
		got=$(px_psql a "$db" -c "SELECT count(*) FILTER (WHERE capacity = 7) || '/' || count(*) FROM tb_buckets WHERE name = 'zz:*'")
		[ "$got" = 1/1 ] || problems+=("tb_alter: template on $db: $got")
	done
	sleep 0.1	# 1000 tokens a second: full again
	got=$(P -c "SELECT tb_purge('0 s')" 2>&1) || true
	[ "$got" = 60 ] || problems+=("tb_purge('0 s') = $got, not 60")
	got=$(P -c "SELECT tb_drop('zz:*')" 2>&1) || true
	[ "$got" = t ] || problems+=("tb_drop('zz:*') = $got")
	for db in $(printf '%s\n' "${dbs[@]}" | sort -u); do
		got=$(px_psql a "$db" -c "SELECT count(*) FROM tb_buckets WHERE name LIKE 'zz:%'")
		[ "$got" = 0 ] || problems+=("$got rows left on $db")
	done
	if [ ${#problems[@]} -eq 0 ]; then
		ok "$desc: tb_status lists each bucket once, the template once per database ($unique); tb_alter, tb_purge (60), tb_drop reach every database"
	else
		not_ok "$desc: templates, status, purge" "${problems[@]}"
	fi
}

# 1-2. PL/Proxy's other naming, partition_N
cluster "partition_0 '$(conn tb_q0)', partition_1 '$(conn tb_q1)', partition_2 '$(conn tb_q2)', partition_3 '$(conn tb_q3)'"
layout "options partition_0 .. partition_3" mask tb_q0 tb_q1 tb_q2 tb_q3

# 3-4. both namings in one server, in any order; p alone is partition 0
cluster "partition_3 '$(conn tb_q3)', p2 '$(conn tb_q2)', partition_1 '$(conn tb_q1)', p '$(conn tb_q0)'"
layout "options partition_3, p2, partition_1, p" mask tb_q0 tb_q1 tb_q2 tb_q3

# 5-6. modular_mapping on the server: three partitions
cluster "modular_mapping '1', p0 '$(conn tb_q0)', p1 '$(conn tb_q1)', p2 '$(conn tb_q2)'"
layout "modular_mapping '1' on the server" modulo tb_q0 tb_q1 tb_q2

# 7-8. modular_mapping on the foreign data wrapper, which every server of it
# inherits (PL/Proxy's validator still wants a power of two of partitions
# then; with four, abs(hash % 4) and hash & 3 differ for half the names)
P -c "ALTER FOREIGN DATA WRAPPER plproxy OPTIONS (ADD modular_mapping '1')"
cluster "p0 '$(conn tb_q0)', p1 '$(conn tb_q1)', p2 '$(conn tb_q2)', p3 '$(conn tb_q3)'"
layout "modular_mapping '1' on the wrapper" modulo tb_q0 tb_q1 tb_q2 tb_q3
P -c "ALTER FOREIGN DATA WRAPPER plproxy OPTIONS (DROP modular_mapping)"

# 9-10. no foreign server: PL/Proxy's configuration functions
P <<SQL
DROP SERVER tokenbucket CASCADE;
CREATE SCHEMA plproxy;
CREATE FUNCTION plproxy.get_cluster_version(cluster_name text) RETURNS int4
	LANGUAGE sql AS 'SELECT 1';
CREATE FUNCTION plproxy.get_cluster_config(cluster_name text, OUT key text, OUT val text)
	RETURNS SETOF record LANGUAGE sql AS \$\$SELECT 'connection_lifetime', '600'\$\$;
CREATE FUNCTION plproxy.get_cluster_partitions(cluster_name text) RETURNS SETOF text
	LANGUAGE sql AS \$\$VALUES ('$(conn tb_q0) user=postgres'), ('$(conn tb_q1) user=postgres'),
	                          ('$(conn tb_q2) user=postgres'), ('$(conn tb_q3) user=postgres')\$\$;
SQL
layout "plproxy.get_cluster_partitions()" mask tb_q0 tb_q1 tb_q2 tb_q3

# 11-12. four partitions on two databases (a proxy in front of fewer
# servers than partitions)
P -c "DROP SCHEMA plproxy CASCADE"
cluster "p0 '$(conn tb_q0)', p1 '$(conn tb_q1)', p2 '$(conn tb_q0)', p3 '$(conn tb_q1)'"
layout "four partitions on two databases" mask tb_q0 tb_q1 tb_q0 tb_q1

# 13-14. no cluster: what acts on every partition fails, naming the
# cluster (PL/Proxy's XX000 "cluster not found" for its own functions,
# 42704 for the view and the helpers), rather than doing nothing
P -c "DROP SERVER tokenbucket CASCADE"
failed=0
for call in "SELECT tb_create('zz:*', 1, 1)" "SELECT tb_drop('zz:*')" "SELECT tb_alter('zz:*', 2)" \
	"SELECT tb_purge()" "SELECT * FROM tb_status"; do
	out=$(P -c "$call" 2>&1 || true)
	grep -Eq '^ERROR:  (the PL/Proxy cluster "tokenbucket" has no partitions|Pl/Proxy: cluster not found: tokenbucket)' <<<"$out" &&
		failed=$((failed + 1))
done
if [ $failed -eq 5 ]; then
	ok "no cluster: tb_create, tb_alter, tb_drop of a template, tb_purge and tb_status fail, naming the cluster"
else
	not_ok "no cluster: $failed of 5 calls refused" "$out"
fi
out=$(P -c '\set VERBOSITY verbose' -c "SELECT tb_shard('zz:1')" 2>&1 || true)
if grep -q '^ERROR:  42704: the PL/Proxy cluster "tokenbucket" has no partitions' <<<"$out" &&
	[ "$(P -c 'SELECT tb_partitions()')" = 0 ]; then
	ok "no cluster: tb_partitions() is 0, tb_shard() fails with 42704"
else
	not_ok "no cluster: tb_shard()" "$out"
fi

# 15. nothing left running
px_test_stopped
