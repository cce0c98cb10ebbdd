# proxy/test/cluster.sh: throwaway servers for tokenbucket_proxy, shared by
# proxy/test/proxy.sh and bench/run.sh.  Sourced after scripts/common.sh, not
# run.
#
#   px_init                       a folder for the servers ($PX)
#   px_server NAME [CONF...]      initdb and start a server in $PX/NAME on a
#                                 free loopback port (preloading tokenbucket,
#                                 with any extra postgresql.conf lines);
#                                 sets PX_PORT[NAME]
#   px_stop NAME                  stop it (fast shutdown)
#   px_start NAME                 start it again
#   px_cluster PROXYDB NAME:DB... the proxy database PROXYDB on server
#                                 "proxy": tokenbucket_proxy, the foreign
#                                 server tokenbucket with partition i in
#                                 database DB of server NAME (created, with
#                                 tokenbucket and tokenbucket_shard), and a
#                                 user mapping for all
#   px_cleanup                    stop every server and remove $PX

declare -A PX_PORT=()
PX=

px_init() {
	PX=$(mktemp -d /tmp/tokenbucket-proxy.XXXXXX)
	chmod 755 "$PX"
	[ "$(id -u)" -eq 0 ] && chown postgres: "$PX"
	return 0
}

px_run() {
	if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

px_server() {
	local name=$1 port
	shift
	port=$(tb_free_port)
	px_run "$PGBIN/initdb" -D "$PX/$name" -U postgres -A trust --no-sync -E UTF8 \
		--locale=C >"$PX/$name.initdb.log"
	{
		echo "listen_addresses = '127.0.0.1'"
		echo "port = $port"
		echo "unix_socket_directories = '$PX'"
		echo "max_connections = 300"
		echo "shared_preload_libraries = 'tokenbucket'"
		echo "fsync = off"
		echo "log_min_messages = warning"
		printf '%s\n' "$@"
	} >>"$PX/$name/postgresql.conf"
	PX_PORT[$name]=$port
	px_start "$name"
}

px_start() {
	px_run "$PGBIN/pg_ctl" -D "$PX/$1" -l "$PX/$1.log" -w -s start
}

px_stop() {
	px_run "$PGBIN/pg_ctl" -D "$PX/$1" -m fast -w -s stop
}

# psql on database $2 of server $1
px_psql() {
	local name=$1 db=$2
	shift 2
	psql -X -A -t -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "${PX_PORT[$name]}" -U postgres -d "$db" "$@"
}

px_cluster() {
	local proxydb=$1 part options=() i=0 name db
	shift
	for part in "$@"; do
		name=${part%%:*} db=${part#*:}
		px_psql "$name" postgres -c "CREATE DATABASE $db"
		px_psql "$name" "$db" -c 'CREATE EXTENSION tokenbucket' -c 'CREATE EXTENSION tokenbucket_shard'
		options+=("p$i 'host=127.0.0.1 port=${PX_PORT[$name]} dbname=$db'")
		i=$((i + 1))
	done
	px_psql proxy postgres -c "CREATE DATABASE $proxydb"
	px_psql proxy "$proxydb" <<SQL
CREATE EXTENSION tokenbucket_proxy CASCADE;
CREATE SERVER tokenbucket FOREIGN DATA WRAPPER plproxy
	OPTIONS ($(IFS=,; echo "${options[*]}"));
CREATE USER MAPPING FOR PUBLIC SERVER tokenbucket OPTIONS (user 'postgres');
SQL
}

px_cleanup() {
	local name
	[ -n "$PX" ] && [ -d "$PX" ] || return 0
	for name in "${!PX_PORT[@]}"; do
		px_run "$PGBIN/pg_ctl" -D "$PX/$name" -m immediate -s stop >/dev/null 2>&1 || true
	done
	rm -rf "$PX"
}
