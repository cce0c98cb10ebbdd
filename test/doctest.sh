#!/usr/bin/env bash
# test/doctest.sh: the documentation's commands, run (the suite "docs").
# Every sql and sh block of README.md, docs/*.md, bench/README.md,
# CONTRIBUTING.md and the changelogs runs against the throwaway server
# test/run.sh started (PGHOST and the rest set), and a block followed by
# the output it shows is checked against it (test/doctest.py says how);
# blocks marked <!-- doctest: skip (why) --> are counted, not run.  Then
# the runner itself is fed broken documents, one fault each, and must fail
# every one of them and pass a sound one.  Prints TAP.
set -euo pipefail
TOP=$(cd "$(dirname "$0")/.." && pwd)
W=$(mktemp -d /tmp/tokenbucket-doctest.XXXXXX)
trap 'rm -rf "$W"' EXIT
cd "$TOP"

FILES=(README.md docs/*.md bench/README.md CONTRIBUTING.md CHANGELOG.md
	proxy/CHANGELOG.md clients/python/CHANGELOG.md)
rc=0
/usr/bin/python3 test/doctest.py "${FILES[@]}" || rc=$?
n=${#FILES[@]}

# The test of the test: documents with one fault each.  The runner must
# fail each, saying why, and pass the sound one beside them.
mkdir -p "$W/docs"
fence='```'
cat >"$W/docs/sound.md" <<EOF
# Sound

${fence}sql
SELECT tb_create('fine', 2, 1);
SELECT tb_acquire('fine', 2) AS granted;
${fence}

${fence}
...
 granted
---------
 t
(1 row)

${fence}

<!-- doctest: skip (would fail: skipped blocks are not run) -->
${fence}sql
SELECT no_such_function();
${fence}
EOF
cat >"$W/docs/misspelled.md" <<EOF
# A function renamed under the docs

${fence}sql
SELECT tb_aquire('fine');
${fence}
EOF
cat >"$W/docs/role.md" <<EOF
# A role granted before it is made

${fence}sql
GRANT EXECUTE ON FUNCTION limits.tb_refund(text, float8) TO worker_never_made;
${fence}
EOF
cat >"$W/docs/output.md" <<EOF
# Output that is not what the block prints

${fence}sql
SELECT tb_create('twice', 1, 1);
SELECT tb_acquire('twice') AS first, tb_acquire('twice') AS second;
${fence}

${fence}
...
 first | second
-------+--------
 t     | t
(1 row)

${fence}
EOF
cat >"$W/docs/deb.md" <<EOF
# A stale package name

    apt-get install ./build/debs/postgresql-15-tokenbucket_1.5-1_amd64.deb
EOF
cat >"$W/docs/link.md" <<EOF
# A link to nowhere

See [the reference](no-such-file.md) and [this](#no-such-heading).
EOF
cat >"$W/docs/shell.md" <<EOF
# A shell block that fails

${fence}sh
psql -X -c "SELECT tb_create_limit('x', 0)"
${fence}
EOF
check() {	# check NAME EXPECTED-RC WHAT-MUST-BE-SAID DESCRIPTION
	local out got=0
	n=$((n + 1))
	out=$(/usr/bin/python3 test/doctest.py --first-test 1 "$W/docs/$1.md" 2>&1) || got=$?
	if [ "$got" -eq "$2" ] && grep -q -- "$3" <<<"$out"; then
		echo "ok $n - the runner $4"
	else
		echo "not ok $n - the runner $4 (exit $got)"
		sed 's/^/#   /' <<<"$out"
		rc=1
	fi
}
check sound 0 "1 skipped" "passes a sound document, its output checked, its skipped block counted"
check misspelled 1 "function tb_aquire(unknown) does not exist" "fails a block calling a function that does not exist"
check role 1 'role "worker_never_made" does not exist' "fails a grant to a role no block made"
check output 1 "output is not the one shown" "fails a block whose output is not the one the document shows"
check deb 1 "make deb builds postgresql-15-tokenbucket_" "fails a package file name make deb does not build"
check link 1 "no-such-file.md, which is not in the tree" "fails a link to a file or heading that does not exist"
check shell 1 "sh block failed" "fails a shell block that exits non-zero"
echo "1..$n"
exit $rc
