#!/usr/bin/python3
"""A stand-in AI provider: an HTTP server on 127.0.0.1 that enforces its own
rate limits the way a provider does, so the examples can show a pool of
workers staying under them.

POST /v1/complete  {"prompt_tokens": n, "max_tokens": m}
    200 {"usage": {"total_tokens": t}}   t = prompt + some of max_tokens
    429 with Retry-After (seconds) when a limit is exceeded
    every answer carries x-ratelimit-remaining-requests / -tokens
GET /stats  {"served": .., "refused": .., "tokens": .., "seconds": ..,
             "rpm": .., "tpm": .., "window": .., "concurrency": ..,
             "max_in_flight": .., "refused_in_flight": ..}

Limits are requests and tokens per window (a minute at a provider, scaled
here to --window seconds so a run takes seconds).  Each is a token bucket
holding one window's worth, refilled continuously: requests are counted on
arrival, tokens when the answer's usage is known, as providers bill them.
A request that finds either bucket short is refused with 429 and the time
until it would fit.  With --concurrency N, as providers cap concurrent
requests, one that arrives while N are being answered is refused with 429
too (counted in refused_in_flight).  With --retry-after S, a rate-limit 429
says Retry-After S whatever the buckets hold, as a provider that answers a
fixed hint does.
"""
import argparse
import asyncio
import json
import random
import time

from aiohttp import web


class Bucket:
    """One of the provider's own limits: `limit` per `window` seconds."""

    def __init__(self, limit, window):
        self.capacity = float(limit)
        self.rate = limit / window
        self.level = float(limit)
        self.stamp = time.monotonic()

    def refill(self):
        now = time.monotonic()
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now
        return self.level

    def wait_for(self, amount):
        """Seconds until `amount` fits (0 if it does now)."""
        return max(0.0, (amount - self.refill()) / self.rate)


def make_app(args):
    requests = Bucket(args.rpm, args.window)
    tokens = Bucket(args.tpm, args.window)
    stats = {"served": 0, "refused": 0, "tokens": 0, "started": time.monotonic(),
             "in_flight": 0, "max_in_flight": 0, "refused_in_flight": 0}
    rng = random.Random(args.seed)

    def headers():
        return {
            "x-ratelimit-remaining-requests": str(int(requests.refill())),
            "x-ratelimit-remaining-tokens": str(int(tokens.refill())),
        }

    async def complete(request):
        body = await request.json()
        prompt = int(body.get("prompt_tokens", 0))
        max_tokens = int(body.get("max_tokens", 0))
        if args.concurrency and stats["in_flight"] >= args.concurrency:
            stats["refused"] += 1
            stats["refused_in_flight"] += 1
            return web.json_response(
                {"error": "too_many_concurrent_requests"}, status=429,
                headers={**headers(), "Retry-After": "1"})
        wait = max(requests.wait_for(1), tokens.wait_for(1))
        if wait > 0:
            stats["refused"] += 1
            if args.retry_after is not None:
                wait = args.retry_after
            return web.json_response(
                {"error": "rate_limit_exceeded"}, status=429,
                headers={**headers(), "Retry-After": f"{wait:.3f}"})
        requests.level -= 1
        stats["in_flight"] += 1
        stats["max_in_flight"] = max(stats["max_in_flight"], stats["in_flight"])
        try:
            await asyncio.sleep(args.latency)
        finally:
            stats["in_flight"] -= 1
        used = prompt + rng.randint(max_tokens // 2, max_tokens)
        tokens.refill()
        tokens.level -= used          # billed as used; may go below zero
        stats["served"] += 1
        stats["tokens"] += used
        return web.json_response({"usage": {"total_tokens": used}}, headers=headers())

    async def get_stats(request):
        return web.json_response({
            **{k: v for k, v in stats.items() if k not in ("started", "in_flight")},
            "seconds": time.monotonic() - stats["started"],
            "rpm": args.rpm, "tpm": args.tpm, "window": args.window,
            "concurrency": args.concurrency})

    async def reset(request):
        stats.update(served=0, refused=0, tokens=0, started=time.monotonic(),
                     max_in_flight=0, refused_in_flight=0)
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/v1/complete", complete)
    app.router.add_get("/stats", get_stats)
    app.router.add_post("/reset", reset)
    return app


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8400)
    parser.add_argument("--rpm", type=float, default=20, help="requests per window")
    parser.add_argument("--tpm", type=float, default=20000, help="tokens per window")
    parser.add_argument("--window", type=float, default=1.0, help="seconds a provider's minute lasts")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds an answer takes")
    parser.add_argument("--concurrency", type=int, default=0,
                        help="most requests answered at once (0: no cap)")
    parser.add_argument("--retry-after", type=float, default=None,
                        help="seconds a rate-limit 429's Retry-After says "
                             "(default: until the request would fit)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    web.run_app(make_app(args), host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
