#!/usr/bin/python3
"""The third article's case, atomic: an HTTP API that gives each user a
bucket made on first use from the template 'user:*', and answers
429 Too Many Requests with Retry-After and X-RateLimit-Remaining from
tb_try when the user's bucket is empty.

    gateway.py --dsn DSN --port 8401 --capacity 5 --refill 5

GET /hello?user=NAME  200 or 429, with X-RateLimit-Remaining (and
                      Retry-After, in whole seconds rounded up, on a 429)
"""
import argparse
import math

import asyncpg
from aiohttp import web


def make_app(args):
    async def startup(app):
        app["pool"] = await asyncpg.create_pool(args.dsn, min_size=2, max_size=10)
        async with app["pool"].acquire() as db:
            await db.execute("SELECT tb_drop('user:*')")
            await db.execute("SELECT tb_create('user:*', $1, $2)", args.capacity, args.refill)

    async def cleanup(app):
        await app["pool"].close()

    async def hello(request):
        user = request.query.get("user", "anonymous")
        async with request.app["pool"].acquire() as db:
            row = await db.fetchrow(
                "SELECT granted, remaining, extract(epoch FROM retry_after)::float8 AS wait"
                " FROM tb_try($1)", "user:" + user)
        headers = {"X-RateLimit-Remaining": str(max(0, math.floor(row["remaining"])))}
        if not row["granted"]:
            headers["Retry-After"] = str(max(1, math.ceil(row["wait"])))
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
    parser.add_argument("--capacity", type=float, default=5)
    parser.add_argument("--refill", type=float, default=5, help="tokens a second")
    args = parser.parse_args()
    web.run_app(make_app(args), host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
