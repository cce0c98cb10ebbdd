"""The core calls on every driver and every kind of source, transactions,
schemas, set-up, and the client-side wait."""
from __future__ import annotations

import asyncio
import math
import time
from datetime import timedelta

import psycopg
import psycopg2
import psycopg_pool
import asyncpg
import pytest

import tokenbucket
from conftest import DB, backends, conninfo, make_bucket, stats, tokens, url

SYNC = ["psycopg-conn", "psycopg-pool", "psycopg-dsn", "psycopg2-conn", "psycopg2-dsn"]
ASYNC = ["psycopg-conn", "psycopg-pool", "psycopg-dsn", "asyncpg-conn", "asyncpg-pool",
         "asyncpg-dsn"]


@pytest.fixture(params=SYNC)
def limiter(request):
    kind = request.param
    closers = []
    if kind == "psycopg-conn":
        conn = psycopg.connect(conninfo())        # not autocommit: the client sees to it
        closers.append(conn.close)
        lim = tokenbucket.Limiter(conn)
    elif kind == "psycopg-pool":
        pool = psycopg_pool.ConnectionPool(conninfo(), min_size=1, max_size=4)
        closers.append(pool.close)
        lim = tokenbucket.Limiter(pool)
    elif kind == "psycopg2-conn":
        conn = psycopg2.connect(conninfo())
        closers.append(conn.close)
        lim = tokenbucket.Limiter(conn)
    else:
        lim = tokenbucket.Limiter(conninfo(), driver=kind.split("-")[0])
        closers.append(lim.close)
    yield lim
    for close in closers:
        close()


@pytest.fixture(params=ASYNC)
async def alimiter(request):
    kind = request.param
    closers = []
    if kind == "psycopg-conn":
        conn = await psycopg.AsyncConnection.connect(conninfo())
        closers.append(conn.close)
        lim = tokenbucket.AsyncLimiter(conn)
    elif kind == "psycopg-pool":
        pool = psycopg_pool.AsyncConnectionPool(conninfo(), min_size=1, max_size=4)
        await pool.open()
        closers.append(pool.close)
        lim = tokenbucket.AsyncLimiter(pool)
    elif kind == "asyncpg-conn":
        conn = await asyncpg.connect(url())
        closers.append(conn.close)
        lim = tokenbucket.AsyncLimiter(conn)
    elif kind == "asyncpg-pool":
        pool = await asyncpg.create_pool(url(), min_size=1, max_size=4)
        closers.append(pool.close)
        lim = tokenbucket.AsyncLimiter(pool)
    else:
        lim = tokenbucket.AsyncLimiter(conninfo(), driver=kind.split("-")[0])
        closers.append(lim.close)
    yield lim
    for close in closers:
        await close()


def test_calls_sync(limiter, admin, name):
    a, b = name + "a", name + "b"
    make_bucket(admin, a, 10, 1, 3600)
    make_bucket(admin, b, 1000, 1, 3600)
    d = limiter.try_(a, 4)
    assert d.granted and d.retry_after == 0 and abs(d.remaining - 6) < 0.01
    assert d.denied_by is None
    d = limiter.try_({a: 2, b: 100})
    assert d.granted and [p.name for p in d.buckets] == [a, b]
    assert abs(d.buckets[1].remaining - 900) < 0.01 and abs(d.remaining - 4) < 0.01
    d = limiter.try_({a: 5, b: 1})                     # a holds 4: neither is taken
    assert not d.granted and 3000 < d.retry_after < 3700 and d.denied_by == a
    assert abs(tokens(admin, b) - 900) < 0.01
    p = limiter.peek([a, b])
    assert p.granted and abs(p.remaining - 3) < 0.01 and abs(tokens(admin, a) - 4) < 0.01
    assert abs(limiter.refund(a, 3) - 7) < 0.01
    assert limiter.settle({b: (100, 40)}) == pytest.approx({b: 960}, abs=0.01)
    assert abs(limiter.sync(b, 500) - 500) < 0.01
    limiter.pause([a, b], timedelta(seconds=30))
    d = limiter.peek(a)
    assert not d.granted and 25 < d.retry_after <= 30.01
    with pytest.raises(TypeError):
        limiter.pause(a, "20")                         # never a string meaning seconds


