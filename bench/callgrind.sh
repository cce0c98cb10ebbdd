# bench/callgrind.sh: what one call costs in instructions, counted by
# valgrind's callgrind in a single-user backend (repeatable whatever else
# the machine is doing, unlike a rate): a prepared statement run 200 times,
# then 1,200 times, the difference / 1,000 is one call.  Sourced by
# bench/instructions.sh and bench/table.sh (after scripts/common.sh), not
# run.  The caller sets CG_WORK (a folder the server's user may write) and
# CG_RUNAS (runuser -u postgres --, or nothing).

# The table bucket's ceilings: SELECT 1 and a plain UPDATE ... RETURNING of
# a random one of 10,000 rows of a table of its own (bench/run.sh's
# alternative B), beside a grant on a random one of 10,000 table buckets
# and a denial on a random one of 10,000 drained ones.  $1 is the key
# (cg_per_call ... keyed).
CG_SELECT1='SELECT 1'
CG_DENIAL="SELECT tb_acquire('d' || \$1)"
CG_GRANT="SELECT tb_acquire('k' || \$1)"
CG_UPDATE="UPDATE plain_buckets SET tokens = least(capacity, tokens + extract(epoch FROM statement_timestamp() - ts)::float8 * rate) - 1, ts = greatest(ts, statement_timestamp()) WHERE name = 'k' || \$1 AND least(capacity, tokens + extract(epoch FROM statement_timestamp() - ts)::float8 * rate) >= 1 RETURNING tokens"

# ...and the tables they use: 10,000 table buckets that never run dry
# ('k1'...), 10,000 that are empty and never refill in a run ('d1'...),
# and alternative B's table of 10,000 rows.  A statement a line, as a
# single-user backend reads them.
CG_TABLES="INSERT INTO tb_buckets (name, capacity, refill_rate) SELECT 'k' || i, 1e9, 1e9 FROM generate_series(1, 10000) AS i;
INSERT INTO tb_buckets (name, capacity, refill_rate, deficit) SELECT 'd' || i, 1, 1e-9, 1 FROM generate_series(1, 10000) AS i;
CREATE TABLE plain_buckets (name text PRIMARY KEY, capacity float8 NOT NULL, rate float8 NOT NULL, tokens float8 NOT NULL, ts timestamptz NOT NULL);
INSERT INTO plain_buckets SELECT name, capacity, refill_rate, capacity, clock_timestamp() FROM tb_buckets WHERE name LIKE 'k%';
VACUUM ANALYZE;"

cg_single() {	# DATADIR: statements on stdin, to a single-user backend
	"${CG_RUNAS[@]}" "$PGBIN/postgres" --single -D "$1" postgres >/dev/null 2>&1
}

cg_datadir() {	# DATADIR: a new data directory preloading the library; settings on stdin
	"${CG_RUNAS[@]}" "$PGBIN/initdb" -D "$1" -A trust --no-sync >/dev/null
	{ echo "shared_preload_libraries = 'tokenbucket'"; cat; } >>"$1/postgresql.conf"
}

cg_executes() {	# STATEMENT COUNT [keyed]: prepare STATEMENT, then execute it COUNT times
	local i
	if [ "${3:-}" = keyed ]; then
		# with a random key in 1..10000 as $1, chosen here (the same work for
		# every statement, SELECT 1 included, which does not use it)
		echo "PREPARE p(int) AS $1;"
		for ((i = 0; i < $2; i++)); do echo "EXECUTE p($((1 + RANDOM % 10000)));"; done
	else
		echo "PREPARE p AS $1;"
		for ((i = 0; i < $2; i++)); do echo "EXECUTE p;"; done
	fi
}

cg_total() {	# DATADIR STATEMENT COUNT FIRST [keyed]: callgrind's total for the whole backend
	{
		[ -z "$4" ] || echo "$4"
		cg_executes "$2" "$3" "${5:-}"
	} >"$CG_WORK/in.sql"
	"${CG_RUNAS[@]}" valgrind --tool=callgrind --callgrind-out-file="$CG_WORK/cg.out" \
		"$PGBIN/postgres" --single -D "$1" postgres <"$CG_WORK/in.sql" >/dev/null 2>&1
	sed -n 's/^summary: //p' "$CG_WORK/cg.out"
	rm -f "$CG_WORK/cg.out"
}

# DATADIR STATEMENT [FIRST [keyed]]: instructions of one call (FIRST: a
# statement run before the calls, "" for none)
cg_per_call() {
	local a b
	a=$(cg_total "$1" "$2" 200 "${3:-}" "${4:-}")
	b=$(cg_total "$1" "$2" 1200 "${3:-}" "${4:-}")
	echo $(((b - a) / 1000))
}
