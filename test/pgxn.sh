#!/usr/bin/env bash
# test/pgxn.sh: the distribution PGXN takes.  META.json valid against the
# PGXN Meta Spec 1.0.0 and naming the tree's versions and files
# (test/meta.py); `make dist` making tokenbucket-<version>.zip, whose own
# META.json is valid; Debian's pgxnclient installing that zip, offline,
# into a private copy of the PostgreSQL under test (other suites use that
# installation at the same time: a library replaced under them could be
# half written when a backend loads it); and a fresh server of that copy
# running CREATE EXTENSION tokenbucket and a tb_acquire.  Prints TAP.
#
# make dist archives HEAD.  So that the files under test are the ones
# archived, committed or not, and in trees that are no git checkout (make
# test-versions copies the files alone), the test commits the tree's files
# (tracked and new, not ignored) into a throwaway repository and runs make
# dist there.
set -euo pipefail
source "$(dirname "$0")/../scripts/common.sh"

W=$(mktemp -d /tmp/tokenbucket-pgxn.XXXXXX)
chmod 755 "$W"
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; shift; printf '#   %s\n' "$@"; }
finish() {
	local rc=$?
	if [ -n "${TB_TMP:-}" ] && [ -d "$TB_TMP" ]; then
		"${TB_RUNAS[@]}" "$PGBIN/pg_ctl" -D "$TB_TMP/data" -m immediate -s stop >/dev/null 2>&1 || true
		rm -rf "$TB_TMP"
	fi
	rm -rf "$W"
	exit $rc
}
trap finish EXIT

echo "1..5"
VERSION=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$TOP/tokenbucket.control").0

# 1. META.json against the spec and the tree
if out=$(/usr/bin/python3 "$TOP/test/meta.py" "$TOP/META.json" "$TOP" 2>&1); then
	ok "META.json is valid against the PGXN Meta Spec 1.0.0 and names this tree's versions ($VERSION) and files"
else
	not_ok "META.json" "$out"
fi

# 2. make dist, in a throwaway repository holding the tree's files
mkdir -p "$W/repo"
if git -C "$TOP" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	(cd "$TOP" && git ls-files -z --cached --others --exclude-standard)
else
	(cd "$TOP" && find . -path ./build -prune -o -type f ! -name '*.o' ! -name '*.so' ! -name '*.bc' -print0)
fi | (cd "$TOP" && xargs -0 cp --parents -t "$W/repo" 2>/dev/null || true)
(
	cd "$W/repo"
	git init -q
	git add -A
	git -c user.name=test -c user.email=test@localhost commit -q -m "the tree under test"
) >"$W/git.log" 2>&1
ZIP=$W/tokenbucket-$VERSION.zip
if make -C "$W/repo" -s dist DISTDIR="$W" >"$W/dist.log" 2>&1 && [ -f "$ZIP" ] &&
	/usr/bin/python3 - "$ZIP" "$VERSION" "$W/unzipped" >"$W/zip.log" 2>&1 <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
prefix = "tokenbucket-%s/" % sys.argv[2]
names = z.namelist()
assert all(n.startswith(prefix) for n in names), "a file outside " + prefix
for must in ("META.json", "Makefile", "tokenbucket.control", "LICENSE", "src/tokenbucket.c"):
    assert prefix + must in names, must + " is not in the archive"
z.extractall(sys.argv[3])
PY
then
	if out=$(/usr/bin/python3 "$TOP/test/meta.py" "$W/unzipped/tokenbucket-$VERSION/META.json" \
		"$W/unzipped/tokenbucket-$VERSION" 2>&1); then
		ok "make dist made tokenbucket-$VERSION.zip, every file under tokenbucket-$VERSION/, its META.json valid"
	else
		not_ok "the archive's META.json" "$out"
	fi
else
	not_ok "make dist" "$(cat "$W/git.log" "$W/dist.log" "$W/zip.log" 2>/dev/null | tail -n 20)"