async def test_calls_async(alimiter, admin, name):
    a, b = name + "a", name + "b"
    make_bucket(admin, a, 10, 1, 3600)
    make_bucket(admin, b, 1000, 1, 3600)
    d = await alimiter.try_(a, 4)
    assert d.granted and abs(d.remaining - 6) < 0.01
    d = await alimiter.try_({a: 5, b: 1}, reserve=0.5)  # 6 - 5 would leave less than 5
    assert not d.granted and abs(tokens(admin, b) - 1000) < 0.01
    assert (await alimiter.peek({a: 1, b: 1})).granted
    assert abs(await alimiter.refund(a, 2) - 8) < 0.01
    assert abs(await alimiter.settle(b, 10, 30) - 980) < 0.01
    assert await alimiter.sync({b: 100}) == pytest.approx({b: 100}, abs=0.01)
    await alimiter.pause(b, 30)
    d = await alimiter.peek(b)
    assert not d.granted and 25 < d.retry_after <= 30.01
    d = await alimiter.acquire(a, 1, timeout=1, wait="server")
    assert d.granted
    await alimiter.ensure_limit(name + "l", 1)
    async with alimiter.lease(name + "l") as lease:
        assert lease is not None
        with pytest.raises(tokenbucket.RateLimited):
            async with tokenbucket.AsyncLimiter(url()).lease(name + "l"):
                pass
    async with alimiter.lease(name + "l"):        # released: free again
        pass


def test_denied_by_names_the_parent(limiter, admin, name):
    user, team = name + "user", name + "team"
    make_bucket(admin, user, 10, 1, 3600)
    make_bucket(admin, team, 10, 1, 3600)
    admin.execute("SELECT tb_set_parent(%s, %s)", (user, team))
    try:
        assert limiter.try_(user, 4).granted
        d = limiter.try_(user, 7)                      # the team holds 6, the user 6
        assert not d.granted and d.denied_by == user and 3000 < d.retry_after < 3700
        admin.execute("SELECT tb_sync(%s, 1)", (team,))
        d = limiter.peek(user, 3)
        assert not d.granted and d.denied_by == team and 7000 < d.retry_after < 7300
        assert abs(tokens(admin, user) - 1) < 0.01    # tb_peek reports the tightest level
    finally:
        admin.execute("SELECT tb_set_parent(%s, NULL)", (user,))


def test_lease_sync(limiter, name):
    assert limiter.ensure_limit(name + "l", 1) == "created"
    with limiter.lease(name + "l", ttl=60) as lease:
        assert lease is not None
        other = tokenbucket.Limiter(conninfo())
        with pytest.raises(tokenbucket.RateLimited):
            with other.lease(name + "l", timeout=0.1):
                pass
    with other.lease(name + "l"):
        pass
    other.close()


def test_never_leaves_a_transaction_open(admin, name):
    """psycopg2's default opens a transaction with the first statement: the
    limiter's grant commits at once, so another session is never held up."""
    make_bucket(admin, name, 10, 1)
    conn = psycopg2.connect(conninfo())
    lim = tokenbucket.Limiter(conn)
    assert lim.try_(name).granted
    assert conn.info.transaction_status == psycopg2.extensions.TRANSACTION_STATUS_IDLE
    assert not conn.autocommit                      # the caller's setting is kept
    started = time.monotonic()
    admin.execute("SET statement_timeout = '5s'")
    assert admin.execute("SELECT tb_acquire(%s)", (name,)).fetchone()[0]
    assert time.monotonic() - started < 1
    # a transaction the caller left open is refused, not joined
    conn.cursor().execute("SELECT 1")
    with pytest.raises(tokenbucket.TransactionInProgress):
        lim.try_(name)
    conn.rollback()
    # on purpose: limiter.on(conn) takes part in the caller's transaction
    before = tokens(admin, name)
    with conn.cursor() as cur:
        cur.execute("SELECT 1")
    assert lim.on(conn).try_(name, 5).granted
    conn.rollback()                                 # and so it is undone
    assert tokens(admin, name) >= before - 0.01
    conn.close()


