#!/usr/bin/env bash
# bench/instructions.sh BASE [OTHER]: `make bench-instructions BASE=...
# [OTHER=...]`.  What one call costs in instructions, counted by valgrind's
# callgrind (repeatable whatever else the machine is doing, unlike a rate):
# a single-user backend runs a prepared statement 200 times, then 1,200
# times, and the difference / 1,000 is one call.  For SELECT 1, a named
# memory bucket, a memory template's key (the same one, a random one of
# 1,000, and a new one each call), and a table bucket, on two
# revisions (OTHER defaults to the working tree).  Then the last-level
# cache misses of a call on a random one of 1,000,000 keys, by callgrind's
# cache model (a 4 MB last-level cache, a busy machine's share of one):
# what a change to the memory store's layout or lookup moves, which a rate
# on a shared machine cannot show.  Not a test.

source "$(dirname "$0")/../scripts/common.sh"

BASE=${1:?usage: bench/instructions.sh BASE [OTHER]}
OTHER=${2:-}

tb_install_packages valgrind
tb_build_install
WORK=$(mktemp -d /tmp/tokenbucket-instructions.XXXXXX)
chmod 755 "$WORK"
RUNAS=()
if [ "$(id -u)" -eq 0 ]; then
	chown postgres: "$WORK"
	RUNAS=(runuser -u postgres --)
fi
LIBDIR=$($PG_CONFIG --pkglibdir)
# the working tree's library goes back in place at the end
trap 'rc=$?; tb_remove_trees; make -C "$TOP" -s PG_CONFIG="$PG_CONFIG" install >/dev/null
	rm -rf "$WORK"; exit $rc' EXIT
tb_build_revision "$WORK" base "$BASE"
tb_build_revision "$WORK" other "$OTHER"

use() {	# a new file renamed over the old: a mapped library is never written to
	cp "$WORK/$1.so" "$LIBDIR/tokenbucket.so.new"
	mv -f "$LIBDIR/tokenbucket.so.new" "$LIBDIR/tokenbucket.so"
}

single() {	# [DATADIR]: statements on stdin, to a single-user backend of $WORK/data
	"${RUNAS[@]}" "$PGBIN/postgres" --single -D "${1:-$WORK/data}" postgres >/dev/null 2>&1
}

datadir() {	# DATADIR: a new data directory preloading the library; settings on stdin
	"${RUNAS[@]}" "$PGBIN/initdb" -D "$1" -A trust --no-sync >/dev/null
	{ echo "shared_preload_libraries = 'tokenbucket'"; cat; } >>"$1/postgresql.conf"
}

executes() {	# STATEMENT COUNT: prepare STATEMENT, then execute it COUNT times
	echo "PREPARE p AS $1;"
	for ((i = 0; i < $2; i++)); do echo "EXECUTE p;"; done
}

say "a data directory with a named memory bucket, a memory template's key and a table bucket"
datadir "$WORK/data" </dev/null
use other
single <<'SQL'
CREATE EXTENSION tokenbucket;
SELECT tb_create('m', 1e9, 1e9, memory => true), tb_create('u:*', 1e9, 1e9, memory => true), tb_create('t', 1e9, 1e9);
SELECT count(tb_acquire('u:' || i)) FROM generate_series(1, 1000) AS i;
SQL

instructions() {	# STATEMENT COUNT: callgrind's total for the whole backend
	{
		# the new keys' template made again: each run starts with none
		echo "SELECT tb_drop('n:*'), tb_create('n:*', 1e9, 1e9, memory => true);"
		executes "$1" "$2"
	} >"$WORK/in.sql"
	"${RUNAS[@]}" valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.out" \
		"$PGBIN/postgres" --single -D "$WORK/data" postgres <"$WORK/in.sql" >/dev/null 2>&1
	sed -n 's/^summary: //p' "$WORK/cg.out"
	rm -f "$WORK/cg.out"
}

