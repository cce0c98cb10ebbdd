#!/usr/bin/env bash
# test/examples.sh [NAME...]: each example of examples/ (or those named) in
# a short mode (under a minute each), with its own servers, checked from
# the JSON it prints last.  Prints TAP.
#
# What the provider refused is counted exactly; how much of its limit a
# run used is shown (85-95% on a quiet machine), and checked only against
# half: a run's seconds include its clients' start and end, which a busy
# machine stretches, while a limiter that slept out whole windows would
# use far less.
set -uo pipefail
TOP=$(cd "$(dirname "$0")/.." && pwd)
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
ONLY=(asyncio gateway clients celery)
[ $# -gt 0 ] && ONLY=("$@")
echo "1..${#ONLY[@]}"
n=0

# example NAME ENV... -- CHECK: run examples/NAME/run.sh, then CHECK, a
# Python expression over r, the JSON it printed last
example() {
	local name=$1 rc=0 check
	shift
	local env=()
	while [ "$1" != "--" ]; do env+=("$1"); shift; done
	check=$2
	case " ${ONLY[*]} " in *" $name "*) ;; *) return 0 ;; esac
	n=$((n + 1))
	env "${env[@]}" bash "$TOP/examples/$name/run.sh" >"$LOG" 2>&1 || rc=$?
	grep -v '^{' "$LOG" | grep -E 'served|answered|removed|allowed|checks' | sed 's/^/# /'
	if [ $rc -eq 0 ] && tail -n 1 "$LOG" | /usr/bin/python3 -c "
import json, sys
r = json.loads(sys.stdin.read())
sys.exit(0 if ($check) else 1)"; then
		echo "ok $n - $name: $3"
	else
		echo "not ok $n - $name: $3"
		sed 's/^/#   /' "$LOG" | tail -n 30
	fi
}

example asyncio EXAMPLE_REQUESTS=150 -- \
	'r["refused"] == 0 and r["timed_out"] == 0 and r["of_limit"] >= 0.5
	and r["refused_in_flight"] == 0 and r["max_in_flight"] == r["inflight"] == 3' \
	"150 concurrent requests through a lease and a token taken client-side: the provider refused none, for its rate or its cap of 3 at once, and served at least half its limit (the bucket is set at 90% of its rate and half its burst)"
example gateway EXAMPLE_SECONDS=3 -- \
	'r["alice"].get("429", 0) > 0 and r["bob"].get("429", 0) == 0
	and r["alice"]["retry_after"] == ["1"]
	and 0.5 * (r["limit"]["capacity"] + r["limit"]["rate"] * r["alice"]["elapsed"])
	    <= r["alice"]["ok"] <= r["limit"]["capacity"] + r["limit"]["rate"] * r["alice"]["elapsed"]
	and len(r["bad_keys"]) == 8 and set(r["bad_keys"].values()) == {400}
	and r["purged"] == r["users"] == 2' \
	"a fast user is answered 429 with Retry-After: 1 and held to her limit, a slow one never; 8 bad keys answered 400, making no bucket; tb_purge removes both idle buckets"
example clients EXAMPLE_SECONDS=3 -- \
	'r["ok"] and not r["errors"] and len(r["clients"]) == 5
	and 0.5 * r["allowed"] <= r["grants"] <= r["allowed"]
	and all(c["grants"] > 0 and c["waits"] > 0 and c["retry_after_usable"]
	        and c["solo_retried_granted"] == c["solo_retried"] > 0 for c in r["clients"].values())' \
	"psycopg2, asyncpg, node-pg, JDBC and Perl share one bucket: never over capacity + rate x elapsed, at least half of it, each granted, retry_after_seconds usable in each"
example celery EXAMPLE_TASKS=100 -- \
	'r["with"]["refused"] == 0 and r["with"]["served"] == r["with"]["tasks"]
	and r["with"]["of_limit"] >= 0.5 and r["without"]["refused"] > 0' \
	"with the limiter the provider refused none, served every task and at least half its limit; without it, it refused some"
