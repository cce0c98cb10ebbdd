#!/usr/bin/env bash
# bench/instructions.sh BASE [OTHER]: `make bench-instructions BASE=...
# [OTHER=...]`.  What one call costs in instructions, counted by valgrind's
# callgrind (repeatable whatever else the machine is doing, unlike a rate):
# a single-user backend runs a prepared statement 200 times, then 1,200
# times, and the difference / 1,000 is one call (bench/callgrind.sh).  For
# SELECT 1, a named memory bucket, a memory template's key (the same one,
# a random one of 1,000, and a new one each call), and a table bucket;
# then the table bucket's ceilings: SELECT 1 and a plain UPDATE ...
# RETURNING of a random one of 10,000 rows, beside a grant on a random one
# of 10,000 table buckets and a denial on a random one of 10,000 drained
# ones, each statement given the random key as an argument; on two
# revisions (OTHER defaults to the working tree), each in a data
# directory of its own, made by its own library and SQL.  Then the
# last-level cache misses of a call on a random one of 1,000,000 keys, by
# callgrind's cache model (a 4 MB last-level cache, a busy machine's share
# of one): what a change to the memory store's layout or lookup moves,
# which a rate on a shared machine cannot show.  Not a test.

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
source "$TOP/bench/callgrind.sh"
CG_WORK=$WORK
CG_RUNAS=("${RUNAS[@]}")

use() {	# a new file renamed over the old: a mapped library is never written to
	cp "$WORK/$1.so" "$LIBDIR/tokenbucket.so.new"
	mv -f "$LIBDIR/tokenbucket.so.new" "$LIBDIR/tokenbucket.so"
}

tree() {	# BUILD: the work tree a build was made in
	if [ "$1" = base ] || [ -n "$OTHER" ]; then echo "$WORK/$1"; else echo "$TOP"; fi
}

for build in base other; do
	say "$build: a data directory of its own, with a named memory bucket, a memory template's keys and table buckets"
	# its library and its SQL: the objects CREATE EXTENSION makes are its own
	make -C "$(tree $build)" -s PG_CONFIG="$PG_CONFIG" install >/dev/null
	cg_datadir "$WORK/data-$build" </dev/null
	cg_single "$WORK/data-$build" <<SQL
CREATE EXTENSION tokenbucket;
SELECT tb_create('m', 1e9, 1e9, memory => true), tb_create('u:*', 1e9, 1e9, memory => true), tb_create('t', 1e9, 1e9);
SELECT count(tb_acquire('u:' || i)) FROM generate_series(1, 1000) AS i;
$CG_TABLES
SQL
done

# a random one of the template's 1,000 keys: each call a bucket other than
# the last (the random number costs both revisions alike)
RANDOM_KEY="(1 + floor(random() * 1000))::int"
# a new key of a memory template each call (its first call makes it)
NEW_KEY="(random() * 1e15)::bigint"
# the new keys' template made again: each run starts with none
NEW_TEMPLATE="SELECT tb_drop('n:*'), tb_create('n:*', 1e9, 1e9, memory => true);"
declare -A per=()
row() {	# KEY NAME STATEMENT [keyed]: a row of the table, its counts in per[BUILD,KEY]
	local build
	for build in base other; do
		use "$build"
		per[$build,$1]=$(cg_per_call "$WORK/data-$build" "$3" "$NEW_TEMPLATE" "${4:-}")
	done
	awk -v s="$2" -v a="${per[base,$1]}" -v b="${per[other,$1]}" \
		'BEGIN { printf "%-58s %12d %12d %8.3f\n", s, a, b, b / a }'
}
printf '\n%-58s %12s %12s %8s\n' "instructions per call" base other ratio
i=0
for stmt in "SELECT 1" "SELECT tb_acquire('m')" "SELECT tb_acquire('u:1')" \
	"SELECT tb_acquire('u:' || $RANDOM_KEY)" "SELECT tb_acquire('n:' || $NEW_KEY)" \
	"SELECT tb_acquire('t')"; do
	row $((i++)) "$stmt" "$stmt"
done
printf '\n%-58s %12s %12s %8s\n' "the table bucket's ceilings, a random key of 10,000 as \$1" base other ratio
row select1 "SELECT 1 (given the key, unused)" "$CG_SELECT1" keyed
row denial "denial: SELECT tb_acquire('d' || \$1), drained" "$CG_DENIAL" keyed
row update "plain UPDATE ... RETURNING (alternative B)" "$CG_UPDATE" keyed
row grant "grant: SELECT tb_acquire('k' || \$1)" "$CG_GRANT" keyed
for build in base other; do
	awk -v b="$build" -v d="${per[$build,denial]}" -v s="${per[$build,select1]}" \
		-v g="${per[$build,grant]}" -v u="${per[$build,update]}" \
		'BEGIN { printf "%-5s: a denial %.2fx SELECT 1'"'"'s instructions, a grant %.2fx the plain UPDATE'"'"'s\n", b, d / s, g / u }'
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
		cg_executes "SELECT tb_acquire('k:' || (1 + floor(random() * $MISS_KEYS))::int)" "$2"
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
	make -C "$(tree $build)" -s PG_CONFIG="$PG_CONFIG" install >/dev/null
	cg_datadir "$WORK/big-$build" <<'CONF'
tokenbucket.max_memory_buckets = 1200000
tokenbucket.max_template_keys = 1050000
CONF
	cg_single "$WORK/big-$build" <<SQL
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
