"""A reservation is settled exactly once: by settle, by the refund of an
exception or a cancellation, or by keeping what was reserved; never twice.
Counted by the server: the bucket's tokens and tb_stats' refunded_tokens."""
from __future__ import annotations

import asyncio

import pytest

import tokenbucket
from conftest import conninfo, make_bucket, stats, tokens, url


@pytest.fixture
def buckets(admin, name):
    rpm, tpm = name + "rpm", name + "tpm"
    make_bucket(admin, rpm, 100, 1, 36000)          # no refill to speak of
    make_bucket(admin, tpm, 10000, 1, 36000)
    return rpm, tpm


def test_exception_refunds_once(admin, buckets):
    rpm, tpm = buckets
    lim = tokenbucket.Limiter(conninfo())
    with pytest.raises(ZeroDivisionError):
        with lim.reserve({rpm: 1, tpm: 1500}, timeout=5) as r:
            assert abs(tokens(admin, tpm) - 8500) < 0.1
            1 / 0
    assert r.settled
    assert abs(tokens(admin, rpm) - 100) < 0.1 and abs(tokens(admin, tpm) - 10000) < 0.1
    assert stats(admin, tpm)["refunded_tokens"] == 1500
    with pytest.raises(tokenbucket.AlreadySettled):
        r.settle(10)
    lim.close()


def test_settle_once(admin, buckets):
    rpm, tpm = buckets
    lim = tokenbucket.Limiter(conninfo())
    with pytest.raises(RuntimeError, match="after"):
        with lim.reserve({rpm: 1, tpm: 1500}, timeout=5) as r:
            r.settle(used=1130)                       # the last bucket named: the tokens
            with pytest.raises(tokenbucket.AlreadySettled):
                r.settle(used=1000)
            with pytest.raises(tokenbucket.AlreadySettled):
                r.refund()
            raise RuntimeError("failed after settling")   # settled: nothing refunded
    assert abs(tokens(admin, tpm) - (10000 - 1130)) < 0.1
    assert abs(tokens(admin, rpm) - 99) < 0.1
    # leaving normally without settling keeps the reserve charged
    with lim.reserve({rpm: 1, tpm: 500}) as r:
        pass
    assert r.settled and abs(tokens(admin, tpm) - (10000 - 1630)) < 0.1
    # more than reserved goes into the bucket as debt
    with lim.reserve({tpm: 100}) as r:
        r.settle({tpm: 9000})
    assert abs(tokens(admin, tpm) + 630) < 0.1
    with pytest.raises(ValueError):
        with lim.reserve({rpm: 1}) as r:
            r.settle({"elsewhere": 1})
    lim.close()


async def test_cancellation_refunds_once(admin, buckets):
    rpm, tpm = buckets
    lim = tokenbucket.AsyncLimiter(url())
    inside = asyncio.Event()

    async def call():
        async with lim.reserve({rpm: 1, tpm: 2000}, timeout=5):
            inside.set()
            await asyncio.sleep(30)

    task = asyncio.create_task(call())
    await inside.wait()
    assert abs(tokens(admin, tpm) - 8000) < 0.1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert abs(tokens(admin, tpm) - 10000) < 0.1 and abs(tokens(admin, rpm) - 100) < 0.1
    assert stats(admin, tpm)["refunded_tokens"] == 2000
    # a timeout (asyncio.timeout cancels) refunds too
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.2):
            async with lim.reserve({tpm: 300}) as r:
                await asyncio.sleep(5)
    assert r.settled and abs(tokens(admin, tpm) - 10000) < 0.1
    # awaited form, settled by hand
    r = await lim.reserve({tpm: 100})
    await r.settle(40)
    with pytest.raises(tokenbucket.AlreadySettled):
        await r.settle(40)
    assert abs(tokens(admin, tpm) - 9960) < 0.1
    assert stats(admin, tpm)["refunded_tokens"] == 2360
    await lim.close()
