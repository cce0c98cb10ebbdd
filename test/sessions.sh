# test/sessions.sh: sessions kept open across a shell suite's steps, for
# the suites that kill, terminate and interleave them (test/leases.sh,
# test/xact.sh).  Sourced after test/checks.sh, with WORK (a folder of the
# suite's own, whose exit trap closes ${FDS} and kills $WORK/*.pid) and DB
# set.
#
#   session NAME      a psql kept open on the fifo $WORK/NAME.in, its output
#                     in $WORK/NAME.out, its pid in $WORK/NAME.pid
#   say NAME SQL      send SQL to session NAME
#   until_true SQL    wait (at most 30 s) until the SQL condition is true

# session NAME: a psql kept open on the fifo $WORK/NAME.in, written to
# with `say NAME SQL`; its pid in $WORK/NAME.pid
FDS=""
session() {
	mkfifo "$WORK/$1.in"
	PGAPPNAME=$1 psql -X -A -t -q -d "$DB" <"$WORK/$1.in" >"$WORK/$1.out" 2>&1 &
	echo $! >"$WORK/$1.pid"
	disown	# no "Killed" message from bash for the ones the tests kill
	local fd
	exec {fd}>"$WORK/$1.in"
	eval "FD_$1=$fd"
	FDS="$FDS $fd"
}
say() {
	local fd
	eval "fd=\$FD_$1"
	echo "$2" >&"$fd"
}
# until SQL: wait (at most 30 s) until the SQL condition is true
until_true() {
	for _ in $(seq 300); do
		[ "$(q -c "SELECT ($1)::text")" = true ] && return 0
		sleep 0.1
	done
	echo "# timed out waiting for: $1"
	return 1
}
