#!/usr/bin/env bash
# proxy/test/hung.sh: a shard that does not answer, is down or restarts,
# through tokenbucket_proxy (issue 26, findings 1 and 6; issue 45, item 6).
# Four partitions: p0 and p3 on server a, p1 on a listener that accepts
# connections and never answers, p2 on server b; the cluster has
# query_timeout '2', as docs/more-than-one-server.md's set-up has it, and the callers set no
# statement_timeout: the proxy's own bound (tokenbucket.proxy_timeout,
# 5 s by default) ends their calls.  Each case runs in one proxy session
# and is timed there: a call to the listener, and one to a shard backend
# stopped with SIGSTOP, end after the bound with 08006 and a hint that
# they may be retried, and the session's next call is served at once; the
# bound lowered for a session ends its calls sooner (a wait's after its
# own timeout); a caller's shorter statement_timeout ends a call first; a
# call to a shard that is down fails with 08001; calls on connections that
# a restart of the shard broke are served (run once more on a new
# connection), never XX000.  Prints TAP.
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
source "$TOP/proxy/test/tap.sh"
LISTENER=
px_on_exit() {
	[ ! -s "$W/pid" ] || kill -CONT "$(cat "$W/pid")" 2>/dev/null || true
	[ -z "$LISTENER" ] || kill "$LISTENER" 2>/dev/null || true
}

echo "1..11"
px_init
for s in a b proxy; do px_server "$s"; done
px_cluster tb a:tb_p0 a:tb_p1 b:tb_p2 a:tb_p3 2>/dev/null
# a listener that accepts and never answers, in place of p1
port=$(tb_free_port)
/usr/bin/python3 - "$port" <<'PY' &
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
held = []
while True:
    held.append(s.accept()[0])
