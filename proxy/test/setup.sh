#!/usr/bin/env bash
# proxy/test/setup.sh: "Set-up, step by step" of docs/more-than-one-server.md,
# run as written on three throwaway servers: every code block of
# the section, in order, where its first line says it runs (a shard's
# postgresql.conf or pg_hba.conf, each shard server, each partition's
# database, the proxy server, the proxy database as a superuser, as dba,
# as app), with loopback addresses and ports in place of 10.0.0.x, and
# nothing else but the steps its prose asks (the partitions' databases,
# the proxy's pg_hba.conf line).  Then checks what the set-up promises:
# the proxy logs into the shards with scram passwords over TCP as roles
# that are not superusers and can do no more than they need; no password
# a non-superuser can read logs in as a superuser; app spends and may not
# make, dba makes, reads, purges and resets; a ROLLBACK on the proxy gives
# nothing back, as the guide says.  Prints TAP.
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
source "$TOP/proxy/test/tap.sh"
export PGOPTIONS="-c client_min_messages=warning"

# as ROLE PASSWORD SERVER DB [psql args]: a password login over TCP
as() {
	local role=$1 password=$2 server=$3 db=$4
	shift 4
	PGPASSWORD=$password psql -X -A -t -q -w -v ON_ERROR_STOP=1 -h 127.0.0.1 \
		-p "${PX_PORT[$server]}" -U "$role" -d "$db" "$@"
}
APP=(app app-on-proxy proxy tb_proxy)
DBA=(dba dba-on-proxy proxy tb_proxy)

echo "1..9"
px_init
for s in s1 s2 proxy; do px_server "$s"; done
declare -A DBS_OF=([s1]="tb_p0 tb_p2" [s2]="tb_p1 tb_p3")

# the section's code blocks, unindented, each in a file, and the first
# line of each (where it runs) in blocks.list
/usr/bin/python3 - "$TOP/docs/more-than-one-server.md" "$W" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
start = text.index('\n## Set-up, step by step')
end = text.index('\n## ', start + 1)
blocks = re.findall(r'^( *)```[a-z]*\n(.*?)^\1```', text[start:end], re.M | re.S)
with open(sys.argv[2] + '/blocks.list', 'w') as index:
    for i, (indent, body) in enumerate(blocks):
        lines = [l[len(indent):] for l in body.splitlines()]
        open('%s/block.%d' % (sys.argv[2], i), 'w').write('\n'.join(lines) + '\n')
        index.write('%d %s\n' % (i, lines[0]))
PY
# loopback and the servers' ports in place of the guide's addresses
localize() {
	sed -E -e "s/host=10\.0\.0\.1 /host=127.0.0.1 port=${PX_PORT[s1]} /" \
		-e "s/host=10\.0\.0\.2 /host=127.0.0.1 port=${PX_PORT[s2]} /" \
		-e 's#10\.0\.0\.[0-9]+/[0-9]+#127.0.0.1/32#g' -e 's/10\.0\.0\.[0-9]+/127.0.0.1/g' "$1"
}
# prepend the lines of a pg_hba.conf block to a server's pg_hba.conf
hba_first() {
	{ grep -v '^#' "$1"; cat "$PX/$2/pg_hba.conf"; } >"$W/hba" && cp "$W/hba" "$PX/$2/pg_hba.conf"
}

