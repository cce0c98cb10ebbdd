#!/usr/bin/python3
"""The second article's case, with the limit in PostgreSQL: an asyncio
client fires hundreds of concurrent requests at the provider through one
aiohttp session; each first awaits tb_acquire_wait on the shared request
bucket (through an asyncpg pool), so the provider never sees more than its
limit, and nothing polls.

    client.py --dsn DSN --provider URL --requests 300 --rpm 18 --burst 10 --window 1

The bucket is set below the provider's limit (a lower rate, a smaller
burst): a grant reaches the provider a moment later over HTTP, and on a
busy machine those moments vary; the margin absorbs half a second of it.

Prints what the provider served and refused and the rate achieved against
its limit, as JSON on the last line.
"""
import argparse
import asyncio
import datetime
import json
import time

import aiohttp
import asyncpg


async def one_request(session, pool, args, counts):
    async with pool.acquire() as db:
        granted = await db.fetchval("SELECT tb_acquire_wait($1, 1, $2)", args.bucket,
                                    datetime.timedelta(seconds=args.timeout))
    if not granted:
        counts["timed_out"] += 1
        return
    async with session.post(f"{args.provider}/v1/complete",
                            json={"prompt_tokens": 10, "max_tokens": 20}) as answer:
        await answer.read()
        counts["ok" if answer.status == 200 else "refused"] += 1


async def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--provider", required=True)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rpm", type=float, default=18)
    parser.add_argument("--burst", type=float, default=10)
    parser.add_argument("--window", type=float, default=1.0)
    parser.add_argument("--bucket", default="provider:rpm")
    parser.add_argument("--pool", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=60)
    args = parser.parse_args()

    pool = await asyncpg.create_pool(args.dsn, min_size=args.pool, max_size=args.pool)
    async with pool.acquire() as db:
        # the provider's limit, as a bucket every client shares
        await db.execute("SELECT tb_drop($1)", args.bucket)
        await db.execute("SELECT tb_create($1, $2, $3, $4)", args.bucket, args.burst,
                         args.rpm, datetime.timedelta(seconds=args.window))
    counts = {"ok": 0, "refused": 0, "timed_out": 0}
    async with aiohttp.ClientSession() as session:
        await session.post(f"{args.provider}/reset")
        started = time.monotonic()
        await asyncio.gather(*(one_request(session, pool, args, counts)
                               for _ in range(args.requests)))
        async with session.get(f"{args.provider}/stats") as answer:
            stats = await answer.json()
    await pool.close()

    elapsed = time.monotonic() - started
    # the most the provider allows over the run: a window's burst, then its rate
    allowed = stats["rpm"] + stats["rpm"] / stats["window"] * stats["seconds"]
    result = {"requests": args.requests, "served": stats["served"],
              "refused": stats["refused"], "timed_out": counts["timed_out"],
              "seconds": round(elapsed, 2), "allowed": round(allowed, 1),
              "of_limit": round(stats["served"] / allowed, 3)}
    print(f"{result['served']} served, {result['refused']} refused (429) in "
          f"{result['seconds']} s; the provider allowed {result['allowed']}: "
          f"{100 * result['of_limit']:.1f}% of its limit used")
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())
