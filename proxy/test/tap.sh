# proxy/test/tap.sh: what every test of proxy/test begins with.  Sourced (after
# setting TOP), not run.
#
#   $W             a folder of the test's own, removed at exit (kept with KEEP=1)
#   ok TEXT        print the next TAP "ok" line
#   not_ok TEXT [LINE...]  print the next "not ok" line, and each LINE as a
#                  diagnostic
#   P [PSQL ARGS]  psql as the superuser, to database tb of server "proxy"
#   px_test_stopped  stop every server; "ok" if nothing of the test is left
#                  running (the last check of each test)
#   px_on_exit     the test's own clean-up, if it defines one: run at exit,
#                  before the servers stop

source "$TOP/scripts/common.sh"
source "$TOP/proxy/test/cluster.sh"

W=$(mktemp -d)
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; shift; printf '#   %s\n' "$@"; }
P() { px_psql proxy tb "$@"; }

px_test_stopped() {
	px_cleanup
	if ! pgrep -f "$PX" >/dev/null; then
		ok "every server stopped, nothing left running"
	else
		not_ok "processes left" "$(pgrep -af "$PX")"
	fi
}

px_test_exit() {
	if declare -F px_on_exit >/dev/null; then px_on_exit; fi
	px_cleanup
	[ -n "${KEEP:-}" ] || rm -rf "$W"
}
trap px_test_exit EXIT
