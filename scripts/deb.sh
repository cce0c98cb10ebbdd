#!/usr/bin/env bash
# scripts/deb.sh: `make deb`.  Builds the Debian packages
# postgresql-NN-tokenbucket and postgresql-NN-tokenbucket-proxy for every
# PostgreSQL version this system supports (debian/pgversions intersected
# with postgresql-common's supported versions: 15 on Debian 12), the Debian
# way: pg_buildext, debhelper, the regression tests run against the built
# files in a throwaway cluster; and python3-tokenbucket, the Python client
# (clients/python), with dh-python's pybuild from its pyproject.toml.  Builds from a copy of the tree's files (git
# ls-files), so the tree stays clean; the .deb files land in $DEBDIR
# (build/debs by default).

set -euo pipefail
TOP=$(cd "$(dirname "$0")/.." && pwd)
DEBDIR=${DEBDIR:-$TOP/build/debs}
VERSION=$(dpkg-parsechangelog -l "$TOP/debian/changelog" -S Version 2>/dev/null ||
	sed -n '1s/.*(\(.*\)).*/\1/p' "$TOP/debian/changelog")

say() { printf '\n== %s\n' "$*"; }

need=(build-essential debhelper dpkg-dev postgresql-server-dev-all
	dh-python pybuild-plugin-pyproject python3-all python3-setuptools)
missing=()
for pkg in "${need[@]}"; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
	say "installing from Debian: ${missing[*]}"
	[ "$(id -u)" -eq 0 ] || { echo "missing packages: ${missing[*]}; run as root" >&2; exit 1; }
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

WORK=$(mktemp -d /tmp/tokenbucket-deb.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
SRC=$WORK/tokenbucket-${VERSION%-*}
mkdir -p "$SRC"
(cd "$TOP" && git ls-files -z --cached --others --exclude-standard 2>/dev/null ||
	find . -path ./.git -prune -o -path ./build -prune -o -type f -print0) |
	(cd "$TOP" && xargs -0 cp --parents -t "$SRC")
# pg_virtualenv runs the tests' cluster as nobody when we are root
chmod -R a+rX "$WORK"

say "building packages $VERSION for PostgreSQL $(cd "$SRC" && pg_buildext supported-versions | tr '\n' ' ')"
cd "$SRC"
pg_buildext updatecontrol
dpkg-buildpackage -us -uc -b
mkdir -p "$DEBDIR"
rm -f "$DEBDIR"/*.deb
cp "$WORK"/*.deb "$DEBDIR"/
say "packages in $DEBDIR"
ls -1 "$DEBDIR"
