#!/usr/bin/env bash
# test/run.sh: `make test`.  Sets up a fresh Debian 12 machine (as root),
# builds and installs the extension, starts a throwaway PostgreSQL, runs
# every suite, stops the server, and prints "N passed, N failed" last.
#
#   pg_regress    sql/*.sql against expected/*.out
#   isolation     test/isolation/specs/*.spec (pg_isolation_regress)
#   pgTAP         test/pgtap/*.sql, run by pg_prove
#   TAP           test/t/*.pl (PostgreSQL::Test::Cluster): crash, replica,
#                 upgrade and dump, memory buckets and counters across
#                 restarts, leases across a crash
#   stress        test/stress.sh: 64 sessions on a mix of buckets, never overdrawn
#   wait          test/wait.sh: waiting on the real clock
#   leases        test/leases.sh: in-flight limits with sessions killed,
#                 terminated and failing; waits; 64 sessions on 3 slots
#   locks         test/locks.sh: timeouts whatever holds a row; sleepers
#                 never hold up a DBA's ALTER TABLE
#   memory        test/memory.sh: memory flat over many calls; valgrind
#   exporter      test/exporter.sh: prometheus-postgres-exporter with
#                 prometheus/tokenbucket.yaml, scraped over HTTP, exact
#   proxy         proxy/test/proxy.sh: tokenbucket_proxy in front of three servers
#                 holding four partitions, one of them stopped midway
#   partitions    proxy/test/partitions.sh: the proxy on every partition
#                 naming and mapping PL/Proxy accepts
#   stats         proxy/test/stats.sh: counters summed over the shards
#   errors        proxy/test/errors.sh: a shard's errors through the proxy, as
#                 raised directly, on a connection kept; a fresh install
#                 the same as each earlier version updated
#   hung          proxy/test/hung.sh: a shard that does not answer, stopped
#                 or restarted: class 08 within the bound the DBA sets
#   setup         proxy/test/setup.sh: README.md's proxy set-up, as written,
#                 with scram logins and least-privileged roles
#   move          proxy/test/move.sh: four partitions on one server moved,
#                 three of them, to two others under load: fenced calls
#                 fail with class 08, no window overdrawn, each bucket once
#   examples      test/examples.sh: examples/ in a short mode, each with its
#                 own servers (PostgreSQL, the stand-in provider, RabbitMQ)
#
# TB_SKIP="suite ..." leaves out the named shell suites (make test-versions
# leaves out "examples": the clients and their servers do not change with
# the server's version).
#
# SANITIZE=1 builds with AddressSanitizer and UndefinedBehaviorSanitizer,
# runs pg_regress, isolation, pgTAP and a short stress run against it, and
# fails on any sanitizer report.

source "$(dirname "$0")/../scripts/common.sh"

tb_install_packages "postgresql-$PGVERSION-pgtap" libtap-parser-sourcehandler-pgtap-perl \
	libipc-run-perl valgrind prometheus-postgres-exporter curl "postgresql-$PGVERSION-plproxy"
tb_build_install
say "starting a throwaway PostgreSQL $PGVERSION"
tb_start_server

passed=0
failed=0
LOG=$TB_TMP/test.log

# Count "ok"/"FAILED" lines of pg_regress and pg_isolation_regress (the
# PostgreSQL 15 format, and the TAP format of 16 and later).
count_regress() {
	local ok bad
	ok=$(grep -Ec '(\.\.\. ok|^ok [0-9]+ )' "$1" || true)
	bad=$(grep -Ec '(\.\.\. FAILED|^not ok [0-9]+ )' "$1" || true)
	passed=$((passed + ok))
	failed=$((failed + bad))
}

# Count TAP assertions; a suite that failed without a "not ok" (a died
# script, a wrong plan) counts as one failure.
count_tap() {
	local ok bad
	ok=$(grep -Ec '^ *ok [0-9]+' "$1" || true)
	bad=$(grep -Ec '^ *not ok [0-9]+' "$1" || true)
	[ "$2" -ne 0 ] && [ "$bad" -eq 0 ] && bad=1
	passed=$((passed + ok))
	failed=$((failed + bad))
}

# run_regress SUITE MAKE-ARGS...: one of PGXS's installcheck halves
run_regress() {
	local suite=$1 rc=0
	shift
	say "$suite"
	make -C "$TOP" -s PG_CONFIG="$PG_CONFIG" installcheck "$@" >"$LOG" 2>&1 || rc=$?
	cat "$LOG"
	count_regress "$LOG"
	if [ $rc -ne 0 ]; then
		cat "$TOP/regression.diffs" "$TOP/output_iso/regression.diffs" 2>/dev/null || true
		grep -Eq 'FAILED|not ok' "$LOG" || failed=$((failed + 1))
	fi
}
run_regress "pg_regress" ISOLATION=
run_regress "isolation" REGRESS=

say "pgTAP (pg_prove)"
psql -q -X -v ON_ERROR_STOP=1 -c 'CREATE DATABASE tb_tap' \
	-c '\c tb_tap' -c 'CREATE EXTENSION pgtap' -c 'CREATE EXTENSION tokenbucket'
rc=0
pg_prove -v -d tb_tap "$TOP"/test/pgtap/*.sql >"$LOG" 2>&1 || rc=$?
cat "$LOG"
count_tap "$LOG" $rc

if [ -n "${SANITIZE:-}" ]; then
	# the TAP tests and the examples start servers of their own, without the
	# sanitizers' runtime; the rest runs against the sanitized build
	STRESS_SECONDS=${STRESS_SECONDS:-5} bash "$TOP/test/stress.sh" >"$LOG" 2>&1 || true
	cat "$LOG"
	count_tap "$LOG" 0
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
	echo
	echo "$passed passed, $failed failed"
	[ "$failed" -eq 0 ]
	exit
fi

# TAP tests with PostgreSQL::Test::Cluster make their own clusters, so they
# run as the server's user when we are root (initdb refuses root)
say "TAP (PostgreSQL::Test::Cluster)"
TAPDIR=$TB_TMP/tap
mkdir -p "$TAPDIR"
[ ${#TB_RUNAS[@]} -gt 0 ] && chown postgres: "$TAPDIR"
rc=0
"${TB_RUNAS[@]}" env PATH="$PGBIN:$PATH" TESTDIR="$TAPDIR" \
	TESTDATADIR="$TAPDIR/tmp_check" TESTLOGDIR="$TAPDIR/log" \
	PERL5LIB="$($PG_CONFIG --pgxs | sed 's|/src/makefiles/pgxs.mk|/src/test/perl|')" \
	PG_REGRESS="$(dirname "$($PG_CONFIG --pgxs)")/../test/regress/pg_regress" \
	prove -v "$TOP"/test/t/*.pl >"$LOG" 2>&1 || rc=$?
grep -v '^# \(WARNING\|pgbench\)' "$LOG"
count_tap "$LOG" $rc

# SCRIPT or SCRIPT:ARGUMENT
for entry in test/stress test/wait test/leases test/leases:memory test/locks test/memory \
	test/exporter proxy/test/proxy proxy/test/partitions proxy/test/stats proxy/test/errors \
	proxy/test/hung proxy/test/setup proxy/test/move test/examples; do
	script=${entry%%:*}
	arg=${entry#"$script"}
	arg=${arg#:}
	case " ${TB_SKIP:-} " in *" ${script##*/} "*) continue ;; esac
	say "${script##*/} ($script.sh${arg:+ $arg})"
	rc=0
	bash "$TOP/$script.sh" $arg >"$LOG" 2>&1 || rc=$?
	cat "$LOG"
	count_tap "$LOG" $rc
done

echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
