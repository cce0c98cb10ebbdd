#!/usr/bin/python3
"""Load for the gateway: 'alice' sends as fast as she can, 'bob' one request
a second, for --seconds.  Alice is throttled (429s) at her bucket's rate,
Bob never is.  Keys that are not allowed ('*', 'alice*', too long, ...) get
400 and make no bucket.  Then tb_purge removes the idle users' buckets.
Prints a line per user and, last, JSON.
"""
import argparse
import asyncio
import json
import time

import aiohttp
import asyncpg

# each must be answered 400: the template's own name, a key that would
# name it, no key, an empty one, one too long, a space, a non-ASCII letter
BAD_KEYS = ["*", "alice*", None, "", "a" * 65, "al ice", "\u00e5sa", "../etc"]


async def hammer(session, url, user, seconds, pause, counts):
    start = time.monotonic()
    while time.monotonic() < start + seconds:
        async with session.get(url, params={"user": user}) as answer:
            await answer.read()
            key = "ok" if answer.status == 200 else str(answer.status)
            counts[user][key] = counts[user].get(key, 0) + 1
            if answer.status == 429:
                seen = counts[user].setdefault("retry_after", [])
                if answer.headers.get("Retry-After") not in seen:
                    seen.append(answer.headers.get("Retry-After"))
        await asyncio.sleep(pause)
    # every answer came within this window, measured in this one process
    counts[user]["elapsed"] = round(time.monotonic() - start, 6)


async def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True, help="the DBA's, to count and purge")
    parser.add_argument("--gateway", required=True)
    parser.add_argument("--seconds", type=float, default=5)
    args = parser.parse_args()

    url = f"{args.gateway}/hello"
    counts = {"alice": {}, "bob": {}}
    bad = {}
    async with aiohttp.ClientSession() as session:
        for key in BAD_KEYS:
            async with session.get(url, params={} if key is None else {"user": key}) as answer:
                label = "(none)" if key is None else key if len(key) < 10 else f"{len(key)} x {key[0]}"
                bad[label] = answer.status
        await asyncio.gather(hammer(session, url, "alice", args.seconds, 0.0, counts),
                             hammer(session, url, "bob", args.seconds, 1.0, counts))
    for user, c in counts.items():
        print(f"{user}: {c.get('ok', 0)} answered, {c.get('429', 0)} refused with 429"
              + (f" (Retry-After: {', '.join(c['retry_after'])})" if "retry_after" in c else ""))
    print(f"bad keys: {sum(s == 400 for s in bad.values())} of {len(bad)} answered 400")

    db = await asyncpg.connect(args.dsn)
    limit = dict(await db.fetchrow("SELECT capacity, refill_rate AS rate FROM tb_status"
                                   " WHERE name = 'user:*'"))
    users = await db.fetchval("SELECT count(*) FROM tb_status WHERE template = 'user:*'")
    await asyncio.sleep(1.5)    # both buckets refill (5 tokens at 5/s)
    purged = await db.fetchval("SELECT tb_purge('1 second')")
    left = await db.fetchval("SELECT count(*) FROM tb_status WHERE template = 'user:*'")
    await db.close()
    print(f"tb_purge removed {purged} idle user buckets of {users}; {left} left")
    print(json.dumps({"alice": counts["alice"], "bob": counts["bob"], "bad_keys": bad, "limit": limit,
                      "users": users, "purged": purged, "left": left}))


if __name__ == "__main__":
    asyncio.run(main())
