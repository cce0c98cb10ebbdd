#!/usr/bin/env bash
# examples/clients/run.sh: `make -C examples/clients run`.  Five clients in
# five languages share one limit: a throwaway PostgreSQL with tokenbucket,
# one bucket 'shared' (CLIENTS_CAPACITY at once, CLIENTS_RATE a second),
# and psycopg2, asyncpg, node-pg, JDBC and Perl DBD::Pg clients started
# together, as the least-privileged role 'worker', for EXAMPLE_SECONDS.
# Checks the figures they print (README.md), prints a JSON line last, and
# exits non-zero when a check fails.
source "$(dirname "$0")/../../scripts/common.sh"
: "${EXAMPLE_SECONDS:=5}"
: "${CLIENTS_CAPACITY:=5}"
: "${CLIENTS_RATE:=10}"
HERE=$TOP/examples/clients
CLIENTS=(psycopg2 asyncpg node-pg jdbc perl)
BARRIER=7402	# the advisory lock key the clients start on

tb_install_packages python3-psycopg2 python3-asyncpg libdbd-pg-perl \
	default-jdk-headless libpostgresql-jdbc-java
# Debian's node-pg needs Debian's nodejs 18, which would replace a newer
# Node already installed: take pg from npm, pinned by package-lock.json,
# into node/node_modules (see README.md)
command -v npm >/dev/null || tb_install_packages nodejs npm
if ! cmp -s "$HERE/node/package-lock.json" "$HERE/node/node_modules/.installed-lock"; then
	say "installing node-pg from npm (node/package-lock.json)"
	(cd "$HERE/node" && npm ci --no-audit --no-fund --loglevel=error)
	cp "$HERE/node/package-lock.json" "$HERE/node/node_modules/.installed-lock"
fi
tb_build_install
say "starting a throwaway PostgreSQL"
tb_start_server

# The DBA's part: the buckets, and the application role.  tb_try, tb_peek
# and tb_acquire_wait are executable by PUBLIC, so 'worker' needs no grant:
# it cannot make, change or read buckets, nor refund, settle, sync or pause.
psql -q -X -v ON_ERROR_STOP=1 <<SQL
CREATE EXTENSION tokenbucket;
SELECT tb_create('shared', $CLIENTS_CAPACITY, $CLIENTS_RATE) \g /dev/null
SELECT tb_create('solo:*', 1, $CLIENTS_RATE) \g /dev/null
CREATE ROLE worker LOGIN;
SQL

# what 'worker' is refused, as SQLSTATEs
refused() {
	psql -X -q -U worker -v VERBOSITY=sqlstate -c "$1" 2>&1 >/dev/null |
		sed -n 's/^ERROR: *//p' || true
}
WORKER=$(printf '{"tb_create": "%s", "tb_buckets": "%s", "tb_refund": "%s", "template": "%s"}' \
	"$(refused "SELECT tb_create('mine', 1, 1)")" \
	"$(refused "SELECT * FROM tb_buckets")" \
	"$(refused "SELECT tb_refund('shared', 1)")" \
	"$(refused "SELECT * FROM tb_try('solo:*')")")

# Hold the barrier while the clients start (the JVM takes seconds), and let
# go once all of them wait on it, so that they run at the same time.
coproc HOLD { psql -X -q -A -t -v ON_ERROR_STOP=1; }
TB_CHILDREN+=("$HOLD_PID")
echo "SELECT 'held' FROM pg_advisory_lock($BARRIER);" >&"${HOLD[1]}"
read -r _ <&"${HOLD[0]}"

say "${#CLIENTS[@]} clients share one bucket ($CLIENTS_CAPACITY at once, $CLIENTS_RATE a second) for $EXAMPLE_SECONDS s"
declare -A PIDS
for client in "${CLIENTS[@]}"; do
	(
		export PGHOST=127.0.0.1 PGUSER=worker EXAMPLE_BUCKET=shared \
			EXAMPLE_SECONDS EXAMPLE_RATE=$CLIENTS_RATE EXAMPLE_BARRIER=$BARRIER
		# a client that hangs is ended, and reported as failed
		limit=(timeout $((${EXAMPLE_SECONDS%.*} + 60)))
		case $client in
		psycopg2) exec "${limit[@]}" /usr/bin/python3 "$HERE/client_psycopg2.py" ;;
		asyncpg) exec "${limit[@]}" /usr/bin/python3 "$HERE/client_asyncpg.py" ;;
		node-pg) exec "${limit[@]}" node "$HERE/node/client.js" ;;
		jdbc) exec "${limit[@]}" java -cp /usr/share/java/postgresql.jar "$HERE/Client.java" ;;
		perl) exec "${limit[@]}" perl "$HERE/client.pl" ;;
		esac
	) >"$TB_TMP/$client.out" 2>"$TB_TMP/$client.err" &
	PIDS[$client]=$!
	TB_CHILDREN+=($!)
