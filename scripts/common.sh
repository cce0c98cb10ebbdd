# scripts/common.sh: set-up shared by `make demo`, `make test` (and later
# `make bench`).  Sourced, not run.  On a fresh Debian 12 machine, as root:
# installs what is missing from Debian's packages, builds and installs the
# extension, and starts a throwaway PostgreSQL that tb_cleanup removes.

set -euo pipefail

PGVERSION=${PGVERSION:-15}
# TB_PGBIN: the server's binaries elsewhere (a copy of the installation in
# a folder of its own, so that two checkouts install without meeting)
PGBIN=${TB_PGBIN:-/usr/lib/postgresql/$PGVERSION/bin}
export PG_CONFIG=$PGBIN/pg_config
TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Debian packages every command needs; callers may add more.
TB_PACKAGES=(make gcc "postgresql-$PGVERSION" "postgresql-server-dev-$PGVERSION")

say() { printf '\n== %s\n' "$*"; }

# Install the packages that are not there yet; never touch a cluster.
tb_install_packages() {
	local missing=() pkg
	for pkg in "${TB_PACKAGES[@]}" "$@"; do
		dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' ||
			missing+=("$pkg")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	say "installing from Debian: ${missing[*]}"
	if [ "$(id -u)" -ne 0 ]; then
		echo "missing packages: ${missing[*]}; run as root, or install them" >&2
		exit 1
	fi
	# Do not let the server package create and start its own cluster.
	mkdir -p /etc/postgresql-common
	if ! grep -qs '^create_main_cluster' /etc/postgresql-common/createcluster.conf; then
		echo 'create_main_cluster = false' >>/etc/postgresql-common/createcluster.conf
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Build and install the extension into the server's directories (unless
# TB_INSTALLED says make test has done so: its suites run side by side).
tb_build_install() {
	[ -n "${TB_INSTALLED:-}" ] && return 0
	say "building and installing tokenbucket"
	make -C "$TOP" -s PG_CONFIG="$PG_CONFIG" clean
	make -C "$TOP" -s PG_CONFIG="$PG_CONFIG" ${SANITIZE:+SANITIZE=1} all install
}

# Start a throwaway server on loopback: a fresh data directory in a
# temporary folder, owned by an unprivileged user when we are root (initdb
# refuses root), trust authentication, a free port.  Exports PGHOST,
# PGPORT, PGUSER, PGDATABASE for psql, pg_regress, pg_prove and pgbench.
tb_start_server() {
	TB_TMP=$(mktemp -d /tmp/tokenbucket.XXXXXX)
	chmod 755 "$TB_TMP"
	TB_RUNAS=()
	if [ "$(id -u)" -eq 0 ]; then
		chown postgres: "$TB_TMP"
		TB_RUNAS=(runuser -u postgres --)
	fi
	trap tb_cleanup EXIT
	"${TB_RUNAS[@]}" "$PGBIN/initdb" -D "$TB_TMP/data" -U postgres -A trust \
		--no-sync -E UTF8 --locale=C >"$TB_TMP/initdb.log"
	PGPORT=$( (/usr/bin/python3 - <<'PY'
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])
PY
) 2>/dev/null || echo $((20000 + RANDOM % 20000)))
	cat >>"$TB_TMP/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PGPORT
unix_socket_directories = '$TB_TMP'
max_connections = 120
max_prepared_transactions = 10
shared_preload_libraries = 'tokenbucket'
tokenbucket.max_memory_buckets = 20000
fsync = off
log_min_messages = warning
${TB_SERVER_CONF:-}
CONF
	if [ -n "${SANITIZE:-}" ]; then
		# the sanitizers' runtimes must be loaded before anything else in
		# the uninstrumented server: preload them (and the shim that lets
		# AddressSanitizer start there, test/sanitize/asan_preload.c), and
		# have every report written to a file test/run.sh checks.  Leak
		# checks stay off: a server frees much of its memory by exiting.
		mkdir -p "$TB_TMP/sanitizer"
		chmod 777 "$TB_TMP/sanitizer"
		gcc -shared -fPIC -O2 -o "$TB_TMP/asan_preload.so" "$TOP/test/sanitize/asan_preload.c"
		"${TB_RUNAS[@]}" env \
			LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so) $TB_TMP/asan_preload.so" \
			ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:log_path=$TB_TMP/sanitizer/asan" \
			UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$TB_TMP/sanitizer/ubsan" \
			"$PGBIN/pg_ctl" -D "$TB_TMP/data" -l "$TB_TMP/server.log" -w -s start
	else
		"${TB_RUNAS[@]}" "$PGBIN/pg_ctl" -D "$TB_TMP/data" -l "$TB_TMP/server.log" -w -s start
	fi
	export PGHOST=$TB_TMP PGPORT PGUSER=postgres PGDATABASE=postgres
	export PATH=$PGBIN:$PATH
}

# Stop the server (and any helper started with TB_CHILDREN+=) and remove
# everything tb_start_server made.
TB_CHILDREN=()
tb_cleanup() {
	local rc=$? pid
	for pid in "${TB_CHILDREN[@]}"; do
		kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	done
	if [ -n "${TB_TMP:-}" ] && [ -d "$TB_TMP" ]; then
		"${TB_RUNAS[@]}" "$PGBIN/pg_ctl" -D "$TB_TMP/data" -m immediate -s stop \
			>/dev/null 2>&1 || true
		rm -rf "$TB_TMP"
	fi
	exit $rc
}

# Build revision REV of this checkout (empty: the working tree), in a git
# work tree of its own under DIR, and keep its library as DIR/NAME.so
# (make bench-compare, make bench-instructions).  The work trees are
# listed in TB_TREES; tb_remove_trees removes them.
TB_TREES=()
tb_build_revision() {	# tb_build_revision DIR NAME REV
	local dir=$1/$2
	if [ -n "$3" ]; then
		git -C "$TOP" worktree add -q --detach "$dir" "$3"
		TB_TREES+=("$dir")
	else
		dir=$TOP
	fi
	make -C "$dir" -s PG_CONFIG="$PG_CONFIG" clean
	make -C "$dir" -s PG_CONFIG="$PG_CONFIG" all
	cp "$dir/tokenbucket.so" "$1/$2.so"
}
tb_remove_trees() {
	local tree
	for tree in "${TB_TREES[@]}"; do
		git -C "$TOP" worktree remove --force "$tree"
	done
}

# Wait until something listens on 127.0.0.1:$1 (at most $2 seconds).
tb_wait_port() {
	local i
	for ((i = 0; i < ${2:-20} * 10; i++)); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.1
	done
	echo "nothing listens on port $1" >&2
	return 1
}

# A free TCP port on loopback.
tb_free_port() {
	/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Start the stand-in AI provider (examples/provider) in the background with
# the given options; exports PROVIDER_URL.  tb_cleanup stops it.
tb_start_provider() {
	local port
	port=$(tb_free_port)
	/usr/bin/python3 "$TOP/examples/provider/provider.py" --port "$port" "$@" \
		>"$TB_TMP/provider.log" 2>&1 &
	TB_CHILDREN+=($!)
	tb_wait_port "$port"
	export PROVIDER_URL="http://127.0.0.1:$port"
}
