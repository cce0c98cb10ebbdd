#!/usr/bin/env bash
# test/versions/dump.sh: moving across major versions with pg_dump, run by
# scripts/versions.sh against the installed package of each version.
#
#   dump.sh make DIR      on the oldest version: a database with table
#                         buckets (one drained, one in debt), a template
#                         and a key made from it, a paused bucket, a bucket
#                         paused for ever and memory buckets; pg_dump -Fc
#                         into DIR/buckets.dump, and the exact rows into
#                         DIR/rows.txt
#   dump.sh restore DIR   on a newer version: pg_restore refuses nothing,
#                         every row comes back exactly, and the buckets
#                         decide as they did
#
# Prints TAP lines.  Memory buckets' levels live in shared memory and are
# not part of a dump: their configuration is, and they restart full.

source "$(dirname "$0")/../../scripts/common.sh"
MODE=$1
DIR=$2
tb_start_server

n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; echo "# $2"; }
check() { # check DESCRIPTION EXPECTED ACTUAL
	if [ "$2" = "$3" ]; then ok "$1"; else not_ok "$1" "expected '$2', got '$3'"; fi
}
q() { psql -X -A -t -v ON_ERROR_STOP=1 -d "${DB:-postgres}" -c "$1"; }

ROWS="SELECT name, capacity, refill_rate, deficit, updated_at, paused_until, template, memory
        FROM tb_buckets ORDER BY name"
VERSION=$(q "SHOW server_version_num")

case $MODE in
make)
	q "CREATE EXTENSION tokenbucket" >/dev/null
	q "SELECT tb_create('full', 5, 1, '1 hour'),
	          tb_create('drained', 4, 1, '1 hour'),
	          tb_create('tpm', 100, 1, '1 hour'),
	          tb_create('user:*', 3, 1, '1 hour'),
	          tb_create('paused', 10, 1, '1 hour'),
	          tb_create('forever', 1, 1),
	          tb_create('mem', 10, 1, '1 second', memory => true),
	          tb_create('mem:*', 2, 1, '1 hour', memory => true)" >/dev/null
	q "SELECT tb_acquire('drained', 4), tb_settle('tpm', 0, 150), tb_acquire('user:7', 2),
	          tb_pause('paused', interval '1 hour'), tb_pause_until('forever', 'infinity'),
	          tb_acquire('mem', 3), tb_acquire('mem:1')" >/dev/null
	rc=0
	pg_dump -Fc -d postgres -f "$DIR/buckets.dump" || rc=$?
	check "pg_dump on $VERSION" 0 "$rc"
	q "$ROWS" >"$DIR/rows.txt"
	check "$(wc -l <"$DIR/rows.txt") rows kept to compare" 9 "$(wc -l <"$DIR/rows.txt")"
	;;
restore)
	q "CREATE DATABASE restored" >/dev/null
	rc=0
	pg_restore --exit-on-error -d restored "$DIR/buckets.dump" >"$TB_TMP/restore.log" 2>&1 || rc=$?
	check "pg_restore of the dump into $VERSION refuses nothing" "0 " "$rc $(cat "$TB_TMP/restore.log")"
	DB=restored
	check "every bucket comes back exactly (state, pauses, templates, memory flags)" \
		"$(cat "$DIR/rows.txt")" "$(q "$ROWS")"
	check "and decides as before: drained, paused, in debt, paused for ever refuse" \
		"f f f f" "$(q "SELECT concat_ws(' ', tb_acquire('drained'), tb_acquire('paused'),
		                                   tb_acquire('tpm', 0), tb_acquire('forever'))")"
	check "full and a key from the template grant; the template's key kept its level" \
		"t t t f" "$(q "SELECT concat_ws(' ', tb_acquire('full', 5), tb_acquire('user:8', 3),
		                                   tb_acquire('user:7'), tb_acquire('user:7'))")"
	check "memory buckets restart full, under their restored configuration" \
		"t f t t f" "$(q "SELECT concat_ws(' ', tb_acquire('mem', 10), tb_acquire('mem'),
		                          tb_acquire('mem:1'), tb_acquire('mem:1'), tb_acquire('mem:1'))")"
	check "the restored extension is this package's version" \
		"$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$TOP/tokenbucket.control")" \
		"$(q "SELECT extversion FROM pg_extension WHERE extname = 'tokenbucket'")"
	;;
*)
	echo "usage: $0 make|restore DIR" >&2
	exit 2
	;;
esac