def test_schema_found_and_quoted(admin):
    """The extension in a schema whose name needs quoting, off the search path."""
    weird = "Rate Limits"
    with psycopg.connect(conninfo("postgres"), autocommit=True) as c:
        c.execute("DROP DATABASE IF EXISTS tb_python2 WITH (FORCE)")
        c.execute("CREATE DATABASE tb_python2")
    with pytest.raises(tokenbucket.TokenBucketError, match="not installed"):
        tokenbucket.Limiter(conninfo("tb_python2")).try_("x")
    with psycopg.connect(conninfo("tb_python2"), autocommit=True) as c:
        c.execute('CREATE SCHEMA "Rate Limits"')
        c.execute('CREATE EXTENSION tokenbucket SCHEMA "Rate Limits"')
    for lim in (tokenbucket.Limiter(conninfo("tb_python2")),
                tokenbucket.Limiter(conninfo("tb_python2"), schema=weird)):
        assert lim.ensure("x", 2, 1) in ("created", "exists", "unchanged")
        assert lim.try_("x").granted
        lim.close()
    lim = tokenbucket.Limiter(conninfo("tb_python2"), schema="public")
    with pytest.raises(tokenbucket.DatabaseError) as e:
        lim.try_("x")
    assert e.value.sqlstate == "42883"               # no such function there
    lim.close()


def test_ensure(admin, name):
    lim = tokenbucket.Limiter(conninfo())
    assert lim.ensure(name, 10, 60, timedelta(minutes=1)) == "created"
    again = lim.ensure(name, 10, 60, timedelta(minutes=1))
    assert again == ("unchanged" if lim._has_ensure else "exists")
    # the fallback before 1.8, whatever the server has
    lim._has_ensure = False
    assert lim.ensure(name + "2", 5, 1) == "created"
    assert lim.ensure(name + "2", 5, 1) == "exists"
    assert lim.ensure_limit(name + "l", 3) == "created"
    assert lim.ensure_limit(name + "l", 3) == "exists"
    row = admin.execute("SELECT capacity, refill_rate FROM tb_status WHERE name = %s",
                        (name,)).fetchone()
    assert row == (10, 1)
    lim.close()


def test_client_wait(admin, name):
    make_bucket(admin, name, 1, 10)                 # a token every 0.1 s
    lim = tokenbucket.Limiter(conninfo())
    assert lim.try_(name).granted
    started = time.monotonic()
    assert lim.acquire(name, timeout=5).granted
    waited = time.monotonic() - started
    assert 0.05 < waited < 1.0
    # a timeout shorter than the wait: refused at once, not after the timeout
    make_bucket(admin, name + "slow", 1, 0.1)       # a token every 10 s
    assert lim.try_(name + "slow").granted
    started = time.monotonic()
    d = lim.acquire(name + "slow", timeout=1)
    assert not d.granted and 5 < d.retry_after <= 10.01
    assert time.monotonic() - started < 0.5
    with pytest.raises(tokenbucket.RateLimited) as e:
        lim.reserve(name + "slow", timeout=1)
    assert 5 < e.value.retry_after <= 10.01
    lim.close()


