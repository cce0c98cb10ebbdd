#!/usr/bin/env bash
# examples/celery/run.sh: `make -C examples/celery run`.  The first
# article's setup, for real: RabbitMQ as broker, a prefork pool of Celery
# workers, EXAMPLE_TASKS tasks calling the stand-in provider (limits of
# PROVIDER_RPS requests and PROVIDER_TPS tokens a second).  Runs twice:
# with the limiter (the Python client's Celery decorator: tb_try_all, a
# retry with countdown when refused, tb_sync, tb_settle, tb_pause), then
# without, and prints what the provider served and refused each time.
source "$(dirname "$0")/../../scripts/common.sh"
: "${EXAMPLE_TASKS:=200}"
: "${EXAMPLE_WORKERS:=4}"
: "${PROVIDER_RPS:=20}"
: "${PROVIDER_TPS:=3000}"
HERE=$TOP/examples/celery

tb_install_packages python3-celery python3-psycopg2 python3-aiohttp rabbitmq-server
tb_build_install
say "starting a throwaway PostgreSQL, the stand-in provider and RabbitMQ"
tb_start_server
tb_start_provider --rpm "$PROVIDER_RPS" --tpm "$PROVIDER_TPS" --window 1

# RabbitMQ and its own epmd, on loopback ports of their own, in TB_TMP
RMQ=$TB_TMP/rabbitmq
mkdir -p "$RMQ"
chmod 777 "$RMQ"
AMQP_PORT=$(tb_free_port)
NODE=tokenbucket-$(basename "$TB_TMP" | tr -cd 'a-zA-Z0-9')
RMQ_ENV=(HOME="$RMQ" RABBITMQ_NODENAME="$NODE@localhost"
	RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="$AMQP_PORT"
	RABBITMQ_DIST_PORT="$(tb_free_port)" ERL_EPMD_ADDRESS=127.0.0.1 ERL_EPMD_PORT="$(tb_free_port)"
	RABBITMQ_MNESIA_BASE="$RMQ/mnesia" RABBITMQ_LOG_BASE="$RMQ/log"
	RABBITMQ_ENABLED_PLUGINS_FILE="$RMQ/enabled_plugins" RABBITMQ_CONFIG_FILE="$RMQ/rabbitmq"
	RABBITMQ_ADVANCED_CONFIG_FILE="$RMQ/advanced.config" RABBITMQ_CONF_ENV_FILE="$RMQ/env.conf"
	RABBITMQ_PID_FILE="$RMQ/pid")
echo "[]." >"$RMQ/enabled_plugins"
echo "[]." >"$RMQ/advanced.config"
echo "distribution.listener.interface = 127.0.0.1" >"$RMQ/rabbitmq.conf"
touch "$RMQ/env.conf"
RMQ_AS=()
[ "$(id -u)" -eq 0 ] && RMQ_AS=(runuser -u rabbitmq --)
rabbitmq() { "${RMQ_AS[@]}" env "${RMQ_ENV[@]}" "/usr/lib/rabbitmq/bin/$@"; }
rabbitmq rabbitmq-server >"$RMQ/server.log" 2>&1 &
stop_rabbitmq() {	# stop the node and wait for its process to end, then epmd
	local pid
	pid=$(cat "$RMQ/pid" 2>/dev/null || true)
	rabbitmq rabbitmqctl -q stop "$RMQ/pid" >/dev/null 2>&1 || true
	[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
	"${RMQ_AS[@]}" env "${RMQ_ENV[@]}" epmd -kill >/dev/null 2>&1 || true
}
trap 'stop_rabbitmq; tb_cleanup' EXIT
for _ in $(seq 120); do
	rabbitmq rabbitmqctl -q await_startup >/dev/null 2>&1 && break
	sleep 0.5
done
rabbitmq rabbitmqctl -q await_startup >/dev/null

export BROKER_URL="amqp://guest:guest@127.0.0.1:$AMQP_PORT//"
export DATABASE_URL="postgresql://postgres@/postgres?host=$PGHOST&port=$PGPORT"
export PYTHONPATH=$HERE

# the provider's limits as two buckets every worker shares, a little under
# the provider's own so that timing never tips it over
psql -q -X -v ON_ERROR_STOP=1 <<SQL
CREATE EXTENSION tokenbucket;
SELECT tb_create('provider:rpm', 0.9 * $PROVIDER_RPS, 0.95 * $PROVIDER_RPS) \g /dev/null
SELECT tb_create('provider:tpm', 0.9 * $PROVIDER_TPS, 0.95 * $PROVIDER_TPS) \g /dev/null
SQL

run() {	# run on|off
	local worker
	say "$EXAMPLE_TASKS tasks on $EXAMPLE_WORKERS prefork workers, limiter $1"
	(cd "$HERE" && TB_LIMITER=$1 exec /usr/bin/python3 -m celery -A tasks worker \
		--pool prefork --concurrency "$EXAMPLE_WORKERS" --loglevel WARNING \
		--without-gossip --without-mingle) >"$TB_TMP/worker-$1.log" 2>&1 &
	worker=$!
	(cd "$HERE" && /usr/bin/python3 submit.py --provider "$PROVIDER_URL" \
		--tasks "$EXAMPLE_TASKS" --label "limiter $1") | tee "$TB_TMP/result-$1"
	kill -TERM $worker
	wait $worker 2>/dev/null || true
}
run on
run off
echo "{\"with\": $(tail -n 1 "$TB_TMP/result-on"), \"without\": $(tail -n 1 "$TB_TMP/result-off")}"
