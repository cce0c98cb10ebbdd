#!/usr/bin/python3
"""The third article's case, atomic: an HTTP API that gives each user a
bucket made on first use from the template 'user:*' (the DBA creates it,
see run.sh), and answers 429 Too Many Requests with Retry-After and
X-RateLimit-Remaining from tb_try when the user's bucket is empty.

    gateway.py --dsn DSN --port 8401

GET /hello?user=KEY  200 or 429, with X-RateLimit-Remaining (and
                     Retry-After, in whole seconds rounded up, on a 429);
                     400 when KEY is missing or not 1 to 64 of A-Z a-z 0-9 _ . -
"""
import argparse
import math
import re

import asyncpg
from aiohttp import web

# The key becomes part of a bucket name, so it is untrusted input: a key
# ending in '*' would name the template itself (refused by tb_try with
# 22023, a 500 here), a long one would exceed the 1024-byte limit.  Only
# what a user id or an API key is made of passes; see README.md.
KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def make_app(args):
    async def startup(app):
        # the gateway's role only takes tokens: tb_try is PUBLIC's
        app["pool"] = await asyncpg.create_pool(args.dsn, min_size=2, max_size=10)

    async def cleanup(app):
        await app["pool"].close()

    async def hello(request):
        user = request.query.get("user", "")
        if not KEY.fullmatch(user):
            return web.Response(status=400, text="user must be 1 to 64 of A-Z a-z 0-9 _ . -\n")
        async with request.app["pool"].acquire() as db:
            row = await db.fetchrow(
                "SELECT granted, remaining, retry_after_seconds FROM tb_try($1)", "user:" + user)
        headers = {"X-RateLimit-Remaining": str(max(0, math.floor(row["remaining"])))}
        if not row["granted"]:
            # whole seconds, rounded up: a client that waits that long finds its token
            headers["Retry-After"] = str(math.ceil(row["retry_after_seconds"]))
            return web.Response(status=429, text="Too Many Requests\n", headers=headers)
        return web.Response(text=f"hello, {user}\n", headers=headers)

    app = web.Application()
    app.on_startup.append(startup)
    app.on_cleanup.append(cleanup)
    app.router.add_get("/hello", hello)
    return app


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--port", type=int, default=8401)
    args = parser.parse_args()
    web.run_app(make_app(args), host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
