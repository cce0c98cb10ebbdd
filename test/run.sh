#!/usr/bin/env bash
# test/run.sh: `make test`.  Sets up a fresh Debian 12 machine (as root),
# builds and installs the extension, runs every suite, and prints each
# suite's output, a table of what each passed, failed and took, and
# "N passed, N failed" last.
#
# The suites run side by side (TB_JOBS at a time, default 4), longest
# first, each on throwaway servers of its own, so that none sees another's
# sessions, buckets or load through a server they share.  Most of a suite's
# time is spent waiting (for a server to start, a timeout to pass, a fixed
# length of load), which is why this fits the 10 minutes the suite may
# take on a 2-core machine (README.md, "Tests"); a new suite must fit too.
#
#   pg_regress    sql/*.sql against expected/*.out      (make installcheck)
#   isolation     test/isolation/specs/*.spec            (make installcheck)
#   pgtap         test/pgtap/*.sql, run by pg_prove      (make installcheck)
#   tap/NNN       test/t/NNN_*.pl (PostgreSQL::Test::Cluster), one suite a
#                 file: crash, replica, upgrade and dump, repair, memory
#                 buckets and counters across restarts, leases across a
#                 crash, quotas under 64 sessions and over a stopped
#                 server's period end                     (make prove_installcheck)
#   stress        test/stress.sh: 64 sessions on a mix of buckets, never overdrawn
#   alerts        test/alerts.sh: 64 sessions crossing quotas' thresholds, some
#                 rolling back: one event and one NOTIFY per threshold
#   wait          test/wait.sh: waiting on the real clock
#   leases        test/leases.sh: in-flight limits with sessions killed,
#                 terminated and failing; waits; 64 sessions on 3 slots
#   held          test/held.sh: a row another transaction holds: bounded, 55P03
#                 naming the holder; tb_held
#   hierarchy     test/hierarchy.sh: 32 sessions charging users of one team up
#                 to their organisation: every level granted the same, none overdrawn
#   locks         test/locks.sh: timeouts whatever holds a row; sleepers
#                 never hold up a DBA's ALTER TABLE
#   xact          test/xact.sh: a memory lease released by a transaction
#                 whose backend is terminated or killed stays its holder's;
#                 PREPARE refused once, naming all it refuses
#   memory        test/memory.sh 1: memory flat over many calls of every entry point
#   memory-more   test/memory.sh 2-6: valgrind, many names in one call, a
#                 million grants, routed calls
#   exporter      test/exporter.sh: prometheus-postgres-exporter with
#                 prometheus/tokenbucket.yaml, scraped over HTTP, exact
#   proxy         proxy/test/proxy.sh: tokenbucket_proxy in front of three servers
#                 holding four partitions, one of them stopped midway
#   partitions    proxy/test/partitions.sh: the proxy on every partition
#                 naming and mapping PL/Proxy accepts
#   stats         proxy/test/stats.sh: counters summed over the shards
#   errors        proxy/test/errors.sh: a shard's errors through the proxy, as
#                 raised directly, on a connection kept; a fresh install of
#                 the proxy against each older version updated
#   hung          proxy/test/hung.sh: a shard that does not answer, stopped
#                 or restarted: class 08 within the bound the DBA sets
#   setup         proxy/test/setup.sh: docs/more-than-one-server.md's set-up, as written,
#                 with scram logins and least-privileged roles
#   move          proxy/test/move.sh: four partitions on one server moved,
#                 three of them, to two others under load: fenced calls
#                 fail with class 08, no window overdrawn, each bucket once
#   python        clients/python/test.sh: the Python client's pytest suite,
#                 against the stand-in provider where it needs one; its
#                 types (mypy --strict) and an offline pip install
#   docs          test/doctest.sh: every sql and sh block of README.md,
#                 docs/, bench/README.md and CONTRIBUTING.md run against a
#                 throwaway server, output checked where shown; and the
#                 runner failing on broken blocks
#   pgxn          test/pgxn.sh: META.json against the PGXN spec, make dist,
#                 and pgxnclient installing its zip into a copy of the
#                 server under test, then CREATE EXTENSION and tb_acquire
#   examples/X    test/examples.sh X: examples/X in a short mode, with its
#                 own servers (PostgreSQL, the stand-in provider, RabbitMQ)
#
# TB_SKIP="suite ..." leaves out the named suites ("tap" or "examples"
# leaves out all of theirs; make test-versions leaves out the examples:
# their clients and servers do not change with the server's version).
# TB_ONLY="suite ..." runs only those.
#
# SANITIZE=1 builds with AddressSanitizer and UndefinedBehaviorSanitizer,
# runs pg_regress, isolation, pgTAP and a short stress run against it, one
# after the other on one server, and fails on any sanitizer report.