ran=0 failed=()
# the proxy's pg_hba.conf line, which step 2 gives in its prose
echo 'host  tb_proxy  app,dba  10.0.0.0/24  scram-sha-256' >"$W/proxy.hba"
localize "$W/proxy.hba" >"$W/proxy.hba.local"
hba_first "$W/proxy.hba.local" proxy
px_run "$PGBIN/pg_ctl" -D "$PX/proxy" -s reload
while read -r i where; do
	localize "$W/block.$i" >"$W/run.$i"
	rc=0
	case $where in
	'# postgresql.conf of each shard server'*)
		for s in s1 s2; do
			cat "$W/run.$i" >>"$PX/$s/postgresql.conf"
			px_stop "$s" && px_start "$s" || rc=1
		done ;;
	'# pg_hba.conf of each shard server'*)
		for s in s1 s2; do
			hba_first "$W/run.$i" "$s" && px_run "$PGBIN/pg_ctl" -D "$PX/$s" -s reload || rc=1
		done ;;
	'-- on each shard server, as a superuser')
		for s in s1 s2; do
			# the prose of step 1: the server's partitions' databases
			for db in ${DBS_OF[$s]}; do px_psql "$s" postgres -c "CREATE DATABASE $db" || rc=1; done
			px_psql "$s" postgres -f "$W/run.$i" >/dev/null || rc=1
		done ;;
	"-- in each partition's database, as a superuser")
		for s in s1 s2; do
			for db in ${DBS_OF[$s]}; do px_psql "$s" "$db" -f "$W/run.$i" >/dev/null || rc=1; done
		done ;;
	'-- on the proxy server, as a superuser')
		px_psql proxy postgres -f "$W/run.$i" >/dev/null || rc=1 ;;
	'-- in the proxy database tb_proxy, as a superuser')
		px_psql proxy tb_proxy -f "$W/run.$i" >/dev/null || rc=1 ;;
	'-- in the proxy database tb_proxy, as dba')
		as "${DBA[@]}" -f "$W/run.$i" >/dev/null || rc=1 ;;
	'-- in the proxy database tb_proxy, as app')
		as "${APP[@]}" -f "$W/run.$i" >/dev/null || rc=1 ;;
	*)
		rc=1 ;;
	esac
	if [ $rc -eq 0 ]; then ran=$((ran + 1)); else failed+=("block $i ($where) failed"); fi
