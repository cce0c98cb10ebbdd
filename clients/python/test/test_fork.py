"""A limiter made before a fork (Celery's prefork, multiprocessing) opens
its own connection in each child, and the parent's keeps working."""
from __future__ import annotations

import asyncio
import multiprocessing as mp
import os

import asyncpg
import psycopg_pool
import pytest

import tokenbucket
from conftest import conninfo, make_bucket, stats, url


def _child(lim, bucket, out, go):
    try:
        granted = lim.try_(bucket).granted
        with lim.connection() as conn:
            cur = conn.cursor()
            cur.execute("SELECT pg_backend_pid()")
            pid = cur.fetchone()[0]
        out.put((os.getpid(), pid, granted))
        go.wait(20)
    except Exception as exc:                      # reported, not lost in the child
        out.put((os.getpid(), None, repr(exc)))


def _fork_children(admin, app, target, lim, bucket, parent_backend) -> set[int]:
    """Three children forked with lim, each granted on a backend of its own,
    seen on the server at once beside the parent's; the parent's session
    outlives them.  Their backends."""
    ctx = mp.get_context("fork")
    out, go = ctx.Queue(), ctx.Event()
    children = [ctx.Process(target=target, args=(lim, bucket, out, go)) for _ in range(3)]
    for c in children:
        c.start()
    seen = [out.get(timeout=20) for _ in children]
    assert all(g is True for _, _, g in seen), seen
    child_backends = {b for _, b, _ in seen}
    assert len(child_backends) == 3 and parent_backend not in child_backends
    on_server = {r[0] for r in admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,))}
    assert child_backends | {parent_backend} <= on_server
    go.set()
    for c in children:
        c.join(20)
        assert c.exitcode == 0
    # the children's exit did not end the parent's session
    assert admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                         (parent_backend,)).fetchone()[0] == 1
    return child_backends


@pytest.mark.parametrize("kind", ["psycopg-dsn", "psycopg2-dsn", "psycopg-pool"])
def test_children_use_their_own_connections(admin, name, kind):
    make_bucket(admin, name, 100, 1)
    app = f"tb-fork-{name}{kind}"
    if kind == "psycopg-pool":
        pool = psycopg_pool.ConnectionPool(conninfo(application_name=app), min_size=1,
                                           max_size=2)
        lim = tokenbucket.Limiter(pool)
    else:
        lim = tokenbucket.Limiter(conninfo(application_name=app), driver=kind.split("-")[0])
    assert lim.try_(name).granted                 # the parent's connection is open
    with lim.connection() as conn:
        cur = conn.cursor()
        cur.execute("SELECT pg_backend_pid()")
        parent_backend = cur.fetchone()[0]
    _fork_children(admin, app, _child, lim, name, parent_backend)
    assert lim.try_(name).granted
    lim.close()
    if kind == "psycopg-pool":
        pool.close()


def test_a_given_connection_is_refused_in_a_child(admin, name):
    import psycopg
    make_bucket(admin, name, 100, 1)
    conn = psycopg.connect(conninfo(), autocommit=True)
    lim = tokenbucket.Limiter(conn)
    assert lim.try_(name).granted
    ctx = mp.get_context("fork")
    out, go = ctx.Queue(), ctx.Event()
    go.set()
    p = ctx.Process(target=_child, args=(lim, name, out, go))
    p.start()
    _, backend, error = out.get(timeout=20)
    p.join(20)
    assert backend is None and "ForkedConnection" in error
    assert lim.try_(name).granted                 # the parent's is untouched
    conn.close()


async def _achild_main(lim, bucket, out, go):
    granted = (await lim.try_(bucket)).granted
    async with lim.connection() as conn:
        pid = await _backend_pid(conn)
    out.put((os.getpid(), pid, granted))
    go.wait(20)                       # holding its connection, as the parent counts
    await lim.close()


def _achild(lim, bucket, out, go):
    """A forked child running its own event loop with the parent's AsyncLimiter."""
    try:
        asyncio.run(_achild_main(lim, bucket, out, go))
    except Exception as exc:
        out.put((os.getpid(), None, repr(exc)))


async def _backend_pid(conn) -> int:
    if hasattr(conn, "fetchval"):                 # asyncpg
        return await conn.fetchval("SELECT pg_backend_pid()")
    cur = await conn.execute("SELECT pg_backend_pid()")
    return (await cur.fetchone())[0]


@pytest.mark.parametrize("kind", ["asyncpg-dsn", "psycopg-dsn", "asyncpg-pool", "psycopg-pool"])
async def test_async_children_use_their_own_connections(admin, name, kind):
    """An AsyncLimiter made and used in the parent's event loop, then
    multiprocessing's fork: each child's calls run on a connection of its
    own (a backend of its own on the server), the parent's session outlives
    the children, and the parent's limiter still works after."""
    make_bucket(admin, name, 100, 1)
    app = f"tb-afork-{name}{kind}"
    driver, source = kind.split("-")
    pool = None
    if source == "dsn":
        lim = tokenbucket.AsyncLimiter(conninfo(application_name=app), driver=driver)
    elif driver == "asyncpg":
        pool = await asyncpg.create_pool(url(app=app), min_size=1, max_size=2)
        lim = tokenbucket.AsyncLimiter(pool)
    else:
        pool = psycopg_pool.AsyncConnectionPool(conninfo(application_name=app), min_size=1,
                                                max_size=2)
        await pool.open()
        lim = tokenbucket.AsyncLimiter(pool)
    assert (await lim.try_(name)).granted
    async with lim.connection() as conn:
        parent_backend = await _backend_pid(conn)
    child_backends = _fork_children(admin, app, _achild, lim, name, parent_backend)
    assert (await lim.try_(name)).granted
    async with lim.connection() as conn:
        pid = await _backend_pid(conn)
    # its own connection (a pool may lend either of its two), none a child's
    assert pid == parent_backend if source == "dsn" else pid not in child_backends
    assert stats(admin, name)["granted"] == 2 + 3
    await lim.close()
    if pool is not None:
        await pool.close()


async def test_a_given_async_connection_is_refused_in_a_child(admin, name):
    make_bucket(admin, name, 100, 1)
    conn = await asyncpg.connect(url())
    lim = tokenbucket.AsyncLimiter(conn)
    assert (await lim.try_(name)).granted
    ctx = mp.get_context("fork")
    out, go = ctx.Queue(), ctx.Event()
    go.set()
    p = ctx.Process(target=_achild, args=(lim, name, out, go))
    p.start()
    _, backend, error = out.get(timeout=20)
    p.join(20)
    assert backend is None and "ForkedConnection" in error
    assert (await lim.try_(name)).granted          # the parent's is untouched
    await conn.close()