source "$(dirname "$0")/../scripts/common.sh"

EXAMPLE_PACKAGES=(python3-aiohttp python3-asyncpg python3-psycopg2 python3-celery
	rabbitmq-server libdbd-pg-perl default-jdk-headless libpostgresql-jdbc-java)
# the Python client's suite (clients/python), and the examples built on it;
# mypy checks the client's types, venv and setuptools install it as README says
PYTHON_PACKAGES=(python3-aiohttp python3-asyncpg python3-psycopg2 python3-celery
	python3-psycopg python3-psycopg-pool python3-httpx python3-starlette python3-flask
	python3-pytest python3-pytest-asyncio python3-mypy python3-venv python3-setuptools)
command -v npm >/dev/null || EXAMPLE_PACKAGES+=(nodejs npm)
case " ${TB_SKIP:-} " in *" examples "*) EXAMPLE_PACKAGES=() ;; esac
# every package any suite needs, in one apt-get before anything runs: the
# suites run side by side and must not wait for dpkg's lock (nor fail on it)
tb_install_packages "postgresql-$PGVERSION-pgtap" libtap-parser-sourcehandler-pgtap-perl \
	libipc-run-perl valgrind prometheus-postgres-exporter curl "postgresql-$PGVERSION-plproxy" \
	pgxnclient git \
	"${EXAMPLE_PACKAGES[@]}" "${PYTHON_PACKAGES[@]}"
tb_build_install
# the examples' own run.sh builds and installs nothing more
export TB_INSTALLED=1

OUT=$(mktemp -d /tmp/tokenbucket-test.XXXXXX)
chmod 755 "$OUT"
trap 'rm -rf "$OUT"' EXIT

# Count "ok"/"FAILED" lines of pg_regress and pg_isolation_regress (the
# PostgreSQL 15 format, and the TAP format of 16 and later); a run that
# failed without one counts as one failure.  Prints "passed failed".
count_regress() {	# count_regress LOG RC
	local ok bad
	ok=$(grep -Ec '(\.\.\. ok|^ok [0-9]+ )' "$1" || true)
	bad=$(grep -Ec '(\.\.\. FAILED|^not ok [0-9]+ )' "$1" || true)
	[ "$2" -ne 0 ] && [ "$bad" -eq 0 ] && bad=1
	echo "$ok $bad"
}

# Count TAP assertions; a suite that failed without a "not ok" (a died
# script, a wrong plan) counts as one failure.  Prints "passed failed".
count_tap() {	# count_tap LOG RC
	local ok bad
	ok=$(grep -Ec '^ *ok [0-9]+' "$1" || true)
	bad=$(grep -Ec '^ *not ok [0-9]+' "$1" || true)
	[ "$2" -ne 0 ] && [ "$bad" -eq 0 ] && bad=1
	echo "$ok $bad"
}

# The suites.  Each runs in a subshell of its own with its output in LOG,
# and prints "passed failed" (from count_regress or count_tap) last on
# standard output.  Those that need a server start one (tb_start_server,
# which stops and removes it when the subshell exits).

# make installcheck's halves, pg_regress's and isolation's, each on a
# server of its own (they write their results to folders of their own)
suite_installcheck() {	# suite_installcheck LOG MAKE-ARGS...
	local log=$1 rc=0
	shift
	tb_start_server
	make -C "$TOP" -s PG_CONFIG="$PG_CONFIG" installcheck "$@" >"$log" 2>&1 || rc=$?
	if [ $rc -ne 0 ]; then
		cat "$TOP/regression.diffs" "$TOP/output_iso/regression.diffs" >>"$log" 2>/dev/null || true
	fi
	count_regress "$log" $rc
}
suite_pg_regress() { suite_installcheck "$1" ISOLATION=; }
suite_isolation() { suite_installcheck "$1" REGRESS=; }

