#!/usr/bin/env bash
# examples/asyncio/run.sh: `make -C examples/asyncio run`.  Starts a
# throwaway PostgreSQL with tokenbucket and the stand-in provider, fires
# EXAMPLE_REQUESTS concurrent requests through aiohttp, each awaiting a
# lease of one of PROVIDER_CONCURRENCY slots (the provider's cap on
# requests at once) and a token (the Python client's LimitedSession,
# waiting client-side) first, and prints what the
# provider served and refused.
source "$(dirname "$0")/../../scripts/common.sh"
: "${EXAMPLE_REQUESTS:=300}"
: "${PROVIDER_RPS:=20}"
: "${PROVIDER_CONCURRENCY:=3}"

tb_install_packages python3-aiohttp python3-asyncpg
tb_build_install
say "starting a throwaway PostgreSQL and the stand-in provider ($PROVIDER_RPS requests/s, $PROVIDER_CONCURRENCY at once, 0.1 s each)"
tb_start_server
psql -q -X -c "CREATE EXTENSION tokenbucket"
tb_start_provider --rpm "$PROVIDER_RPS" --tpm 1e9 --window 1 \
	--concurrency "$PROVIDER_CONCURRENCY" --latency 0.1
say "$EXAMPLE_REQUESTS concurrent requests, each awaiting a lease and a token together (tb_lease_all, client-side)"
/usr/bin/python3 "$TOP/examples/asyncio/client.py" \
	--dsn "postgresql://postgres@/postgres?host=$PGHOST&port=$PGPORT" \
	--provider "$PROVIDER_URL" --requests "$EXAMPLE_REQUESTS" \
	--rpm "$(awk -v r="$PROVIDER_RPS" 'BEGIN {print r * 0.9}')" \
	--burst "$(awk -v r="$PROVIDER_RPS" 'BEGIN {print r * 0.5}')" --window 1 \
	--inflight "$PROVIDER_CONCURRENCY"
