#!/usr/bin/python3
"""bench/python.py: the Python client's own cost per call, the python rows
of make bench (bench/run.sh runs it with the server up; it can be run alone
against any server where the database holds the extension and the buckets
below).

For each driver (psycopg 3, psycopg2, asyncpg, psycopg 3 async), each way
of giving the limiter its connection (a connection, or a DSN: its own
pool, of one connection here) and each bucket (memory: py:memory, table:
py:table; both of capacity and rate 1e9, so that every call is granted),
the same call two ways on the same connection:

  bare    the statement the client sends for try_(name), taken from the
          client itself, through the driver alone (psycopg 3
          conn.execute(...).fetchall(), psycopg2 a cursor's execute and
          fetchall, asyncpg conn.fetch)
  client  limiter.try_(name), a Decision

taking turns call by call (one of each, the order swapped every pair), so
that the machine's slow and fast spells fall on both alike, in ROUNDS
rounds.  A round's time per call for each is the median of its calls (on
this shared VM a single call is now and then preempted for milliseconds,
which a mean picks up at random on either side), and its overhead is
client / bare - 1.  Prints, and writes to CSV, per row: the medians over
the rounds of the bare and the client call, the overhead (median, least
and most over the rounds), and the median over the rounds of the overhead
from the rounds' means.

  python.py [--seconds S] [--rounds R] [--csv FILE] [--only DRIVERS] [--buckets memory,table] DSN
"""
from __future__ import annotations

import argparse
import asyncio
import csv
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "clients", "python"))
import tokenbucket  # noqa: E402
from tokenbucket import _core, _drivers  # noqa: E402

BUCKETS = {"memory": "py:memory", "table": "py:table"}
pc = time.perf_counter_ns


def summary(rounds: list[tuple[list[int], list[int]]]) -> dict[str, float]:
    """The row's figures from each round's per-call times (bare, client)."""
    bare = [statistics.median(b) for b, _ in rounds]
    client = [statistics.median(c) for _, c in rounds]
    over = [c / b - 1 for b, c in zip(bare, client)]
    means = [statistics.fmean(c) / statistics.fmean(b) - 1 for b, c in rounds]
    return {"bare_us": statistics.median(bare) / 1000,
            "client_us": statistics.median(client) / 1000,
            "overhead_us": statistics.median(c - b for b, c in zip(bare, client)) / 1000,
            "overhead": statistics.median(over), "overhead_min": min(over),
            "overhead_max": max(over), "overhead_of_means": statistics.median(means)}


def calls_per_round(pair_ns: float, seconds: float, rounds: int) -> int:
    return max(50, int(seconds * 1e9 / rounds / pair_ns))


def measure(bare, client, seconds: float, rounds: int) -> tuple[int, dict[str, float]]:
    for _ in range(300):                       # warm: prepared statements, caches
        bare()
        client()
    t0 = pc()
    for _ in range(200):
        bare()
        client()
    n = calls_per_round((pc() - t0) / 200, seconds, rounds)
    out = []
    for _ in range(rounds):
        tb, tc = [], []
        for i in range(n):
            if i & 1:
                t0 = pc(); bare(); t1 = pc(); client(); t2 = pc()   # noqa: E702
                tb.append(t1 - t0); tc.append(t2 - t1)              # noqa: E702
            else:
                t0 = pc(); client(); t1 = pc(); bare(); t2 = pc()   # noqa: E702
                tc.append(t1 - t0); tb.append(t2 - t1)              # noqa: E702
        out.append((tb, tc))
    return n, summary(out)


async def ameasure(bare, client, seconds: float, rounds: int) -> tuple[int, dict[str, float]]:
    for _ in range(300):
        await bare()
        await client()
    t0 = pc()
    for _ in range(200):
        await bare()
        await client()
    n = calls_per_round((pc() - t0) / 200, seconds, rounds)
    out = []
    for _ in range(rounds):
        tb, tc = [], []
        for i in range(n):
            if i & 1:
                t0 = pc(); await bare(); t1 = pc(); await client(); t2 = pc()   # noqa: E702
                tb.append(t1 - t0); tc.append(t2 - t1)                          # noqa: E702
            else:
                t0 = pc(); await client(); t1 = pc(); await bare(); t2 = pc()   # noqa: E702
                tc.append(t1 - t0); tb.append(t2 - t1)                          # noqa: E702
        out.append((tb, tc))
    return n, summary(out)


