"""Against the stand-in provider (examples/provider): the limits hold with
200 concurrent requests, and syncing from its headers keeps a client from
its 429s while another client spends from the same key."""
from __future__ import annotations

import asyncio
import json
import threading
import urllib.request

import aiohttp
import httpx
import pytest

import tokenbucket
from tokenbucket.aiohttp import LimitedSession
from tokenbucket.httpx import AsyncLimitedTransport, LimitedTransport, openai_usage
from conftest import conninfo, make_bucket, stats, url


def provider_stats(base: str) -> dict:
    with urllib.request.urlopen(base + "/stats") as answer:
        return json.load(answer)


async def test_aiohttp_200_concurrent(admin, name, provider):
    base = provider(rpm=100, tpm=1e9, window=1, latency=0.02)
    make_bucket(admin, name, 10, 80)                   # under the provider's 100 a second
    lim = tokenbucket.AsyncLimiter(url(), headers=tokenbucket.header_map(requests=name))
    t0 = admin.execute("SELECT clock_timestamp()").fetchone()[0]
    statuses = []

    async with LimitedSession(lim, {name: 1}, timeout=60) as session:
        async def one():
            async with session.post(base + "/v1/complete",
                                    json={"prompt_tokens": 1, "max_tokens": 2}) as r:
                statuses.append(r.status)
        await asyncio.gather(*(one() for _ in range(200)))
    t1 = admin.execute("SELECT clock_timestamp()").fetchone()[0]
    elapsed = (t1 - t0).total_seconds()
    p = provider_stats(base)
    s = stats(admin, name)
    assert statuses.count(200) == 200 and p["refused"] == 0 and p["served"] == 200
    assert s["granted"] == 200 and s["granted"] <= 10 + 80 * elapsed
    assert elapsed < 10 * (190 / 80)
    print(f"# 200 requests in {elapsed:.2f} s, {s['denied']} refused tries, "
          f"provider served {p['served']} refused {p['refused']}")
    await lim.close()


async def _second_client(base: str, burst_in: asyncio.Event, stop: asyncio.Event) -> None:
    """Another client of the same key: a burst of 16, then 5 a second."""
    async with aiohttp.ClientSession() as s:
        async def post():
            async with s.post(base + "/v1/complete", json={"prompt_tokens": 1}) as r:
                await r.read()
        await asyncio.gather(*(post() for _ in range(16)))
        burst_in.set()
        while not stop.is_set():
            await post()
            await asyncio.sleep(0.2)


async def _run(admin, name: str, base: str, sync: bool) -> int:
    bucket = name + ("sync" if sync else "pause")
    make_bucket(admin, bucket, 10, 10)                 # half the provider's 20 a second
    mapping = tokenbucket.header_map(requests=bucket) if sync else {}
    lim = tokenbucket.AsyncLimiter(url())
    stop, burst_in = asyncio.Event(), asyncio.Event()
    other = asyncio.create_task(_second_client(base, burst_in, stop))
    await burst_in.wait()
    refused = 0
    async with httpx.AsyncClient(transport=AsyncLimitedTransport(
            lim, {bucket: 1}, headers=mapping)) as client:
        async def worker():
            nonlocal refused
            loop = asyncio.get_running_loop()
            end = loop.time() + 2.5
            while loop.time() < end:
                r = await client.post(base + "/v1/complete", json={"prompt_tokens": 1})
                refused += r.status_code == 429
        await asyncio.gather(worker(), worker())
    stop.set()
    await other
    await lim.close()
    return refused


async def test_sync_from_headers_avoids_429s(admin, name, provider):
    pause_only = await _run(admin, name, provider(rpm=20, tpm=1e9, window=1, latency=0.02),
                            sync=False)
    synced = await _run(admin, name, provider(rpm=20, tpm=1e9, window=1, latency=0.02),
                        sync=True)
    print(f"# our 429s with pause only: {pause_only}; syncing from headers: {synced}")
    # the figure that matters is synced, exactly.  pause_only shows that the
    # scenario overdraws the provider without syncing, by a margin that
    # depends on how fast this machine sends its first burst (a few on a
    # quiet machine; none on one too busy to send its burst before the
    # provider refills): shown, not checked, as stress.sh does with a
    # rate it cannot reach
    if pause_only == 0:
        print("# this run sent too slowly to overdraw the provider even without syncing")
    assert synced == 0


def test_httpx_transport_settles_usage(admin, name, provider):
    base = provider(rpm=20, tpm=3000, window=1, latency=0.02)
    rpm, tpm = name + "rpm", name + "tpm"
    make_bucket(admin, rpm, 5, 18)
    make_bucket(admin, tpm, 1500, 2700)
    lim = tokenbucket.Limiter(conninfo(),
                              headers=tokenbucket.header_map(requests=rpm, tokens=tpm))
    transport = LimitedTransport(lim, {rpm: 1, tpm: 300}, usage=openai_usage)
    used = []
    with httpx.Client(transport=transport) as client:
        def thread():
            for _ in range(5):
                r = client.post(base + "/v1/complete",
                                json={"prompt_tokens": 100, "max_tokens": 200})
                used.append(r.status_code)
        threads = [threading.Thread(target=thread) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    p = provider_stats(base)
    assert used == [200] * 20 and p["refused"] == 0
    # every estimate settled with its real usage: the tokens charged are the
    # provider's count (granted 300 each, the difference refunded)
    s = stats(admin, tpm)
    assert s["granted_tokens"] - s["refunded_tokens"] <= p["tokens"] + 1e-6
    lim.close()
