# test/checks.sh: what the shell suites that print TAP share.  Sourced, not
# run; the suite sets DB first.
#
#   q ARGS...                  psql on $DB: unaligned, tuples only, quiet,
#                              stopping at the first error
#   check DESCRIPTION COND     one TAP line: ok when COND (SQL) is true there

q() { psql -X -A -t -q -v ON_ERROR_STOP=1 -d "$DB" "$@"; }

n=0
check() {
	n=$((n + 1))
	if [ "$(q -c "SELECT ($2)::text")" = true ]; then
		echo "ok $n - $1"
	else
		echo "not ok $n - $1"
		echo "#   failed: $2"
	fi
}
