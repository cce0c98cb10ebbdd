"""AsyncLimiter: the extension's calls from asyncio (psycopg 3 async, asyncpg)."""
from __future__ import annotations

import asyncio
import contextlib
import math
import time
from datetime import datetime
from typing import Any, AsyncIterator, Generator, Mapping

from . import _core, _drivers, headers as _headers
from ._core import Backoff, Costs, Decision, Duration, costs_of, seconds
from ._sync import Reservation, _one
from .errors import (AlreadyExists, ConnectionLost, ForkedConnection, OutcomeUnknown,
                     RateLimited, TokenBucketError, TransactionInProgress, translate)


class _TaskLock:
    """An asyncio lock the task holding it may take again (a call made
    inside lease()'s block on a single connection)."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.owner: asyncio.Task | None = None
        self.depth = 0

    async def take(self) -> None:
        me = asyncio.current_task()
        if self.owner is not me:
            await self.lock.acquire()
            self.owner = me
        self.depth += 1

    def give(self) -> None:
        self.depth -= 1
        if self.depth == 0:
            self.owner = None
            self.lock.release()


# As in _sync: each source lends with take() and has it back with give(),
# borrow() being the two as a context manager; ours says the limiter's own
# statement ran, so that its connection is not asked whether it is fine.

class _ASingle:
    reconnects = False

    def __init__(self, conn: Any, kind: str, join: bool) -> None:
        self.conn, self.kind, self.join = conn, kind, join
        self.lock: _TaskLock | None = None

    async def take(self, fresh: bool = False) -> tuple[Any, bool]:
        """(the connection, whether give sets autocommit back off)."""
        if self.lock is None:
            self.lock = _TaskLock()
        await self.lock.take()
        try:
            conn = self.conn
            if self.join or (self.kind == "psycopg" and conn.autocommit) or \
                    (self.kind == "asyncpg" and not conn.is_in_transaction()):
                return conn, False
            if _drivers.async_in_transaction(self.kind, conn):
                raise TransactionInProgress(
                    "the connection is inside a transaction",
                    hint="Commit it first, or use limiter.on(conn) to take part in it on purpose.")
            await conn.set_autocommit(True)
            return conn, True
        except BaseException:
            self.lock.give()
            raise

    async def give(self, conn: Any, restore: bool, ours: bool = False) -> None:
        assert self.lock is not None
        try:
            if restore and not _drivers.async_closed(self.kind, conn):
                await conn.set_autocommit(False)
        finally:
            self.lock.give()

    @contextlib.asynccontextmanager
    async def borrow(self) -> AsyncIterator[Any]:
        conn, restore = await self.take()
        try:
            yield conn
        finally:
            await self.give(conn, restore)

    async def discard(self, conn: Any) -> None:
        pass

    def forked(self) -> Any:
        raise ForkedConnection(
            "this limiter was given a connection made before the process forked",
            hint="Give the limiter a DSN or a pool, or make it in the child.")

    async def close(self) -> None:
        pass


class _AOwnPool:
    """Connections the limiter opens from a DSN (autocommit; asyncpg's are
    plain connections, with no reset query on each return), each idle one
    kept with a poll object on its socket."""

    reconnects = True

    def __init__(self, dsn: str, kind: str, kwargs: dict[str, Any], max_size: int) -> None:
        self.dsn, self.kind, self.kwargs, self.max_size = dsn, kind, kwargs, max_size
        self.idle: list[tuple[Any, Any]] = []      # (connection, its poller)
        self.slots: asyncio.Semaphore | None = None

    async def take(self, fresh: bool = False) -> tuple[Any, Any]:
        """(a connection, its poller): an idle one that the server has not
        closed meanwhile, else a new one."""
        if self.slots is None:
            self.slots = asyncio.Semaphore(self.max_size)
        await self.slots.acquire()
        try:
            while True:
                if not self.idle:
                    try:
                        conn = await _drivers.async_connect(self.kind, self.dsn, self.kwargs)
                    except (OSError, asyncio.TimeoutError) as exc:
                        raise ConnectionLost(f"could not connect: {exc}") from exc
                    except Exception as exc:
                        raise translate(exc) from exc
                    return conn, _drivers.poller(_drivers.async_fileno(self.kind, conn))
                entry = self.idle.pop()
                conn, poll = entry
                if fresh or poll is None or _drivers.async_closed(self.kind, conn) or \
                        poll.poll(0):
                    await _drivers.async_close(self.kind, conn)
                    continue
                return entry
        except BaseException:
            self.slots.release()
            raise

    async def give(self, conn: Any, poll: Any, ours: bool = False) -> None:
        assert self.slots is not None
        try:
            if not ours and (_drivers.async_closed(self.kind, conn) or
                             _drivers.async_in_transaction(self.kind, conn)):
                await _drivers.async_close(self.kind, conn)
            else:
                self.idle.append((conn, poll))
        finally:
            self.slots.release()

    @contextlib.asynccontextmanager
    async def borrow(self) -> AsyncIterator[Any]:
        conn, poll = await self.take()
        try:
            yield conn
        finally:
            await self.give(conn, poll)

    async def discard(self, conn: Any) -> None:
        await _drivers.async_close(self.kind, conn)

    def forked(self) -> "_AOwnPool":
        for conn, _ in self.idle:
            _drivers.disown(_drivers.async_fileno(self.kind, conn))
            _drivers.ORPHANS.append(conn)
        self.idle = []
        return _AOwnPool(self.dsn, self.kind, self.kwargs, self.max_size)

    async def close(self) -> None:
        idle, self.idle = self.idle, []
        for conn, _ in idle:
            await _drivers.async_close(self.kind, conn)


class _APsycopgPool:
    reconnects = True
    kind = "psycopg"

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    async def take(self, fresh: bool = False) -> tuple[Any, bool]:
        for _ in range(self.pool.max_size + 1):
            conn = await self.pool.getconn()
            if _drivers.socket_readable(conn.fileno()):
                await conn.close()      # the pool replaces a closed connection
                await self.pool.putconn(conn)
                continue
            restore = not conn.autocommit
            if restore:
                try:
                    await conn.set_autocommit(True)
                except BaseException:
                    await self.pool.putconn(conn)
                    raise
            return conn, restore
        raise ConnectionLost("every connection of the pool was closed by the server")

    async def give(self, conn: Any, restore: bool, ours: bool = False) -> None:
        try:
            if restore and not conn.closed:
                await conn.set_autocommit(False)
        finally:
            await self.pool.putconn(conn)

    @contextlib.asynccontextmanager
    async def borrow(self) -> AsyncIterator[Any]:
        conn, restore = await self.take()
        try:
            yield conn
        finally:
            await self.give(conn, restore)

    async def discard(self, conn: Any) -> None:
        await _drivers.async_close("psycopg", conn)

    def forked(self) -> _AOwnPool:
        # a newer psycopg_pool (Debian sid's) keeps None when given no kwargs
        kwargs = {k: v for k, v in (self.pool.kwargs or {}).items() if k != "autocommit"}
        return _AOwnPool(self.pool.conninfo, "psycopg", kwargs, self.pool.max_size)

    async def close(self) -> None:
        pass


class _AsyncpgPool:
    reconnects = True
    kind = "asyncpg"

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    async def take(self, fresh: bool = False) -> tuple[Any, None]:
        conn = await self.pool.acquire()
        if conn.is_in_transaction():
            await self.pool.release(conn)
            raise TransactionInProgress("a pooled connection is inside a transaction")
        return conn, None

    async def give(self, conn: Any, token: None, ours: bool = False) -> None:
        await self.pool.release(conn)

    @contextlib.asynccontextmanager
    async def borrow(self) -> AsyncIterator[Any]:
        conn, token = await self.take()
        try:
            yield conn
        finally:
            await self.give(conn, token)

    async def discard(self, conn: Any) -> None:
        conn.terminate()        # the pool opens a new one in its place

    def forked(self) -> _AOwnPool:
        args, kwargs = self.pool._connect_args, dict(self.pool._connect_kwargs)
        return _AOwnPool(args[0] if args else "", "asyncpg", kwargs, self.pool._maxsize)

    async def close(self) -> None:
        pass


def _source(obj: Any, driver: str | None, pool_size: int,
            connect_kwargs: dict[str, Any] | None, join: bool) -> Any:
    if isinstance(obj, str):
        if driver is None:
            try:
                import asyncpg  # noqa: F401
                driver = "asyncpg"
            except ImportError:
                driver = "psycopg"
        if driver not in ("psycopg", "asyncpg"):
            raise ValueError("driver is 'asyncpg' or 'psycopg' for an AsyncLimiter")
        return _AOwnPool(obj, driver, dict(connect_kwargs or {}), pool_size)
    kind = _drivers.kind_of(obj)
    name = type(obj).__name__
    if kind == "psycopg_pool":
        if name != "AsyncConnectionPool":
            raise TypeError("a sync pool goes to Limiter")
        return _APsycopgPool(obj)
    if kind == "asyncpg_pool":
        return _AsyncpgPool(obj)
    if kind == "asyncpg" or (kind == "psycopg" and name.startswith("Async")):
        return _ASingle(obj, kind, join)
    raise TypeError(f"an AsyncLimiter takes a DSN, an asyncpg connection or pool, or a psycopg "
                    f"AsyncConnection or AsyncConnectionPool, not {name}")


class AsyncLimiter:
    """Limiter for asyncio: the same calls, awaited.

    source: a DSN (up to pool_size connections of its own, asyncpg if
    installed, else psycopg 3; driver= to choose), an asyncpg connection or
    pool, or a psycopg AsyncConnection or AsyncConnectionPool.
    """

    def __init__(self, source: Any, *, schema: str | None = None, driver: str | None = None,
                 pool_size: int = 10, connect_kwargs: dict[str, Any] | None = None,
                 headers: Mapping[str, str] | None = None, jitter: float = 0.1,
                 max_jitter: float = 1.0, _join: bool = False) -> None:
        self._source = _source(source, driver, pool_size, connect_kwargs, _join)
        self._forks = _drivers.FORKS
        self.schema = schema
        self.headers = dict(headers or {})
        self.jitter, self.max_jitter = jitter, max_jitter
        self._st: _core.Statements | None = None
        self._has_ensure: bool | None = None

    def on(self, conn: Any) -> "AsyncLimiter":
        """A limiter whose calls run on conn, inside its open transaction."""
        lim = AsyncLimiter(conn, schema=self.schema, headers=self.headers, jitter=self.jitter,
                           max_jitter=self.max_jitter, _join=True)
        lim._st = self._st if self._st is not None and lim._source.kind == self._source.kind \
            else None
        return lim

    def _src(self) -> Any:
        if _drivers.FORKS != self._forks:
            self._source = self._source.forked()
            self._forks = _drivers.FORKS
        return self._source

    async def _statements(self) -> _core.Statements:
        if self._st is None:
            schema = self.schema
            if schema is None:
                rows = await self._exec(_core.SCHEMA_QUERY, (), safe=True, raw=True)
                if not rows:
                    raise TokenBucketError("the tokenbucket extension is not installed in "
                                           "this database", hint="CREATE EXTENSION tokenbucket;")
                schema = rows[0][0]
            style = "numeric" if self._source.kind == "asyncpg" else "format"
            self._st = _core.Statements(schema, style)
        return self._st

    async def _exec(self, key: str, params: tuple, *, safe: bool, raw: bool = False) -> list:
        sql = key if raw else (await self._statements())[key]
        src = self._src()
        for attempt in (0, 1):
            conn, token = await src.take(attempt > 0)
            ran = False
            try:
                rows = await _drivers.async_run(src.kind, conn, sql, params)
                ran = True
                return rows
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                err = translate(exc)
                if not isinstance(err, ConnectionLost):
                    raise err from exc
                await src.discard(conn)
                if safe and src.reconnects and attempt == 0:
                    continue
                if not safe:
                    raise OutcomeUnknown(
                        "the connection was lost during the call: whether it took "
                        "effect is unknown", detail=str(exc).strip()) from exc
                raise err from exc
            finally:
                await src.give(conn, token, ran)
        raise AssertionError("unreachable")

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        """A connection of the limiter's, for SQL of your own."""
        async with self._src().borrow() as conn:
            yield conn

    async def close(self) -> None:
        await self._source.close()

    async def try_(self, costs: Costs, cost: float | None = None, *,
                   reserve: float | None = None) -> Decision:
        if reserve is None and type(costs) is str:     # one bucket: the call made most
            st = self._st or await self._statements()
            return _core.combine(await self._exec(st.sql["try"], (costs, _core.cost_of(cost)),
                                                  safe=False, raw=True))
        c = costs_of(costs, cost)
        sql, params, names = _core.try_call(await self._statements(), c, reserve)
        return _core.combine(await self._exec(sql, params, safe=False, raw=True), names)

    async def peek(self, costs: Costs, cost: float | None = None, *,
                   reserve: float | None = None) -> Decision:
        c = costs_of(costs, cost)
        sql, params, names = _core.peek_call(await self._statements(), c, reserve)
        return _core.combine(await self._exec(sql, params, safe=True, raw=True), names)

    async def acquire(self, costs: Costs, cost: float | None = None, *,
                      timeout: Duration | None = None, reserve: float | None = None,
                      wait: str = "client") -> Decision:
        """As Limiter.acquire: wait="client" sleeps (asyncio.sleep) holding
        no connection; wait="server" holds one for the whole wait."""
        c = costs_of(costs, cost)
        limit = seconds(timeout)
        if wait == "server":
            sql, params = _core.wait_call(await self._statements(), c, limit, reserve)
            granted = bool((await self._exec(sql, params, safe=False, raw=True))[0][0])
            return _core.waited(granted) if granted else await self.peek(c, reserve=reserve)
        if wait != "client":
            raise ValueError("wait is 'client' or 'server'")
        deadline = None if limit is None else time.monotonic() + limit
        backoff = Backoff(self.jitter, self.max_jitter)
        while True:
            decision = await self.try_(c, reserve=reserve)
            if decision.granted:
                return decision
            now = time.monotonic()
            if deadline is not None and now + decision.retry_after > deadline:
                return decision
            pause = backoff.next(decision.retry_after)
            await asyncio.sleep(pause if deadline is None else min(pause, deadline - now))

    def reserve(self, costs: Costs, cost: float | None = None, *,
                timeout: Duration | None = None, reserve: float | None = None,
                wait: str = "client",
                headers: Mapping[str, str] | None = None) -> "PendingReservation":
        """`async with limiter.reserve(...) as r:` (or `r = await limiter.reserve(...)`)."""
        return PendingReservation(self, costs_of(costs, cost), timeout, reserve, wait,
                                  self.headers if headers is None else headers)

    async def refund(self, name: str | Mapping[str, float], tokens: float | None = None) -> Any:
        amounts = {name: tokens} if isinstance(name, str) else dict(name)
        names, values = _core.sorted_pairs(amounts)
        return _one(name, names, await self._exec("refund", (names, values), safe=False))

    async def settle(self, name: str | Mapping[str, tuple[float, float]],
                     reserved: float | None = None, used: float | None = None) -> Any:
        pairs = {name: (reserved, used)} if isinstance(name, str) else dict(name)
        names = sorted(pairs)
        rows = await self._exec("settle", (names, [float(pairs[n][0]) for n in names],
                                           [float(pairs[n][1]) for n in names]), safe=False)
        return _one(name, names, rows)

    async def sync(self, name: str | Mapping[str, float], remaining: float | None = None) -> Any:
        amounts = {name: remaining} if isinstance(name, str) else dict(name)
        names, values = _core.sorted_pairs(amounts)
        return _one(name, names, await self._exec("sync", (names, values), safe=True))

    async def pause(self, names: str | list[str], duration: Duration) -> None:
        names = [names] if isinstance(names, str) else sorted(names)
        await self._exec("pause", (names, seconds(duration)), safe=True)

    async def pause_until(self, names: str | list[str], until: datetime) -> None:
        names = [names] if isinstance(names, str) else sorted(names)
        await self._exec("pause_until", (names, until), safe=True)

    async def observe(self, status: int, headers: Any, mapping: Mapping[str, str] | None = None,
                      pause: list[str] | None = None) -> _headers.Observation:
        mapping = self.headers if mapping is None else mapping
        obs = _headers.parse(status, headers)
        sync, pause_for = _headers.plan(obs, mapping)
        if sync:
            obs.synced = await self.sync(sync)
        if pause_for is not None:
            targets = sorted(set(pause if pause is not None else mapping.values()))
            if targets:
                await self.pause(targets, pause_for)
                obs.paused = {n: pause_for for n in targets}
        return obs

    @contextlib.asynccontextmanager
    async def lease(self, name: str, slots: int = 1, *, timeout: Duration | None = 0,
                    ttl: Duration | None = None,
                    reserve: float | None = None) -> AsyncIterator[int]:
        """As Limiter.lease: the lease's connection is kept for the block."""
        st = await self._statements()
        src = self._src()
        async with src.borrow() as conn:
            wait = seconds(timeout)
            if wait == 0:
                sql, params = st["lease"], (name, slots, seconds(ttl), reserve)
            else:
                sql, params = st["lease_wait"], (name, slots, seconds(ttl), wait, reserve)
            try:
                lease = (await _drivers.async_run(src.kind, conn, sql, params))[0][0]
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                err = translate(exc)
                if isinstance(err, ConnectionLost):
                    await src.discard(conn)
                    raise OutcomeUnknown("the connection was lost while leasing") from exc
                raise err from exc
            if lease is None:
                raise RateLimited(f"no free slot of {name}", math.nan)
            try:
                yield lease
            finally:
                try:
                    await asyncio.shield(_drivers.async_run(src.kind, conn, st["release"],
                                                            (lease,)))
                except asyncio.CancelledError:
                    await src.discard(conn)
                    raise
                except Exception as exc:
                    await src.discard(conn)
                    if not isinstance(translate(exc), ConnectionLost):
                        raise translate(exc) from exc

    async def ensure(self, name: str, capacity: float, refill: float, per: Duration = 1.0,
                     memory: bool = False) -> str:
        if await self._ensure_available():
            return (await self._exec("ensure", (name, capacity, refill, seconds(per), memory),
                                     safe=True))[0][0]
        # --- before 1.8: create, and take "exists" for an answer ---
        try:
            await self._exec("create", (name, capacity, refill, seconds(per), memory), safe=True)
            return "created"
        except AlreadyExists:
            return "exists"

    async def ensure_limit(self, name: str, max_in_flight: int, memory: bool = False) -> str:
        if await self._ensure_available():
            return (await self._exec("ensure_limit", (name, max_in_flight, memory),
                                     safe=True))[0][0]
        # --- before 1.8 ---
        try:
            await self._exec("create_limit", (name, max_in_flight, memory), safe=True)
            return "created"
        except AlreadyExists:
            return "exists"

    async def _ensure_available(self) -> bool:
        if self._has_ensure is None:
            sig = (await self._statements()).prefix + \
                "tb_ensure(text,float8,float8,interval,boolean)"
            self._has_ensure = bool((await self._exec("has_ensure", (sig,), safe=True))[0][0])
        return self._has_ensure


