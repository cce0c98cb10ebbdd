#!/usr/bin/python3
"""The second article's case, with the limit in PostgreSQL: an asyncio
client fires hundreds of concurrent requests at the provider through one
aiohttp session wrapped by the tokenbucket package (clients/python): each
request first takes a token from the shared request bucket, waiting
client-side on the bucket's retry_after without holding a database
connection, so the provider never sees more than its limit.  The provider
also caps the requests it answers at once: each request also holds a
lease of one of --inflight slots, taken with its token (tb_lease_all, all
or nothing, waited for client-side like the token) and released when its
answer is in, so the provider never sees more than that many at once
either, however many processes share the limit.

    client.py --dsn DSN --provider URL --requests 300 --rpm 18 --burst 10 --window 1 --inflight 3

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

import os
import sys

import aiohttp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../clients/python"))
import tokenbucket  # noqa: E402
from tokenbucket.aiohttp import LimitedSession  # noqa: E402


async def one_request(session, args, counts):
    try:
        # a token and (with --inflight) a slot, both or neither, waited for
        # client-side; the slot is held by the limiter's lease connection
        # until released, or until its session ends should this process die
        async with session.post(f"{args.provider}/v1/complete",
                                json={"prompt_tokens": 10, "max_tokens": 20}) as answer:
            await answer.read()
            counts["ok" if answer.status == 200 else "refused"] += 1
    except tokenbucket.RateLimited:
        counts["timed_out"] += 1


async def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--provider", required=True)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rpm", type=float, default=18)
    parser.add_argument("--burst", type=float, default=10)
    parser.add_argument("--window", type=float, default=1.0)
    parser.add_argument("--bucket", default="provider:rpm")
    parser.add_argument("--inflight", type=int, default=0,
                        help="requests in flight at once (0: no lease)")
    parser.add_argument("--limit", default="provider:inflight")
    parser.add_argument("--pool", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=60)
    args = parser.parse_args()

    # one limiter: waits hold no connection, and the leases held all live
    # on its one lease connection, so a pool of 5 serves every request
    rate = tokenbucket.AsyncLimiter(args.dsn, pool_size=args.pool)
    async with rate.connection() as db:
        # the provider's limit, as a bucket every client shares
        await db.execute("SELECT tb_drop($1)", args.bucket)
        await db.execute("SELECT tb_create($1, $2, $3, $4)", args.bucket, args.burst,
                         args.rpm, datetime.timedelta(seconds=args.window))
        if args.inflight:
            # and its cap on concurrent requests, as a limit every client shares
            await db.execute("SELECT tb_drop($1)", args.limit)
            await db.execute("SELECT tb_create_limit($1, $2)", args.limit, args.inflight)
    counts = {"ok": 0, "refused": 0, "timed_out": 0}
    async with LimitedSession(rate, {args.bucket: 1}, timeout=args.timeout,
                              lease=args.limit if args.inflight else None) as session:
        await session.session.post(f"{args.provider}/reset")
        started = time.monotonic()
        await asyncio.gather(*(one_request(session, args, counts)
                               for _ in range(args.requests)))
        async with session.session.get(f"{args.provider}/stats") as answer:
            stats = await answer.json()
    await rate.close()

    elapsed = time.monotonic() - started
    # the most the provider allows over the run: a window's burst, then its rate
    allowed = stats["rpm"] + stats["rpm"] / stats["window"] * stats["seconds"]
    result = {"requests": args.requests, "served": stats["served"],
              "refused": stats["refused"], "timed_out": counts["timed_out"],
              "seconds": round(elapsed, 2), "allowed": round(allowed, 1),
              "of_limit": round(stats["served"] / allowed, 3),
              "inflight": args.inflight, "max_in_flight": stats["max_in_flight"],
              "refused_in_flight": stats["refused_in_flight"]}
    print(f"{result['served']} served, {result['refused']} refused (429) in "
          f"{result['seconds']} s; the provider allowed {result['allowed']}: "
          f"{100 * result['of_limit']:.1f}% of its limit used; at most "
          f"{result['max_in_flight']} in flight at once (its cap: {args.inflight or 'none'})")
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())