async def test_client_wait_holds_no_connection(admin, name):
    """50 waiters on a pool of 5: while they sleep the limiter's connections
    are idle and a query of the app's own gets one at once; waiting in the
    server instead holds every one of them."""
    make_bucket(admin, name, 1, 1, 30)              # a token every 30 s
    app = f"tb-wait-{name}"
    lim = tokenbucket.AsyncLimiter(conninfo(application_name=app), pool_size=5)
    assert (await lim.try_(name)).granted
    denied = stats(admin, name)["denied"]
    waiters = [asyncio.create_task(lim.acquire(name, timeout=120)) for _ in range(50)]
    # until every waiter was refused once and sleeps (for about 30 s)
    for _ in range(200):
        await asyncio.sleep(0.05)
        if stats(admin, name)["denied"] - denied >= 50:
            break
    active = [backends(admin, app, "active") for _ in range(10)]
    started = time.monotonic()
    async with lim.connection() as conn:
        await conn.fetch("SELECT 1")
    assert time.monotonic() - started < 0.5
    assert backends(admin, app) <= 5 and max(active) <= 1
    for w in waiters:
        w.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    # in the server: the 5 connections are all taken by waits
    server = [asyncio.create_task(lim.acquire(name, 1, timeout=3, wait="server"))
              for _ in range(10)]
    for _ in range(200):
        await asyncio.sleep(0.05)
        if backends(admin, app, "active") == 5:
            break
    assert backends(admin, app, "active") == 5
    with pytest.raises(asyncio.TimeoutError):
        async with asyncio.timeout(0.3):
            async with lim.connection() as conn:
                await conn.fetch("SELECT 1")
    await asyncio.gather(*server)
    await lim.close()


def test_sync_client_wait_holds_no_connection(admin, name):
    """The same for Limiter: 50 threads sleeping on a pool of 5 hold none of
    its connections (none active or in a transaction on the server, and a
    query of the app's own gets one at once); 5 waits in the server hold
    all 5, active on the server the whole time."""
    import threading
    make_bucket(admin, name, 1, 1, 5)               # a token every 5 s
    app = f"tb-swait-{name}"
    lim = tokenbucket.Limiter(conninfo(application_name=app), pool_size=5)
    assert lim.try_(name).granted
    denied = stats(admin, name)["denied"]
    granted = []
    waiters = [threading.Thread(target=lambda: granted.append(
        lim.acquire(name, timeout=6).granted)) for _ in range(50)]
    for w in waiters:
        w.start()
    for _ in range(200):                            # until each was refused once and sleeps
        time.sleep(0.02)
        if stats(admin, name)["denied"] - denied >= 50:
            break
    assert stats(admin, name)["denied"] - denied == 50
    busy = [backends(admin, app, "active") + backends(admin, app, "idle in transaction")
            for _ in range(10)]
    started = time.monotonic()
    with lim.connection() as conn:
        conn.execute("SELECT 1")
    assert time.monotonic() - started < 0.5
    assert max(busy) == 0 and backends(admin, app) <= 5
    for w in waiters:
        w.join(30)
    assert len(granted) == 50 and granted.count(True) >= 1
    # in the server: 5 waits hold the 5 connections, active all along
    server = [threading.Thread(target=lambda: lim.acquire(name, 1, timeout=2, wait="server"))
              for _ in range(5)]
    for t in server:
        t.start()
    for _ in range(100):
        time.sleep(0.02)
        if backends(admin, app, "active") == 5:
            break
    assert backends(admin, app, "active") == 5
    for t in server:
        t.join(30)
    lim.close()


def test_threads_share_pool_size_connections(admin, name):
    """A Limiter from a DSN opens at most pool_size connections: a thread
    finding them all lent waits for one to come back, and 8 threads making
    calls at once share them."""
    import threading
    from concurrent.futures import ThreadPoolExecutor
    make_bucket(admin, name, 1000, 1)
    app = f"tb-bound-{name}"
    lim = tokenbucket.Limiter(conninfo(application_name=app), pool_size=2)
    done = []
    with lim.connection(), lim.connection():        # both lent
        waiter = threading.Thread(target=lambda: done.append(lim.peek(name).granted))
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive() and not done
        assert backends(admin, app) == 2
    waiter.join(10)
    assert done == [True]
    with ThreadPoolExecutor(8) as pool:
        granted = list(pool.map(lambda _: lim.try_(name).granted, range(400)))
    assert granted.count(True) == 400
    assert backends(admin, app) == 2
    lim.close()