class AsyncReservation(Reservation):
    """Reservation for asyncio: settle, refund and observe are awaited; an
    exception or a cancellation leaving the block refunds (shielded, so a
    second cancellation does not stop the refund)."""

    async def settle(self, used: float | Mapping[str, float] | None = None) -> None:  # type: ignore[override]
        pairs = self._settlement(used) if used is not None else {}
        self._claim()
        if pairs:
            await self.limiter.settle(pairs)

    async def refund(self) -> None:  # type: ignore[override]
        self._claim()
        await self.limiter.refund(self.costs)

    async def observe(self, status: int, headers: Any) -> _headers.Observation:  # type: ignore[override]
        self.observation = await self.limiter.observe(status, headers, self.mapping,
                                                      pause=list(self.costs))
        return self.observation

    async def __aenter__(self) -> "AsyncReservation":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.settled:
            return
        if exc_type is None:
            self.settled = True
            return
        try:
            await asyncio.shield(self.refund())
        except (TokenBucketError, asyncio.CancelledError):
            pass


class PendingReservation:
    """What AsyncLimiter.reserve returns: awaited, or entered with async with."""

    def __init__(self, limiter: AsyncLimiter, costs: dict[str, float], timeout: Any,
                 reserve: float | None, wait: str, mapping: Mapping[str, str]) -> None:
        self.limiter, self.costs, self.timeout = limiter, costs, timeout
        self.reserve, self.wait, self.mapping = reserve, wait, mapping
        self.reservation: AsyncReservation | None = None

    async def _take(self) -> AsyncReservation:
        decision = await self.limiter.acquire(self.costs, timeout=self.timeout,
                                              reserve=self.reserve, wait=self.wait)
        if not decision.granted:
            raise RateLimited(f"not granted within {seconds(self.timeout)} s",
                              decision.retry_after, decision)
        return AsyncReservation(self.limiter, self.costs, decision, self.mapping)

    def __await__(self) -> Generator[Any, None, AsyncReservation]:
        return self._take().__await__()

    async def __aenter__(self) -> AsyncReservation:
        self.reservation = await self._take()
        return self.reservation

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self.reservation is not None
        await self.reservation.__aexit__(exc_type, exc, tb)
