#!/usr/bin/python3
"""Load for the gateway: 'alice' sends as fast as she can, 'bob' one request
a second, for --seconds.  Alice is throttled (429s) at her bucket's rate,
Bob never is.  Then tb_purge removes the idle users' buckets.  Prints a
line per user and, last, JSON.
"""
import argparse
import asyncio
import json
import time

import aiohttp
import asyncpg


async def hammer(session, url, user, seconds, pause, counts):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        async with session.get(url, params={"user": user}) as answer:
            await answer.read()
            key = "ok" if answer.status == 200 else str(answer.status)
            counts[user][key] = counts[user].get(key, 0) + 1
            if answer.status == 429:
                counts[user]["retry_after"] = answer.headers.get("Retry-After")
        await asyncio.sleep(pause)


async def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--gateway", required=True)
    parser.add_argument("--seconds", type=float, default=5)
    args = parser.parse_args()

    url = f"{args.gateway}/hello"
    counts = {"alice": {}, "bob": {}}
    async with aiohttp.ClientSession() as session:
        await asyncio.gather(hammer(session, url, "alice", args.seconds, 0.0, counts),
                             hammer(session, url, "bob", args.seconds, 1.0, counts))
    for user, c in counts.items():
        print(f"{user}: {c.get('ok', 0)} answered, {c.get('429', 0)} refused with 429")

    db = await asyncpg.connect(args.dsn)
    users = await db.fetchval("SELECT count(*) FROM tb_status WHERE template = 'user:*'")
    await asyncio.sleep(1.5)    # both buckets refill (5 tokens at 5/s)
    purged = await db.fetchval("SELECT tb_purge('1 second')")
    left = await db.fetchval("SELECT count(*) FROM tb_status WHERE template = 'user:*'")
    await db.close()
    print(f"tb_purge removed {purged} idle user buckets of {users}; {left} left")
    print(json.dumps({"alice": counts["alice"], "bob": counts["bob"],
                      "users": users, "purged": purged, "left": left}))


if __name__ == "__main__":
    asyncio.run(main())