def sync_row(driver: str, source: str, bucket: str, dsn: str, seconds: float,
             rounds: int) -> tuple[int, dict[str, float]]:
    name = BUCKETS[bucket]
    if source == "connection":
        conn = _drivers.sync_connect(driver, dsn, {})
        limiter = tokenbucket.Limiter(conn)
        limiter.try_(name)
    else:
        limiter = tokenbucket.Limiter(dsn, driver=driver, pool_size=1)
        limiter.try_(name)
        conn = limiter._source.idle[0][0]   # the pool's one connection, idle between calls
    sql, params, _ = _core.try_call(limiter._drive(limiter._statements()), {name: 1.0}, None)
    if driver == "psycopg2":
        def bare():
            with conn.cursor() as cur:
                cur.execute(sql, params)
                return cur.fetchall()
    else:
        def bare():
            return conn.execute(sql, params).fetchall()

    def client():
        return limiter.try_(name)
    assert bare()[0][0] and client().granted
    try:
        return measure(bare, client, seconds, rounds)
    finally:
        limiter.close()
        conn.close()


async def async_row(driver: str, source: str, bucket: str, dsn: str, seconds: float,
                    rounds: int) -> tuple[int, dict[str, float]]:
    name = BUCKETS[bucket]
    if source == "connection":
        conn = await _drivers.async_connect(driver, dsn, {})
        limiter = tokenbucket.AsyncLimiter(conn)
        await limiter.try_(name)
    else:
        limiter = tokenbucket.AsyncLimiter(dsn, driver=driver, pool_size=1)
        await limiter.try_(name)
        conn = limiter._source.idle[0][0]
    sql, params, _ = _core.try_call(await limiter._drive(limiter._statements()), {name: 1.0}, None)
    if driver == "asyncpg":
        async def bare():
            return await conn.fetch(sql, *params)
    else:
        async def bare():
            return await (await conn.execute(sql, params)).fetchall()

    async def client():
        return await limiter.try_(name)
    assert (await bare())[0][0] and (await client()).granted
    try:
        return await ameasure(bare, client, seconds, rounds)
    finally:
        await limiter.close()
        await _drivers.async_close(driver, conn)


FIELDS = ["driver", "source", "bucket", "rounds", "calls_per_round", "bare_us", "client_us",
          "overhead_us", "overhead", "overhead_min", "overhead_max", "overhead_of_means"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="per row")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--csv")
    ap.add_argument("--only", help="drivers to run, comma-separated")
    ap.add_argument("--buckets", default="memory,table", help="memory, table or both")
    ap.add_argument("dsn")
    args = ap.parse_args()
    drivers = ["psycopg", "psycopg2", "asyncpg", "psycopg-async"]
    if args.only:
        drivers = [d for d in drivers if d in args.only.split(",")]
    out = open(args.csv, "w", newline="") if args.csv else None
    writer = csv.DictWriter(out, FIELDS) if out else None
    if writer:
        writer.writeheader()
    print(f"{'driver':14} {'source':10} {'bucket':6} {'bare us':>8} {'client us':>9} "
          f"{'+us':>6} {'overhead':>8} {'least':>7} {'most':>7} {'of means':>8}")
    for driver in drivers:
        for source in ("connection", "dsn"):
            for bucket in args.buckets.split(","):
                if driver in ("psycopg", "psycopg2"):
                    n, s = sync_row(driver, source, bucket, args.dsn, args.seconds, args.rounds)
                else:
                    n, s = asyncio.run(async_row(driver.removesuffix("-async"), source, bucket,
                                                 args.dsn, args.seconds, args.rounds))
                print(f"{driver:14} {source:10} {bucket:6} {s['bare_us']:8.1f} "
                      f"{s['client_us']:9.1f} {s['overhead_us']:6.1f} {s['overhead']:8.3f} "
                      f"{s['overhead_min']:7.3f} {s['overhead_max']:7.3f} "
                      f"{s['overhead_of_means']:8.3f}", flush=True)
                if writer:
                    writer.writerow({"driver": driver, "source": source, "bucket": bucket,
                                     "rounds": args.rounds, "calls_per_round": n,
                                     **{k: round(v, 4) for k, v in s.items()}})
                    out.flush()
    if out:
        out.close()


if __name__ == "__main__":
    main()
