"""A reservation is settled exactly once: by settle, by the refund of an
exception or a cancellation, or by keeping what was reserved; never twice.
Counted by the server: the bucket's tokens and tb_stats' refunded_tokens."""
from __future__ import annotations

import asyncio
import random
import time

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


async def test_cancelled_while_its_grant_answers(admin, buckets, monkeypatch):
    """A cancellation that comes once the server granted, before the answer
    reached the task (a busy event loop, a slow network): the grant is
    refunded, not lost with the reservation the task never saw.  And one
    that comes while a settlement runs: it lands all the same."""
    rpm, tpm = buckets
    lim = tokenbucket.AsyncLimiter(url())
    assert (await lim.peek(tpm)).granted            # the SQL known, a connection open
    real = tokenbucket._drivers.async_run
    answered = asyncio.Event()

    async def slow(kind, conn, sql, params):
        rows = await real(kind, conn, sql, params)
        if "tb_try" in sql or "tb_settle" in sql:
            answered.set()
            await asyncio.sleep(0.3)
        return rows
    monkeypatch.setattr(tokenbucket._drivers, "async_run", slow)

    async def call():
        async with lim.reserve({rpm: 1, tpm: 700}, timeout=5):
            raise AssertionError("the block ran")
    task = asyncio.create_task(call())
    await answered.wait()
    assert abs(tokens(admin, tpm) - 9300) < 0.1     # taken on the server
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert abs(tokens(admin, tpm) - 10000) < 0.1 and abs(tokens(admin, rpm) - 100) < 0.1
    assert stats(admin, tpm)["refunded_tokens"] == 700

    answered.clear()
    monkeypatch.setattr(tokenbucket._drivers, "async_run", real)
    r = await lim.reserve({tpm: 500})
    monkeypatch.setattr(tokenbucket._drivers, "async_run", slow)
    task = asyncio.create_task(r.settle(200))
    await answered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert r.settled and abs(tokens(admin, tpm) - 9800) < 0.1
    monkeypatch.setattr(tokenbucket._drivers, "async_run", real)
    await lim.close()


async def test_cancelled_anywhere_settles_once(admin, name):
    """200 reservations, each of a bucket of its own, each cancelled at a
    random moment: waiting for a connection, while its grant runs on the
    server, inside its block, while its settlement runs.  Each bucket ends
    as its task's last step says, counted by the server: full again when the
    task never had its reservation or left the block by the cancellation
    (refunded), and charged the 40 settled once settle was called; never
    taken by a grant its task did not see, nor refunded twice."""
    n = 200
    buckets = [f"{name}{i}" for i in range(n)]
    admin.execute("SELECT tb_create(b, 1000, 1, make_interval(secs => 36000)) "
                  "FROM unnest(%s::text[]) AS b", (buckets,))
    lim = tokenbucket.AsyncLimiter(url(), pool_size=4)
    step: dict[str, str] = {}

    async def one(bucket):
        step[bucket] = "reserving"
        async with lim.reserve({bucket: 100}, timeout=30) as r:
            step[bucket] = "inside"
            await asyncio.sleep(random.uniform(0, 0.02))
            step[bucket] = "settling"
            await r.settle(40)
            step[bucket] = "settled"

    started = time.monotonic()
    tasks = {b: asyncio.create_task(one(b)) for b in buckets}
    loop = asyncio.get_running_loop()
    rng = random.Random(46)
    at_cancel: dict[str, str] = {}

    def cancel(bucket):
        at_cancel[bucket] = step.get(bucket, "not started")
        tasks[bucket].cancel()
    for b in buckets:
        loop.call_later(rng.uniform(0, 0.4), cancel, b)
    await asyncio.gather(*tasks.values(), return_exceptions=True)
    await asyncio.sleep(0.5)                        # let nothing be still on its way
    rows = admin.execute(
        "SELECT s.name, s.granted, s.refunded_tokens, p.remaining FROM tb_stats s, "
        "LATERAL tb_peek(s.name, 0) p WHERE s.name = ANY(%s)", (buckets,)).fetchall()
    assert len(rows) == n
    want = {"not started": 1000, "reserving": 1000, "inside": 1000, "settling": 960,
            "settled": 960}
    wrong = [(b, step.get(b), at_cancel.get(b), granted, refunded, round(left, 1))
             for b, granted, refunded, left in rows
             if abs(left - want[step.get(b, "not started")]) > 1 or granted > 1 or refunded > 100]
    print(f"# steps at the cancel: { {s: list(at_cancel.values()).count(s) for s in want} }, "
          f"at the end: { {s: list(step.values()).count(s) for s in want} }, "
          f"{time.monotonic() - started:.2f} s")
    assert not wrong, (f"{len(wrong)} wrong, by step: "
                       f"{ {s: [w[1] for w in wrong].count(s) for s in want} }", wrong[:5])
    await lim.close()