# pgTAP, against a server of its own (make installcheck-pgtap)
suite_pgtap() {
	local rc=0
	tb_start_server
	make -C "$TOP" -s PG_CONFIG="$PG_CONFIG" installcheck-pgtap PG_PROVE_ARGS=-v \
		>"$1" 2>&1 || rc=$?
	count_tap "$1" $rc
}

# one file of test/t: make prove_installcheck on it.  PostgreSQL::Test::
# Cluster makes its own clusters, so it runs as the server's user when we
# are root (initdb refuses root).
suite_tap() {	# suite_tap LOG FILE
	local rc=0 dir runas=()
	dir=$(mktemp -d /tmp/tokenbucket-tap.XXXXXX)
	chmod 755 "$dir"
	if [ "$(id -u)" -eq 0 ]; then
		chown postgres: "$dir"
		runas=(runuser -u postgres --)
	fi
	"${runas[@]}" make -C "$TOP" -s PG_CONFIG="$PG_CONFIG" prove_installcheck \
		TAP_DIR="$dir" PROVE_TESTS="$2" PROVE_FLAGS=-v >"$1.raw" 2>&1 || rc=$?
	grep -v '^# \(WARNING\|pgbench\)' "$1.raw" >"$1" || true
	rm -rf "$dir" "$1.raw"
	count_tap "$1" $rc
}

# a shell suite printing TAP, on a server of its own
suite_shell() {	# suite_shell LOG SCRIPT [ARG]
	local log=$1 rc=0
	shift
	tb_start_server
	bash "$TOP/$1.sh" "${@:2}" >"$log" 2>&1 || rc=$?
	count_tap "$log" $rc
}

# test/model.sh: a shell suite on a server whose clock the tests move
suite_model() {	# suite_model LOG [N]
	TB_SERVER_CONF="${TB_SERVER_CONF:-}
tokenbucket.test_clock = on" suite_shell "$1" test/model "${@:2}"
}

# a shell suite printing TAP that starts its own servers
suite_own() {	# suite_own LOG SCRIPT [ARG]
	local log=$1 rc=0
	shift
	bash "$TOP/$1.sh" "${@:2}" >"$log" 2>&1 || rc=$?
	count_tap "$log" $rc
}