done <"$W/blocks.list" 2>"$W/errors"
blocks=$(wc -l <"$W/blocks.list")
if [ ${#failed[@]} -eq 0 ] && [ "$ran" -ge 8 ]; then
	ok "docs/more-than-one-server.md's set-up: its $ran blocks ran as written, each where it says"
else
	not_ok "docs/more-than-one-server.md's set-up: $ran of $blocks blocks ran" "${failed[@]}" "$(head -n 20 "$W/errors")"
fi

# 2. the links are password logins over TCP, and only those
hba=0
for s in s1 s2; do
	out=$(psql -X -A -t -w -h 127.0.0.1 -p "${PX_PORT[$s]}" -U tb_proxy_app -d tb_p0 -c 'SELECT 1' 2>&1 || true)
	grep -q 'password' <<<"$out" && hba=$((hba + 1))
	[ "$(px_psql "$s" postgres -c "SELECT count(*) FROM pg_authid
		WHERE rolname IN ('tb_proxy_app', 'tb_proxy_dba') AND rolpassword LIKE 'SCRAM-SHA-256\$%'")" = 2 ] &&
		hba=$((hba + 1))
done
if [ $hba -eq 4 ]; then
	ok "the shards ask tb_proxy_app and tb_proxy_dba for a password over TCP, kept as SCRAM"
else
	not_ok "shard logins: $hba of 4 checks" "$out"
fi

# 3. no password a non-superuser can read logs in as a superuser
leaks=() seen=0
for who in app dba; do
	if [ $who = app ]; then r=("${APP[@]}"); else r=("${DBA[@]}"); fi
	while IFS='|' read -r user password; do
		[ -n "$user" ] || continue
		seen=$((seen + 1))
		super=$(PGPASSWORD=$password psql -X -A -t -w -h 127.0.0.1 -p "${PX_PORT[s1]}" -U "$user" \
			-d tb_p0 -c "SELECT rolsuper OR rolcreaterole OR rolcreatedb OR rolbypassrls
			             FROM pg_roles WHERE rolname = current_user" 2>&1) || true
		[ "$super" = f ] || leaks+=("$who reads $user's password, which logs in as: $super")
	done < <(as "${r[@]}" -c "SELECT m.option[2], p.option[2]
		FROM pg_user_mappings AS u,
		     LATERAL (SELECT string_to_array(o, '=') FROM unnest(u.umoptions) AS o WHERE o LIKE 'user=%') AS m(option),
		     LATERAL (SELECT string_to_array(o, '=') FROM unnest(u.umoptions) AS o WHERE o LIKE 'password=%') AS p(option)")
done
app_sees=$(as "${APP[@]}" -c "SELECT count(*) FROM pg_user_mappings WHERE umoptions IS NOT NULL")
if [ ${#leaks[@]} -eq 0 ] && [ "$seen" -eq 1 ] && [ "$app_sees" = 0 ]; then
	ok "app reads no mapping's password; dba reads its own, which logs into a shard as a plain role"
else
	not_ok "passwords readable" "app sees $app_sees mappings, $seen passwords tried" "${leaks[@]}"
fi

# 4. the shard roles can do what the proxy needs, no more
out=$(as tb_proxy_app app-on-shards s1 tb_p0 -c "SELECT tb_create('x', 1, 1)" 2>&1 || true)
out2=$(as tb_proxy_dba dba-on-shards s1 tb_p0 -c "SELECT count(*) FROM tb_buckets" 2>&1 || true)
out3=$(as tb_proxy_dba dba-on-shards s1 tb_p0 -c "CREATE ROLE regress_x" 2>&1 || true)
if grep -q 'permission denied for function tb_create' <<<"$out" &&
	grep -q 'permission denied for table tb_buckets' <<<"$out2" &&
	grep -q 'permission denied to create role' <<<"$out3"; then
	ok "on a shard, tb_proxy_app may not make a bucket, tb_proxy_dba may not read tb_buckets nor create a role"
else
	not_ok "shard roles can do too much" "$out" "$out2" "$out3"
fi

# 5-6. through the proxy: app spends and may not make; dba does the rest
out=$(as "${APP[@]}" -c "SELECT tb_acquire('openai:rpm'), tb_acquire('user:42'), granted FROM tb_try('user:43')" 2>&1 || true)
denied=0
for call in "tb_create('x', 1, 1)" "tb_drop('user:*')" "tb_purge()" "tb_refund('user:42', 1)" \
	"tb_settle('user:42', 1, 1, now())" "count(*) FROM tb_status" "count(*) FROM tb_stats" \
	"tb_stats_reset()"; do
	{ as "${APP[@]}" -c "SELECT $call" 2>&1 || true; } | grep -q 'permission denied' && denied=$((denied + 1))
done
if [ "$out" = "t|t|t" ] && [ $denied -eq 8 ]; then
	ok "app (scram login to the proxy) spends; making, dropping, purging, refunding, settling, reading and resetting are refused"
else
	not_ok "app through the proxy" "$out" "$denied of 8 refused"
fi
out=$(as "${DBA[@]}" <<'SQL' 2>&1 || true
SELECT tb_create('tmp:*', 5, 1), tb_create('{t}:x', 5, 1, '1000 hours');
SELECT tb_alter('user:*', 20);
SELECT tb_refund('{t}:x', 1) >= 0;
SELECT tb_refund('{t}:x', 1, now()) >= 0, tb_settle('{t}:x', 2, 1, now()) >= 0;
SELECT count(*) > 0 FROM tb_status WHERE name = 'openai:rpm';
SELECT sum(granted) > 0 FROM tb_stats;
SELECT count(*) FROM tb_template_stats WHERE template = 'user:*';
SELECT tb_stats_reset('openai:rpm');
SELECT tb_purge('1 hour') >= 0, tb_drop('tmp:*'), tb_drop('{t}:x');
SQL
)
if [ "$out" = "$(printf '|\n\nt\nt|t\nt\nt\n1\n\nt|t|t')" ]; then
	ok "dba through the proxy: makes, alters, refunds and settles (with reserved_at too), reads tb_status, tb_stats and tb_template_stats, resets, purges, drops"
else
	not_ok "dba through the proxy" "$out"
fi

# 7. what the guide says of transactions: a ROLLBACK gives nothing back
as "${DBA[@]}" -c "SELECT tb_create('rb', 5, 1, '1000 hours')" >/dev/null
as "${APP[@]}" -c "BEGIN" -c "SELECT tb_acquire('rb', 2)" -c "ROLLBACK" >/dev/null
left=$(as "${APP[@]}" -c "SELECT round(remaining) FROM tb_peek('rb', 0)")
if [ "$left" = 3 ]; then
	ok "a tb_acquire through the proxy rolled back on the proxy stays taken (3 of 5 left), as the guide says"
else
	not_ok "ROLLBACK through the proxy: $left left"
fi

# 8. the superuser goes through PUBLIC's mapping, as the guide warns
out=$(px_psql proxy tb_proxy -c "SELECT tb_create('su', 1, 1)" 2>&1 || true)
if grep -q 'permission denied for function tb_create' <<<"$out"; then
	ok "the proxy's superuser, mapped through PUBLIC to tb_proxy_app, may not make buckets on the shards"
else
	not_ok "the proxy's superuser" "$out"
fi

# 9. nothing left running
px_test_stopped