PY
LISTENER=$!
P -c "ALTER SERVER tokenbucket OPTIONS (SET p1 'host=127.0.0.1 port=$port dbname=tb_p1', ADD query_timeout '2')"
# a bucket on each partition
for p in 0 1 2 3; do
	name[$p]=$(P -c "SELECT n FROM (SELECT 'n' || i AS n FROM generate_series(1, 100) AS i) AS s
	                 WHERE tb_shard(n) = $p LIMIT 1")
done
for p in 0 2 3; do P -c "SELECT tb_create('${name[$p]}', 1000, 1000)" >/dev/null; done

# run SQL in one proxy session as a caller that sets nothing (or what
# $SETTINGS says), printing each error as "error SQLSTATE | message |
# hint" and the seconds each statement took as "took N"
session() {
	{
		echo "${SETTINGS:-}"
		sed -e "s/^SELECT /SELECT clock_timestamp() AS t0 \\\\gset\nSELECT /" \
			-e "s/;\$/;\nSELECT 'took ' || round(extract(epoch FROM clock_timestamp() - :'t0')::numeric, 1);/"
	} >"$W/session.sql"
	# (a call that never ends is a failure after a minute, not a hang)
	timeout 60 psql -X -A -t -q -h 127.0.0.1 -p "${PX_PORT[proxy]}" -U postgres -d tb \
		-v ON_ERROR_STOP=0 -v VERBOSITY=verbose -f "$W/session.sql" 2>&1 |
		sed -E -e 's/^psql:[^ ]+ ERROR:  ([0-9A-Z]{5}): (.*)$/error \1 | \2/' -e 's/^HINT:  /hint: /' |
		tee -a "$W/log" || true
}
# took N from the Kth statement of the output (1 is the first)
took() { { grep '^took ' <<<"$1" || true; } | sed -n "${2}p" | awk '{print $2}'; }

# 1-2. the listener: 08006 within the bound, the session free at once
out=$(session <<SQL
SELECT tb_acquire('${name[1]}');
SELECT tb_acquire('${name[0]}');
SQL
)
t=$(took "$out" 1)
if grep -q "^error 08006 | the shard of token bucket \"${name[1]}\" did not answer within tokenbucket.proxy_timeout (5s)" <<<"$out" &&
	grep -q '^hint: .*may be retried' <<<"$out" && awk -v t="$t" 'BEGIN { exit !(t >= 4.5 && t < 30) }'; then
	ok "a listener that never answers, no statement_timeout: 08006 after $t s (the bound, 5 s), with a hint to retry"
else
	not_ok "a listener that never answers" "$out"
fi
t=$(took "$out" 2)
if grep -qx 't' <<<"$out" && awk -v t="$t" 'BEGIN { exit !(t < 1) }'; then
	ok "the same session's next call, on another partition, is served in $t s"
else
	not_ok "the session after the listener" "$out"
fi

# 3-4. a shard backend stopped with SIGSTOP: 08006 within the bound
# (stop.sh stops the backend that serves the proxy on p2, cont.sh lets it go)
cat >"$W/stop.sh" <<SH
psql -X -A -t -q -h 127.0.0.1 -p ${PX_PORT[b]} -U postgres -d postgres \\
	-c "SELECT pid FROM pg_stat_activity WHERE datname = 'tb_p2'" >"$W/pid"
kill -STOP \$(cat "$W/pid")
SH
echo "kill -CONT \$(cat '$W/pid')" >"$W/cont.sh"
out=$(session <<SQL
SELECT tb_acquire('${name[2]}');
\\! bash $W/stop.sh
SELECT tb_acquire('${name[2]}');
\\! bash $W/cont.sh
SELECT tb_acquire('${name[0]}');
SQL
)
bash "$W/cont.sh" 2>/dev/null || true	# (in case the session ended before it let the backend go)
t=$(took "$out" 2)
if [ "$(wc -l <"$W/pid")" = 1 ] &&
	grep -q "^error 08006 | lost the connection to the shard of token bucket \"${name[2]}\"" <<<"$out" &&
	grep -q '^hint: .*may be retried' <<<"$out" && awk -v t="$t" 'BEGIN { exit !(t >= 4.5 && t < 40) }'; then
	ok "a shard backend stopped with SIGSTOP, no statement_timeout: 08006 after $t s (the bound, 5 s), with a hint"
else
	not_ok "a shard backend stopped with SIGSTOP" "$out"
fi
t=$(took "$out" 3)
if [ "$(grep -cx 't' <<<"$out")" = 2 ] && awk -v t="$t" 'BEGIN { exit !(t < 1) }'; then
	ok "the same session's next call is served in $t s"
else
	not_ok "the session after the stopped shard" "$out"
fi

# 5-7. the bound lowered for a session ends a call sooner, a wait's after
# its own timeout; a statement_timeout shorter than the bound ends it first
out=$(SETTINGS="SET tokenbucket.proxy_timeout = '1s';" session <<SQL
SELECT tb_acquire('${name[1]}');
SELECT tb_acquire_wait('${name[1]}', 1, '1 s');
SQL
)
t=$(took "$out" 1)
t2=$(took "$out" 2)
if [ "$(grep -c "^error 08006 | the shard of token bucket \"${name[1]}\" did not answer within tokenbucket.proxy_timeout (1s)" <<<"$out")" = 2 ] &&
	awk -v t="$t" -v t2="$t2" 'BEGIN { exit !(t >= 0.9 && t < 4.5 && t2 >= 1.9 && t2 < 4.5) }'; then
	ok "SET tokenbucket.proxy_timeout = '1s': 08006 after $t s, a wait with a timeout of 1 s after $t2 s"
else
	not_ok "a lower bound" "$out"
fi
out=$(SETTINGS="SET statement_timeout = '2s';" session <<SQL
SELECT tb_acquire('${name[1]}');
SQL
)
t=$(took "$out" 1)
if grep -q "^error 08006 | the shard of token bucket \"${name[1]}\" did not answer within statement_timeout (2s)" <<<"$out" &&
	awk -v t="$t" 'BEGIN { exit !(t >= 1.8 && t < 4.5) }'; then
	ok "a caller's statement_timeout of 2s, shorter than the bound: 08006 after $t s"
else
	not_ok "statement_timeout before the bound" "$out"
fi
out=$(session <<SQL
SELECT tb_acquire('${name[0]}');
SHOW tokenbucket.proxy_timeout;
SQL
)
if grep -qx '5s' <<<"$out"; then
	ok "the bound's default is 5s"
else
	not_ok "the default bound" "$out"
fi

# 8. a shard that is down: 08001, nothing done, never XX000
px_stop b
out=$(session <<SQL
SELECT tb_acquire('${name[2]}');
SQL
)
if grep -q "^error 08001 | could not connect to the shard of token bucket \"${name[2]}\"" <<<"$out" &&
	grep -q '^hint: .*did nothing: it may be retried' <<<"$out" && grep -q 'tb_p2.*Connection refused' <<<"$out"; then
	ok "a shard that is down: 08001 naming tb_p2, with a hint to retry"
else
	not_ok "a shard that is down" "$out"
fi
px_start b

# 9-10. a restart breaks the session's connection: the next calls, a
# tb_acquire and a tb_peek, are served on a new one
out=$(session <<SQL
SELECT tb_acquire('${name[2]}');
\\! runuser -u postgres -- $PGBIN/pg_ctl -D $PX/b -m fast -w -s restart -l $PX/b.log
SELECT tb_acquire('${name[2]}');
SELECT granted FROM tb_peek('${name[2]}');
SQL
)
if [ "$(grep -cx 't' <<<"$out")" = 3 ] && ! grep -q '^error' <<<"$out"; then
	ok "a shard restarted under a session: its next tb_acquire and tb_peek are served"
else
	not_ok "calls after a restart" "$out"
fi
if [ "$(grep -c '^took ' "$W/log")" -ge 9 ] && ! grep -q 'error XX000' "$W/log"; then
	ok "no call above ended with XX000"
else
	not_ok "XX000 seen" "$(grep 'error XX000' "$W/log")"
fi

# 11. nothing left running
kill "$LISTENER" 2>/dev/null || true
LISTENER=
px_test_stopped