done
for ((i = 0; i < 600; i++)); do	# a minute at most
	waiting=$(psql -X -A -t -c "SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND objid = $BARRIER AND objsubid = 1 AND NOT granted")
	[ "$waiting" -eq ${#CLIENTS[@]} ] && break
	for client in "${CLIENTS[@]}"; do	# one ended already: it failed
		kill -0 "${PIDS[$client]}" 2>/dev/null || break 2
	done
	sleep 0.1
done
echo "SELECT pg_advisory_unlock($BARRIER);" >&"${HOLD[1]}"
for client in "${CLIENTS[@]}"; do
	rc=0
	wait "${PIDS[$client]}" || rc=$?
	echo $rc >"$TB_TMP/$client.rc"
done
echo '\q' >&"${HOLD[1]}"

CLIENT_NAMES="${CLIENTS[*]}" WORKER=$WORKER /usr/bin/python3 - "$TB_TMP" \
	"$CLIENTS_CAPACITY" "$CLIENTS_RATE" <<'PY'
import json
import os
import sys

tmp, capacity, rate = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
clients, errors = {}, []
for name in os.environ["CLIENT_NAMES"].split():
    rc = int(open(f"{tmp}/{name}.rc").read())
    out = open(f"{tmp}/{name}.out").read().strip().splitlines()
    try:
        clients[name] = json.loads(out[-1])
    except (IndexError, ValueError):
        clients[name] = None
    if rc != 0 or clients[name] is None:
        # the line that names the error: first in Java's and Node's stack
        # traces, last in Python's
        err = open(f"{tmp}/{name}.err").read().strip().splitlines()
        named = [line for line in err if "rror" in line or "xception" in line]
        errors.append(f"{name} (exit {rc}): "
                      + (named[0] if named else err[-1] if err else "no output").strip())
ran = {n: c for n, c in clients.items() if c}

print(f"{'client':10} {'grants':>6} {'denials':>7} {'retried':>7} {'granted':>7}"
      f" {'waits':>5} {'granted':>7}  retry_after_seconds")
for name, c in ran.items():
    print(f"{name:10} {c['grants']:6} {c['denials']:7} {c['retried']:7} {c['retried_granted']:7}"
          f" {c['waits']:5} {c['waits_granted']:7}  {c['retry_after_min']} .. {c['retry_after_max']}")
for e in errors:
    print("error:", e)

# the window every grant fell in, on the server's clock: from the earliest
# first call to the latest grant
grants = sum(c["grants"] for c in ran.values())
lasts = [c["last_grant"] for c in ran.values() if c["last_grant"] is not None]
elapsed = max(lasts) - min(c["first_call"] for c in ran.values()) if lasts else 0.0
allowed = capacity + rate * elapsed
print(f"{grants} granted in {elapsed:.3f} s of the server's clock:"
      f" at most {capacity:g} + {rate:g} x {elapsed:.3f} = {allowed:.1f} allowed"
      f" ({grants / allowed:.0%} of it)")

worker = json.loads(os.environ["WORKER"])
checks = {
    "no_errors": not errors,
    "within_limit": grants <= allowed,
    "near_limit": grants >= 0.5 * allowed,
    "each_granted": all(c["grants"] > 0 for c in ran.values()),
    "each_waited": all(c["waits"] > 0 for c in ran.values()),
    # every denial's retry_after_seconds a number in (0, cost/rate]; alone,
    # every retry after sleeping it was granted
    "retry_after_usable": all(c["retry_after_usable"] and c["solo_retried"] > 0
                              and c["solo_retried_granted"] == c["solo_retried"]
                              for c in ran.values()),
    # all five peeked before anyone spent: had tb_peek taken a token, they
    # would have seen different figures
    "peek_took_nothing": len(ran) == len(clients)
                         and all(c["peek"]["granted"] for c in ran.values())
                         and len({c["peek"]["remaining"] for c in ran.values()}) == 1,
    "worker_least_privileged": worker == {"tb_create": "42501", "tb_buckets": "42501",
                                          "tb_refund": "42501", "template": "22023"},
}
failed = [k for k, ok in checks.items() if not ok]
print("checks:", "all passed" if not failed else "FAILED " + ", ".join(failed))
print(json.dumps({"clients": clients, "errors": errors, "grants": grants,
                  "elapsed": elapsed, "allowed": allowed,
                  "capacity": capacity, "rate": rate, "worker": worker,
                  "checks": checks, "ok": not failed}))
sys.exit(1 if failed else 0)
PY
