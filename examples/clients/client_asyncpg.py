#!/usr/bin/python3
"""examples/clients/client_asyncpg.py: the asyncpg client of the clients
example (README.md); the same steps as client_psycopg2.py, awaited.
Peeks once; proves on a bucket of its own that sleeping
retry_after_seconds is enough; then, with the other clients, loops on
tb_try on the shared bucket for EXAMPLE_SECONDS, sleeping
retry_after_seconds after each denial and waiting in the server
(tb_acquire_wait) every tenth call.  Prints one JSON line.  Connects with
libpq's PGHOST, PGPORT, PGUSER and PGDATABASE, which asyncpg reads too.
"""
import asyncio
import json
import os
import time

import asyncpg

NAME = "asyncpg"
BUCKET = os.environ.get("EXAMPLE_BUCKET", "shared")
SECONDS = float(os.environ.get("EXAMPLE_SECONDS", "5"))
COST = float(os.environ.get("EXAMPLE_COST", "1"))
RATE = float(os.environ.get("EXAMPLE_RATE", "10"))      # to judge retry_after
BARRIER = int(os.environ.get("EXAMPLE_BARRIER", "0"))   # advisory lock key; 0: none
SOLO_ROUNDS = 5
WAIT_TIMEOUT = 1.0                                      # seconds


async def main():
    db = await asyncpg.connect()    # asyncpg has no implicit transaction
    r = {"client": NAME, "grants": 0, "denials": 0, "retried": 0, "retried_granted": 0,
         "waits": 0, "waits_granted": 0, "first_call": None, "last_grant": None,
         "retry_after_min": None, "retry_after_max": None, "retry_after_usable": True,
         "solo_retried": 0, "solo_retried_granted": 0}

    async def try_once(bucket):
        """tb_try once; on a denial, judge retry_after_seconds and sleep it.
        Returns (granted, when the server answered, in epoch seconds)."""
        row = await db.fetchrow(
            "SELECT t.granted, t.retry_after_seconds,"
            " extract(epoch FROM clock_timestamp())::float8 AS at"    # after the decision
            " FROM tb_try($1, $2) AS t", bucket, COST)
        wait = row["retry_after_seconds"]
        if not row["granted"]:
            usable = isinstance(wait, float) and 0 < wait <= COST / RATE + 0.001
            r["retry_after_usable"] = r["retry_after_usable"] and usable
            r["retry_after_min"] = min(wait, r["retry_after_min"] or wait)
            r["retry_after_max"] = max(wait, r["retry_after_max"] or wait)
            await asyncio.sleep(wait)
        return row["granted"], row["at"]

    row = await db.fetchrow("SELECT granted, remaining FROM tb_peek($1, $2)", BUCKET, COST)
    r["peek"] = dict(row)

    # alone on solo:asyncpg (made from the template solo:*), a retry after
    # sleeping retry_after_seconds must be granted, every time
    while r["solo_retried"] < SOLO_ROUNDS:
        if not (await try_once("solo:" + NAME))[0]:
            r["solo_retried"] += 1
            r["solo_retried_granted"] += int((await try_once("solo:" + NAME))[0])

    if BARRIER:     # start with the others: run.sh holds this lock until all wait
        await db.execute("SELECT pg_advisory_xact_lock_shared($1)", BARRIER)
    r["first_call"] = await db.fetchval("SELECT extract(epoch FROM clock_timestamp())::float8")
    after_denial = False
    calls = 0
    end = time.monotonic() + SECONDS
    while time.monotonic() < end:
        calls += 1
        if calls % 10 == 5:
            # $3 is float8 here; passed straight as an interval, asyncpg
            # would want a datetime.timedelta, and refuses a number or a string
            row = await db.fetchrow(
                "SELECT ok, extract(epoch FROM clock_timestamp())::float8 AS at"
                " FROM tb_acquire_wait($1, $2, make_interval(secs => $3)) AS ok",
                BUCKET, COST, WAIT_TIMEOUT)
            granted, at = row["ok"], row["at"]
            r["waits"] += 1
            r["waits_granted"] += int(granted)
            after_denial = False
        else:
            granted, at = await try_once(BUCKET)
            if after_denial:
                r["retried"] += 1
                r["retried_granted"] += int(granted)
            after_denial = not granted
            r["denials"] += int(not granted)
        if granted:
            r["grants"] += 1
            r["last_grant"] = at
    await db.close()
    print(json.dumps(r))


if __name__ == "__main__":
    asyncio.run(main())