# a random one of the template's 1,000 keys: each call a bucket other than
# the last (the random number costs both revisions alike)
RANDOM_KEY="(1 + floor(random() * 1000))::int"
# a new key of a memory template each call (its first call makes it)
NEW_KEY="(random() * 1e15)::bigint"
printf '\n%-58s %12s %12s %8s\n' "instructions per call" base other ratio
for stmt in "SELECT 1" "SELECT tb_acquire('m')" "SELECT tb_acquire('u:1')" \
	"SELECT tb_acquire('u:' || $RANDOM_KEY)" "SELECT tb_acquire('n:' || $NEW_KEY)" \
	"SELECT tb_acquire('t')"; do
	declare -A per=()
	for build in base other; do
		use "$build"
		a=$(instructions "$stmt" 200)
		b=$(instructions "$stmt" 1200)
		per[$build]=$(((b - a) / 1000))
	done
	awk -v s="$stmt" -v a="${per[base]}" -v b="${per[other]}" \
		'BEGIN { printf "%-58s %12d %12d %8.3f\n", s, a, b, b / a }'
done

# Cache misses: each revision makes its million keys natively in a data
# directory of its own (saved at shutdown, loaded at each start); callgrind
# counts from a file the backend writes once they are loaded to one it
# writes after the calls (callgrind_control switches counting on, then
# dumps), for 200 and then 1,200 calls.
MISS_KEYS=1000000
misses() {	# DATADIR COUNT: last-level misses (reads and writes) of COUNT calls
	{
		echo "COPY (SELECT 1) TO '$WORK/ready';"
		echo "SELECT pg_sleep(3);"
		executes "SELECT tb_acquire('k:' || (1 + floor(random() * $MISS_KEYS))::int)" "$2"
		echo "COPY (SELECT 1) TO '$WORK/done';"
		echo "SELECT pg_sleep(3);"
	} >"$WORK/in.sql"
	rm -f "$WORK/ready" "$WORK/done" "$WORK"/cg.out*
	"${RUNAS[@]}" valgrind --tool=callgrind --cache-sim=yes --LL=4194304,16,64 --instr-atstart=no \
		--callgrind-out-file="$WORK/cg.out" "$PGBIN/postgres" --single -D "$1" postgres \
		<"$WORK/in.sql" >/dev/null 2>&1 &
	local pid=$! backend
	while [ ! -e "$WORK/ready" ] && kill -0 $pid 2>/dev/null; do sleep 0.2; done
	backend=$(pgrep -f -- "callgrind-out-file=$WORK/cg.out" | tail -1)
	"${RUNAS[@]}" callgrind_control -i on "$backend" >/dev/null 2>&1
	while [ ! -e "$WORK/done" ] && kill -0 $pid 2>/dev/null; do sleep 0.2; done
	"${RUNAS[@]}" callgrind_control -d "$backend" >/dev/null 2>&1
	wait $pid
	# events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
	awk '$1 == "summary:" { print $8 + $9 + $10 }' "$WORK/cg.out.1"
}
declare -A missed=()
for build in base other; do
	say "$build: $MISS_KEYS keys of a memory template, made natively"
	datadir "$WORK/big-$build" <<'CONF'
tokenbucket.max_memory_buckets = 1200000
tokenbucket.max_template_keys = 1050000
CONF
	use "$build"
	single "$WORK/big-$build" <<SQL
CREATE EXTENSION tokenbucket;
SELECT tb_create('k:*', 1e9, 1e9, memory => true);
SELECT count(tb_acquire('k:' || i)) FROM generate_series(1, $MISS_KEYS) AS i;
SQL
	a=$(misses "$WORK/big-$build" 200)
	b=$(misses "$WORK/big-$build" 1200)
	missed[$build]=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", (b - a) / 1000 }')
done
printf '\n%-58s %12s %12s %8s\n' "last-level cache misses per call (4 MB cache)" base other ratio
awk -v a="${missed[base]}" -v b="${missed[other]}" -v s="SELECT tb_acquire('k:' || <random of $MISS_KEYS>)" \
	'BEGIN { printf "%-58s %12.2f %12.2f %8.3f\n", s, a, b, b / a }'
