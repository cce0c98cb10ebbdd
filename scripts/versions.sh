#!/usr/bin/env bash
# scripts/versions.sh: `make test-versions`.  For each PostgreSQL major
# version (VERSIONS, default "15 17 18"), in a chroot of the Debian release
# that ships it (15: bookworm, 17: trixie, 18: sid), made with mmdebstrap:
#
#   suite      a clean build with -Werror and the suite of `make test`
#              (pg_regress, isolation, pgTAP, the TAP tests, stress, wait,
#              locks, memory, exporter, the proxy's tests; not the
#              examples, whose clients and servers do not change with the
#              server's version), on the versions of SUITE_VERSIONS
#              (default "17 18": 15 is Debian 12's, which `make test` has
#              just run the suite on, on this machine; CI runs both)
#   package    `make deb`: postgresql-NN-tokenbucket and -proxy, built the
#              Debian way (their build runs the regression tests too), and
#              python3-tokenbucket (pybuild)
#   installed  the packages installed into a second, clean chroot, and
#              pg_regress and isolation run against the installed files
#              (debian/tests/installcheck: pg_buildext installcheck), and
#              the Python package imported from where dpkg put it
#   dump       a database dumped with pg_dump on the first version
#              restored into each later one (test/versions/dump.sh)
#
# Chroots are cached as tarballs under TB_CHROOT_CACHE (default
# /var/cache/tokenbucket), one per release and package list: a changed
# list makes a new one and removes the old.  Each step extracts a fresh
# copy; mounts (/proc, /dev/shm) are undone and the copies removed on every
# exit path.  Prints one summary line per version and "N passed, N failed"
# last.  Needs root and Debian's mirror (TB_MIRROR).

set -euo pipefail
shopt -s inherit_errexit
TOP=$(cd "$(dirname "$0")/.." && pwd)
VERSIONS=${VERSIONS:-15 17 18}
SUITE_VERSIONS=${SUITE_VERSIONS:-17 18}
CACHE=${TB_CHROOT_CACHE:-/var/cache/tokenbucket}
MIRROR=${TB_MIRROR:-http://deb.debian.org/debian}

say() { printf '\n== %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
	echo "make test-versions makes chroots: run it as root" >&2
	exit 1
fi
if ! command -v mmdebstrap >/dev/null; then
	say "installing from Debian: mmdebstrap"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
fi

suite_of() {
	case $1 in
	15) echo bookworm ;;
	17) echo trixie ;;
	18) echo sid ;;
	*) echo "no Debian release here ships PostgreSQL $1" >&2; return 1 ;;
	esac
}

# What a chroot holds: the build, the servers and every suite's tools
# (python3-httpx: the installed Python package's httpx transport imports).
packages_of() {
	echo build-essential git procps python3 curl valgrind \
		"postgresql-$1" "postgresql-server-dev-$1" postgresql-server-dev-all \
		"postgresql-$1-pgtap" libtap-parser-sourcehandler-pgtap-perl libipc-run-perl \
		"postgresql-$1-plproxy" prometheus-postgres-exporter debhelper dpkg-dev \
		dh-python pybuild-plugin-pyproject python3-all python3-setuptools python3-httpx \
		pgxnclient
}

WORK=$(mktemp -d /tmp/tokenbucket-versions.XXXXXX)
ROOTS=()

# Unmount everything below a root, then remove it; never remove a root
# that still has a mount in it.
root_remove() {
	local root=$1 m
	for m in dev/shm proc; do
		if mountpoint -q "$root/$m"; then
			umount "$root/$m" 2>/dev/null || umount -l "$root/$m"
		fi
	done
	if findmnt -rn -o TARGET | grep -q "^$root/"; then
		echo "still mounted under $root; left in place" >&2
		return 1
	fi
	rm -rf "$root"
}