# NAME FUNCTION [ARGS...], longest first (on this machine), so that the
# long ones start at once and the short ones fill in beside them
SUITES=(
	"python suite_shell clients/python/test"
	"memory suite_shell test/memory 1"
	"memory-more suite_shell test/memory 2 3 4 5 6"
	"stress suite_shell test/stress"
	"leases suite_shell test/leases table"
	"leases-memory suite_shell test/leases memory"
	"move suite_own proxy/test/move"
	"examples/celery suite_own test/examples celery"
	"examples/clients suite_own test/examples clients"
	"proxy suite_own proxy/test/proxy"
	"examples/asyncio suite_own test/examples asyncio"
	"pg_regress suite_pg_regress"
	"examples/gateway suite_own test/examples gateway"
	"hung suite_own proxy/test/hung"
	"errors suite_own proxy/test/errors"
	"setup suite_own proxy/test/setup"
	"partitions suite_own proxy/test/partitions"
	"wait suite_shell test/wait"
	"alerts suite_shell test/alerts"
	"locks suite_shell test/locks"
	"held suite_shell test/held"
	"hierarchy suite_shell test/hierarchy"
	"model suite_model"
	"xact suite_shell test/xact"
	"stats suite_own proxy/test/stats"
	"exporter suite_shell test/exporter"
	"isolation suite_isolation"
	"pgtap suite_pgtap"
	"pgxn suite_own test/pgxn"
	"docs suite_shell test/doctest"
)
for t in "$TOP"/test/t/*.pl; do
	SUITES+=("tap/$(basename "$t" .pl) suite_tap test/t/$(basename "$t")")
done

# selected NAME: not left out by TB_SKIP (the name, or its part before
# the slash), and in TB_ONLY when that is set
selected() {
	case " ${TB_SKIP:-} " in *" $1 "* | *" ${1%%/*} "*) return 1 ;; esac
	[ -z "${TB_ONLY:-}" ] && return 0
	case " $TB_ONLY " in *" $1 "* | *" ${1%%/*} "*) return 0 ;; esac
	return 1
}

# start NAME FUNCTION ARGS...: the suite in the background; its output in
# $OUT/NAME.log, and "passed failed seconds" in $OUT/NAME.result
start() {
	local name=$1 file
	shift
	file=$OUT/${name//\//_}
	(
		set +e
		begin=$(date +%s.%N)
		counts=$("$1" "$file.log" "${@:2}" | tail -n 1)
		[[ $counts =~ ^[0-9]+\ [0-9]+$ ]] || counts="0 1"
		end=$(date +%s.%N)
		echo "$counts $(awk -v b="$begin" -v e="$end" 'BEGIN { printf "%.0f", e - b }')" >"$file.result"
		read -r p f s <"$file.result"
		printf '.. %-18s %4s passed, %s failed, %s s\n' "$name" "$p" "$f" "$s"
	) &
}

JOBS=${TB_JOBS:-4}
BEGIN=$(date +%s)

if [ -n "${SANITIZE:-}" ]; then
	# one server with the sanitizers' runtimes preloaded, the suites one
	# after the other; the TAP tests and the examples start servers of
	# their own, without them, and do not run
	tb_start_server
	trap 'rm -rf "$OUT"; tb_cleanup' EXIT
	SUITES=("pg_regress suite_pg_regress" "isolation suite_isolation" "pgtap suite_pgtap"
		"stress suite_shell test/stress")
	tb_start_server() { :; }	# the suites share the sanitized server
	export STRESS_SECONDS=${STRESS_SECONDS:-5}
	JOBS=1
fi

say "running the suites, $JOBS at a time"
NAMES=()
for entry in "${SUITES[@]}"; do
	read -r -a words <<<"$entry"
	selected "${words[0]}" || continue
	NAMES+=("${words[0]}")
	while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do
		wait -n || true
	done
	start "${words[@]}"
done
wait

passed=0
failed=0
TABLE=()
for name in "${NAMES[@]}"; do
	file=$OUT/${name//\//_}
	p=0 f=1 s=?
	[ -f "$file.result" ] && read -r p f s <"$file.result"
	say "$name ($s s)"
	cat "$file.log" 2>/dev/null || echo "(no output)"
	passed=$((passed + p))
	failed=$((failed + f))
	TABLE+=("$(printf '%-20s %8s %7s %7s' "$name" "$s" "$p" "$f")")
done

if [ -n "${SANITIZE:-}" ]; then
	say "sanitizers"
	# the mode proves nothing unless the backends really ran the
	# instrumented library with both runtimes loaded
	maps=$(psql -X -A -t -c "LOAD 'tokenbucket'" -c "SELECT pg_read_file('/proc/self/maps')")
	symbols=$(nm -D "$($PG_CONFIG --pkglibdir)/tokenbucket.so")
	if grep -q libasan <<<"$maps" && grep -q libubsan <<<"$maps" &&
		grep -q __asan_report_load8 <<<"$symbols" && grep -q __ubsan_handle <<<"$symbols"; then
		echo "ok - backends run tokenbucket.so built with both sanitizers, their runtimes loaded"
		passed=$((passed + 1))
	else
		echo "not ok - the backends do not run the sanitized build"
		failed=$((failed + 1))
	fi
	# reports go to the files named by log_path, or to the server's log
	if [ -z "$(ls -A "$TB_TMP/sanitizer")" ] &&
		! grep -q 'runtime error\|Sanitizer' "$TB_TMP/server.log"; then
		echo "ok - no AddressSanitizer or UndefinedBehaviorSanitizer report"
		passed=$((passed + 1))
	else
		echo "not ok - sanitizer reports:"
		cat "$TB_TMP"/sanitizer/* 2>/dev/null | head -n 60
		grep -A 20 'runtime error\|Sanitizer' "$TB_TMP/server.log" | head -n 60
		failed=$((failed + 1))
	fi
fi

echo
printf '%-20s %8s %7s %7s\n' suite seconds passed failed
printf '%s\n' "${TABLE[@]}"
echo "all suites: $(($(date +%s) - BEGIN)) s, $JOBS at a time, on $(nproc) cores"
echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