fi

# 3. a private copy of the PostgreSQL under test (bin, lib, share; the
# headers by a link), with nothing of tokenbucket in it, and pgxn install
ROOT=${PGBIN%/usr/lib/postgresql/*}
MAJOR=$(basename "$(dirname "$PGBIN")")
COPY=$W/pg
mkdir -p "$COPY/usr/lib/postgresql" "$COPY/usr/share/postgresql" "$COPY/usr/include"
cp -a "$ROOT/usr/lib/postgresql/$MAJOR" "$COPY/usr/lib/postgresql/"
cp -a "$ROOT/usr/share/postgresql/$MAJOR" "$COPY/usr/share/postgresql/"
ln -s "$(readlink -f "$ROOT/usr/include/postgresql")" "$COPY/usr/include/postgresql"
rm -rf "$COPY/usr/lib/postgresql/$MAJOR/lib/tokenbucket.so" \
	"$COPY/usr/lib/postgresql/$MAJOR/lib/bitcode/tokenbucket"* \
	"$COPY/usr/share/postgresql/$MAJOR/extension/tokenbucket"*
COPY_CONFIG=$COPY/usr/lib/postgresql/$MAJOR/bin/pg_config
mkdir -p "$($COPY_CONFIG --libdir)" "$($COPY_CONFIG --docdir)"
# pgxnclient asks that pg_config's libdir be writable, and runs make there
# from a folder of its own
if (cd "$W" && pgxn install --pg_config "$COPY_CONFIG" --make make "./$(basename "$ZIP")") \
	>"$W/pgxn.log" 2>&1 &&
	[ -f "$($COPY_CONFIG --pkglibdir)/tokenbucket.so" ] &&
	[ -f "$($COPY_CONFIG --sharedir)/extension/tokenbucket--${VERSION%.0}.sql" ] &&
	[ -f "$($COPY_CONFIG --sharedir)/extension/tokenbucket_proxy.control" ]; then
	ok "pgxn install ./tokenbucket-$VERSION.zip built it and installed tokenbucket and tokenbucket_proxy into the copy ($($COPY_CONFIG --pkglibdir | sed "s|$W|...|"))"
else
	not_ok "pgxn install" "$(tail -n 20 "$W/pgxn.log")"
fi

# 4-5. a fresh server of the copy: the extension as PGXN installed it
PGBIN=$COPY/usr/lib/postgresql/$MAJOR/bin
chmod -R a+rX "$W"
tb_start_server
trap finish EXIT
lib=$(psql -X -A -t -c "SELECT setting FROM pg_config WHERE name = 'PKGLIBDIR'")
if [ "$lib" = "$($COPY_CONFIG --pkglibdir)" ]; then
	ok "a fresh server runs the copy's binaries and libraries"
else
	not_ok "the server's PKGLIBDIR" "$lib"
fi
out=$(psql -X -q -A -t -v ON_ERROR_STOP=1 -c "CREATE EXTENSION tokenbucket" \
	-c "SELECT extversion FROM pg_extension WHERE extname = 'tokenbucket'" \
	-c "SELECT tb_create('pgxn', 2, 1)" \
	-c "SELECT tb_acquire('pgxn'), tb_acquire('pgxn'), tb_acquire('pgxn')" \
	-c "SELECT tb_create('pgxn-memory', 1, 1, memory => true)" \
	-c "SELECT tb_acquire('pgxn-memory'), tb_acquire('pgxn-memory')" 2>&1) || true
if [ "$out" = "$(printf '%s\n' "${VERSION%.0}" "" "t|t|f" "" "t|f")" ]; then
	ok "CREATE EXTENSION tokenbucket (${VERSION%.0}); tb_acquire grants a table bucket's 2 tokens and not a third, a memory bucket's 1 and not a second"
else
	not_ok "CREATE EXTENSION and tb_acquire" "$out"
fi