async def test_200_concurrent_hold_the_limit(admin, name):
    """200 concurrent acquires on a bucket of 10 gaining 100 a second: each
    granted once, never more than capacity + rate x elapsed, counted by the
    server (tb_stats) and timed by its clock."""
    make_bucket(admin, name, 10, 100)
    admin.execute("SELECT tb_stats_reset(%s)", (name,))
    lim = tokenbucket.AsyncLimiter(url(), pool_size=10)
    t0 = admin.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()[0]
    done = []

    async def one():
        d = await lim.acquire(name, timeout=30)
        done.append((d.granted, time.monotonic()))

    start = time.monotonic()
    await asyncio.gather(*(one() for _ in range(200)))
    t1 = admin.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()[0]
    elapsed = float(t1 - t0)
    s = stats(admin, name)
    assert all(g for g, _ in done) and s["granted"] == 200
    assert s["granted"] <= 10 + 100 * elapsed
    assert elapsed < 10 * 1.9                        # (200 - 10) / 100 s at the least
    # the grants came at the bucket's rate, not all at the end: the first
    # half well before the last (at the rate, at about half the time)
    times = sorted(t - start for _, t in done)
    assert times[99] < 0.8 * times[-1] + 0.5
    print(f"# 200 grants in {elapsed:.2f} s (at least 1.9), {s['denied']} refused tries")
    await lim.close()


def test_peek_reconnects_and_grants_see_a_dead_connection(admin, name):
    make_bucket(admin, name, 5, 1, 3600)
    app = f"tb-lost-{name}"
    lim = tokenbucket.Limiter(conninfo(application_name=app))
    assert lim.try_(name).granted
    admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                  "WHERE application_name = %s", (app,))
    time.sleep(0.2)
    assert lim.peek(name).granted                    # on a new connection
    admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                  "WHERE application_name = %s", (app,))
    time.sleep(0.2)
    assert lim.try_(name).granted                    # the dead one noticed before sending
    # lost during a grant: unknown, and said so
    make_bucket(admin, name + "empty", 1, 1, 3600)
    assert lim.try_(name + "empty").granted
    import threading
    killer = threading.Timer(0.5, lambda: admin.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name = %s AND state = 'active'", (app,)))
    killer.start()
    with pytest.raises(tokenbucket.OutcomeUnknown):
        lim.acquire(name + "empty", timeout=30, wait="server")
    killer.join()
    assert lim.peek(name).granted
    # a connection the caller gave cannot be replaced
    conn = psycopg.connect(conninfo(application_name=app + "-own"), autocommit=True)
    own = tokenbucket.Limiter(conn)
    assert own.peek(name).granted
    admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                  "WHERE application_name = %s", (app + "-own",))
    time.sleep(0.2)
    with pytest.raises(tokenbucket.ConnectionLost):
        own.peek(name)
    lim.close()


async def test_async_reconnects(admin, name):
    make_bucket(admin, name, 5, 1, 3600)
    app = f"tb-alost-{name}"
    for driver in ("asyncpg", "psycopg"):
        lim = tokenbucket.AsyncLimiter(conninfo(application_name=app), driver=driver)
        assert (await lim.try_(name)).granted
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE application_name = %s", (app,))
        await asyncio.sleep(0.2)
        assert (await lim.peek(name)).granted
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE application_name = %s", (app,))
        await asyncio.sleep(0.2)
        assert (await lim.try_(name)).granted
        await lim.close()