cleanup() {
	local rc=$? root
	for root in "${ROOTS[@]}"; do
		[ -d "$root" ] && root_remove "$root"
	done
	rm -rf "$WORK"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The cached tarball of a version's chroot, made when missing.
chroot_tarball() {
	local v=$1 suite pkgs hash tarball opts=()
	suite=$(suite_of "$v")
	pkgs=$(packages_of "$v")
	hash=$(echo "$suite $pkgs" | sha1sum | cut -c1-12)
	tarball=$CACHE/$suite-pg$v-$hash.tar
	if [ ! -f "$tarball" ]; then
		mkdir -p "$CACHE"
		rm -f "$CACHE/$suite-pg$v-"*.tar
		# unstable's Release file is short-lived; a mirror's copy may
		# have expired
		[ "$suite" = sid ] && opts+=(--aptopt='Acquire::Check-Valid-Until "false"')
		say "making the $suite chroot for PostgreSQL $v (cached in $CACHE)" >&2
		mmdebstrap --quiet --variant=apt --format=tar "${opts[@]}" --include="${pkgs// /,}" \
			"$suite" "$tarball.tmp" "$MIRROR" >&2
		mv "$tarball.tmp" "$tarball"
	fi
	echo "$tarball"
}

# A fresh root from a tarball, with /proc and its own /dev/shm, in $root.
root_new() {
	root=$(mktemp -d /tmp/tokenbucket-root.XXXXXX)
	ROOTS+=("$root")
	tar -C "$root" -xf "$1"
	chmod 755 "$root"
	mount -t proc proc "$root/proc"
	mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
}

# This tree's files (tracked and new, not ignored) into a root's /build.
copy_tree() {
	mkdir -p "$1/build/tokenbucket"
	(cd "$TOP" && git ls-files -z --cached --others --exclude-standard) |
		(cd "$TOP" && xargs -0 cp --parents -t "$1/build/tokenbucket")
}

# Run a shell command in a root, as root, with a clean environment.
in_root() {
	local root=$1
	shift
	chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
		LANG=C.UTF-8 TERM=dumb bash -c "$*"
}

passed=0
failed=0
# count LOG: TAP and pg_regress lines (the 15 and 16+ formats)
count() {
	local ok bad
	ok=$(grep -Ec '^ *ok [0-9]+|\.\.\. ok' "$1" || true)
	bad=$(grep -Ec '^ *not ok [0-9]+|\.\.\. FAILED' "$1" || true)
	echo "$ok $bad"
}
SUMMARY=()
DUMPDIR=$WORK/dump
mkdir -p "$DUMPDIR"
chmod 777 "$DUMPDIR"
dump_from=

for v in $VERSIONS; do
	suite=$(suite_of "$v")
	began=$SECONDS
	tarball=$(chroot_tarball "$v")
	echo "chroot for $v: $((SECONDS - began)) s"
	line="PostgreSQL $v ($suite):"

	root_new "$tarball"
	copy_tree "$root"
	if [[ " $SUITE_VERSIONS " == *" $v "* ]]; then
		say "PostgreSQL $v ($suite): the suite of make test"
		log=$WORK/suite-$v.log
		rc=0
		began=$SECONDS
		in_root "$root" "cd /build/tokenbucket && PGVERSION=$v TB_SKIP=examples bash test/run.sh" \
			>"$log" 2>&1 || rc=$?
		cat "$log"
		last=$(tail -n 1 "$log")
		if [[ $last =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
			p=${BASH_REMATCH[1]}
			f=${BASH_REMATCH[2]}
			[ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
		else
			p=0
			f=1
		fi
		passed=$((passed + p))
		failed=$((failed + f))
		line+=" suite $p passed, $f failed ($((SECONDS - began)) s);"
	else
		line+=" suite: make test's;"
	fi

	say "PostgreSQL $v ($suite): make deb"
	began=$SECONDS
	log=$WORK/deb-$v.log
	rc=0
	in_root "$root" "cd /build/tokenbucket && DEBDIR=/build/debs bash scripts/deb.sh" \
		>"$log" 2>&1 || rc=$?
	tail -n 30 "$log"
	debs=()
	if [ "$rc" -eq 0 ]; then
		for deb in "$root"/build/debs/postgresql-"$v"-tokenbucket_*.deb \
			"$root"/build/debs/postgresql-"$v"-tokenbucket-proxy_*.deb \
			"$root"/build/debs/python3-tokenbucket_*.deb; do
			[ -f "$deb" ] && cp "$deb" "$WORK/" && debs+=("$WORK/$(basename "$deb")")
		done
	fi
	if [ ${#debs[@]} -eq 3 ]; then
		echo "ok - packages built: $(for d in "${debs[@]}"; do basename "$d"; done | tr '\n' ' ')"
		passed=$((passed + 1))
		line+=" packages built ($((SECONDS - began)) s);"
	else
		echo "not ok - make deb (exit $rc) did not build the three packages"
		failed=$((failed + 1))
		line+=" packages NOT built;"
	fi
	root_remove "$root"

	if [ ${#debs[@]} -eq 3 ]; then
		say "PostgreSQL $v ($suite): the packages installed in a clean chroot"
		began=$SECONDS
		root_new "$tarball"
		copy_tree "$root"
		mkdir -p "$root/build/debs"
		cp "${debs[@]}" "$root/build/debs/"
		log=$WORK/installed-$v.log
		rc=0
		in_root "$root" "dpkg -i /build/debs/*.deb &&
			cd /build/tokenbucket && chown -R nobody: . &&
			test ! -e tokenbucket.so && debian/tests/installcheck" >"$log" 2>&1 || rc=$?
		# the Python package, imported from where dpkg put it (not the tree),
		# at the version the package says it is (its own, not the extension's)
		check="python3-tokenbucket: import tokenbucket, tokenbucket.httpx, at its own version"
		pyversion=$(dpkg-deb -f "$WORK"/python3-tokenbucket_*.deb Version)
		if in_root "$root" "cd / && python3 -c 'import tokenbucket, tokenbucket.httpx; print(tokenbucket.__file__, tokenbucket.__version__)'" \
			>"$WORK/import-$v.log" 2>&1 &&
			grep -qx "/usr/lib/python3/dist-packages/tokenbucket/__init__.py ${pyversion%-*}" "$WORK/import-$v.log"; then
			echo "ok 1 - $check" >>"$log"
		else
			{ cat "$WORK/import-$v.log"; echo "not ok 1 - $check"; } >>"$log"
		fi
		cat "$log"
		read -r p f < <(count "$log")
		[ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
		passed=$((passed + p))
		failed=$((failed + f))
		line+=" installed package $p passed, $f failed ($((SECONDS - began)) s);"
		began=$SECONDS

		if [ -z "$dump_from" ]; then
			step=make
		else
			step=restore
		fi
		mkdir -p "$root/build/dump"
		cp -a "$DUMPDIR/." "$root/build/dump/"
		chmod 777 "$root/build/dump"
		log=$WORK/dump-$v.log
		rc=0
		in_root "$root" "cd /build/tokenbucket && PGVERSION=$v bash test/versions/dump.sh $step /build/dump" \
			>"$log" 2>&1 || rc=$?
		cat "$log"
		read -r p f < <(count "$log")
		[ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
		passed=$((passed + p))
		failed=$((failed + f))
		if [ "$step" = make ]; then
			cp -a "$root/build/dump/." "$DUMPDIR/"
			dump_from=$v
			line+=" dump made ($((SECONDS - began)) s);"
		else
			line+=" dump from $dump_from restored: $p passed, $f failed ($((SECONDS - began)) s);"
		fi
		root_remove "$root"
	fi
	SUMMARY+=("${line%;}")
done

echo
for line in "${SUMMARY[@]}"; do
	echo "$line"
done
echo "all versions: $SECONDS s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
