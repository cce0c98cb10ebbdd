#!/usr/bin/env bash
# examples/gateway/run.sh: `make -C examples/gateway run`.  Starts a
# throwaway PostgreSQL with tokenbucket and the gateway (a bucket per user
# from the template 'user:*', 5 at once and 5 a second), sends bad keys,
# then EXAMPLE_SECONDS of load from a fast and a slow user, then purges.
source "$(dirname "$0")/../../scripts/common.sh"
: "${EXAMPLE_SECONDS:=5}"

tb_install_packages python3-aiohttp python3-asyncpg python3-flask python3-psycopg
tb_build_install
say "starting a throwaway PostgreSQL and the gateway"
tb_start_server
# the DBA's part: the per-user template, and the gateway's own role, which
# needs no grant (tb_try is PUBLIC's) and can make or change no bucket
psql -q -X -v ON_ERROR_STOP=1 <<'SQL'
CREATE EXTENSION tokenbucket;
SELECT tb_create('user:*', capacity => 5, refill => 5) \g /dev/null
CREATE ROLE gateway LOGIN;
SQL
DSN="postgresql://postgres@/postgres?host=$PGHOST&port=$PGPORT"
PORT=$(tb_free_port)
/usr/bin/python3 "$TOP/examples/gateway/gateway.py" \
	--dsn "postgresql://gateway@/postgres?host=$PGHOST&port=$PGPORT" --port "$PORT" \
	>"$TB_TMP/gateway.log" 2>&1 &
TB_CHILDREN+=($!)
tb_wait_port "$PORT"
say "bad keys, then alice calls as fast as she can, bob once a second, for $EXAMPLE_SECONDS s"
/usr/bin/python3 "$TOP/examples/gateway/load.py" --dsn "$DSN" \
	--gateway "http://127.0.0.1:$PORT" --seconds "$EXAMPLE_SECONDS"
