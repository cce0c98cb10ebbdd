"""AsyncLimiter: the extension's calls from asyncio (psycopg 3 async, asyncpg).

Only the I/O is here, as in _sync: each call's plan is in _core.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import time
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, AsyncIterator, Awaitable, Callable, Generator, Iterable, Mapping, cast

from . import _core, _drivers, headers as _headers
from ._core import Costs, Decision, Duration, Freed, Keep, Plan, Quota, Run, T
from .errors import ForkedConnection, RateLimited, TokenBucketError, TransactionInProgress


class _TaskLock:
    """An asyncio lock the task holding it may take again (a call made
    inside lease()'s block on a single connection)."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.owner: asyncio.Task[Any] | None = None
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

class _ASource:
    kind: str
    reconnects: bool
    keeper: _AKeeper | None = None

    async def open(self) -> Any:
        """A new connection of the source's own (the lease connection)."""
        raise NotImplementedError

    def leases(self) -> _AKeeper:
        if self.keeper is None:
            self.keeper = _AKeeper(self)
        return self.keeper

    def orphan(self) -> None:
        """In a forked child: the parent's lease connection left alone."""
        if self.keeper is not None and self.keeper.conn is not None:
            _drivers.disown(_drivers.async_fileno(self.kind, self.keeper.conn))
            _drivers.ORPHANS.append(self.keeper.conn)
            self.keeper.conn = None

    async def take(self, fresh: bool = False) -> tuple[Any, Any]:
        raise NotImplementedError

    async def give(self, conn: Any, token: Any, ours: bool = False) -> None:
        raise NotImplementedError

    @contextlib.asynccontextmanager
    async def borrow(self) -> AsyncIterator[Any]:
        conn, token = await self.take()
        try:
            yield conn
        finally:
            await self.give(conn, token)

    async def discard(self, conn: Any) -> None:
        await _drivers.async_close(self.kind, conn)

    def forked(self) -> _ASource:
        raise NotImplementedError

    async def close(self) -> None:
        if self.keeper is not None:
            await self.keeper.close()


class _AKeeper:
    """The connection of a process that holds every session lease of its
    AsyncLimiter (see _sync._Keeper): statements on it take turns; a
    release wakes the longest waiter of this process."""

    def __init__(self, source: _ASource) -> None:
        self.source = source
        self.conn: Any = None
        self.lock: asyncio.Lock | None = None
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.released = 0
        self.turns = _core.Turns()

    async def run(self, sql: str, params: tuple[Any, ...], frees: bool) -> tuple[_core.Rows, int]:
        seen = self.released
        try:
            return await self._take_turn(sql, params), seen
        finally:
            if frees:
                self.released += 1
                waiters, self.waiters = self.waiters, collections.deque()
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)

    async def _take_turn(self, sql: str, params: tuple[Any, ...]) -> _core.Rows:
        kind = self.source.kind
        if isinstance(self.source, _ASingle):       # the caller's one connection
            conn, token = await self.source.take()
            try:
                return await self._run(conn, sql, params)
            finally:
                await self.source.give(conn, token)
        if self.lock is None:
            self.lock = asyncio.Lock()
        async with self.lock:
            if self.conn is not None and (_drivers.async_closed(kind, self.conn) or
                                          _drivers.socket_readable(
                                              _drivers.async_fileno(kind, self.conn) or -1)):
                await self.close_conn()             # the server closed it
            if self.conn is None:
                try:
                    self.conn = await self.source.open()
                except Exception as exc:
                    raise _core.connect_failure(exc) from exc
            return await self._run(self.conn, sql, params)

    async def _run(self, conn: Any, sql: str, params: tuple[Any, ...]) -> _core.Rows:
        try:
            return await _drivers.async_run(self.source.kind, conn, sql, params)
        except Exception as exc:
            err, lost = _core.lease_failure(exc)
            if lost and conn is self.conn:
                await self.close_conn()
            raise err from exc

    async def wait(self, seen: int, seconds: float) -> None:
        if self.released != seen:
            return
        waiter = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, seconds)
        except asyncio.TimeoutError:
            pass
        finally:
            if not waiter.done():
                waiter.cancel()

    async def take_turn(self, name: str, timeout: float | None) -> bool:
        """Wait for this process's turn to wait for name's slots (see
        _core.Turns); False when timeout passed first."""
        waiter = self.turns.enter(name, asyncio.get_running_loop().create_future)
        if waiter is None:
            return True
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout)
            return True
        except BaseException as exc:
            if waiter.done():               # handed over meanwhile: pass it on
                self.give_turn(name)
            else:
                self.turns.drop(name, waiter)
            if isinstance(exc, asyncio.TimeoutError):
                return False
            raise

    def give_turn(self, name: str) -> None:
        waiter = self.turns.leave(name)
        if waiter is not None:
            waiter.set_result(None)

    async def close_conn(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            await _drivers.async_close(self.source.kind, conn)

    async def close(self) -> None:
        await self.close_conn()


class _ASingle(_ASource):
    """One connection the caller gave (see _sync._Single)."""

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
                raise _core.in_transaction()
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

    async def discard(self, conn: Any) -> None:
        pass

    async def close(self) -> None:
        pass

    def forked(self) -> _ASource:
        raise ForkedConnection(
            "this limiter was given a connection made before the process forked",
            hint="Give the limiter a DSN or a pool, or make it in the child.")


class _AOwnPool(_ASource):
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
            while self.idle:
                conn, poll = entry = self.idle.pop()
                if not (_drivers.stale(poll, fresh) or _drivers.async_closed(self.kind, conn)):
                    return entry
                await _drivers.async_close(self.kind, conn)
            try:
                conn = await _drivers.async_connect(self.kind, self.dsn, self.kwargs)
            except Exception as exc:
                raise _core.connect_failure(exc) from exc
            return conn, _drivers.poller(_drivers.async_fileno(self.kind, conn))
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

    async def open(self) -> Any:
        return await _drivers.async_connect(self.kind, self.dsn, self.kwargs)

    def forked(self) -> _AOwnPool:
        for conn, _ in self.idle:
            _drivers.disown(_drivers.async_fileno(self.kind, conn))
            _drivers.ORPHANS.append(conn)
        self.idle = []
        self.orphan()
        return _AOwnPool(self.dsn, self.kind, self.kwargs, self.max_size)

    async def close(self) -> None:
        idle, self.idle = self.idle, []
        for conn, _ in idle:
            await _drivers.async_close(self.kind, conn)
        await super().close()


class _APsycopgPool(_ASource):
    """A psycopg_pool.AsyncConnectionPool the caller gave."""

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
        raise _core.pool_closed()

    async def give(self, conn: Any, restore: bool, ours: bool = False) -> None:
        try:
            if restore and not conn.closed:
                await conn.set_autocommit(False)
        finally:
            await self.pool.putconn(conn)

    async def open(self) -> Any:
        dsn, kind, kwargs, _ = _drivers.psycopg_pool_settings(self.pool)
        return await _drivers.async_connect(kind, dsn, kwargs)

    def forked(self) -> _AOwnPool:
        self.orphan()
        return _AOwnPool(*_drivers.psycopg_pool_settings(self.pool))


class _AsyncpgPool(_ASource):
    """An asyncpg Pool the caller gave."""

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

    async def discard(self, conn: Any) -> None:
        conn.terminate()        # the pool opens a new one in its place

    async def open(self) -> Any:
        dsn, kind, kwargs, _ = _drivers.asyncpg_pool_settings(self.pool)
        return await _drivers.async_connect(kind, dsn, kwargs)

    def forked(self) -> _AOwnPool:
        self.orphan()
        return _AOwnPool(*_drivers.asyncpg_pool_settings(self.pool))


def _source(obj: Any, driver: str | None, pool_size: int,
            connect_kwargs: dict[str, Any] | None, join: bool) -> _ASource:
    what, kind = _core.classify(obj, driver, asynchronous=True)
    if what == "dsn":
        return _AOwnPool(obj, kind, dict(connect_kwargs or {}), pool_size)
    if what == "pool":
        return _AsyncpgPool(obj) if kind == "asyncpg" else _APsycopgPool(obj)
    return _ASingle(obj, kind, join)


class AsyncLimiter(_core.Core):
    """Limiter for asyncio: the same calls, awaited.

    source: a DSN (up to pool_size connections of its own, asyncpg if
    installed, else psycopg 3; driver= to choose), an asyncpg connection or
    pool, or a psycopg AsyncConnection or AsyncConnectionPool.
    """

    _source: _ASource

    def __init__(self, source: Any, *, schema: str | None = None, driver: str | None = None,
                 pool_size: int = 10, connect_kwargs: dict[str, Any] | None = None,
                 headers: Mapping[str, str] | None = None, jitter: float = 0.1,
                 max_jitter: float = 1.0, _join: bool = False) -> None:
        super().__init__(_source(source, driver, pool_size, connect_kwargs, _join),
                         schema, headers, jitter, max_jitter)

    def on(self, conn: Any) -> AsyncLimiter:
        """A limiter whose calls run on conn, inside its open transaction."""
        return self._joined(AsyncLimiter(conn, schema=self.schema, headers=self.headers,
                                         jitter=self.jitter, max_jitter=self.max_jitter,
                                         _join=True))

    async def _drive(self, plan: Plan[T], cuts: list[asyncio.CancelledError] | None = None,
                     undo: Callable[[T], Plan[Any]] | None = None) -> T:
        """Carry out a plan (see Limiter._drive), sleeping with asyncio.sleep.

        With cuts (a reservation's grant): a cancellation that comes while a
        statement that takes or gives tokens runs does not cut it off, which
        would leave unknown whether it took effect: the statement runs to its
        end, the plan takes its answer, and the cancellation is raised at the
        plan's next step, or at its end once undo(its result) has run."""
        answer: Any = None
        error: TokenBucketError | None = None
        while True:
            try:
                step = plan.send(answer) if error is None else plan.throw(error)
            except StopIteration as done:
                if not cuts:
                    return cast(T, done.value)
                if undo is not None:
                    await _finish(self._drive(undo(cast(T, done.value))), cuts)
                raise cuts[0]
            except TokenBucketError:
                if cuts:
                    raise cuts[0]
                raise
            if cuts:
                plan.close()
                raise cuts[0]
            answer, error = None, None
            if isinstance(step, Run):
                try:
                    answer = await self._exec(step.sql, step.params, step.safe,
                                              None if step.safe else cuts)
                except TokenBucketError as exc:
                    error = exc
            elif isinstance(step, Keep):
                # a lease taken or released is never cut off (see above)
                run = self._src().leases().run(step.sql, step.params, step.frees)
                try:
                    answer = await (run if cuts is None else _finish(run, cuts))
                except TokenBucketError as exc:
                    error = exc
            elif isinstance(step, Freed):
                await self._src().leases().wait(step.seen, step.seconds)
            else:
                await asyncio.sleep(step.seconds)

    async def _exec(self, sql: str, params: tuple[Any, ...], safe: bool,
                    cuts: list[asyncio.CancelledError] | None = None) -> _core.Rows:
        """Run one statement (as Limiter._exec); with cuts, not cut off by a
        cancellation (see _drive)."""
        src = self._src()
        for attempt in (0, 1):
            conn, token = await src.take(attempt > 0)
            ran = False
            try:
                run = _drivers.async_run(src.kind, conn, sql, params)
                rows = await (run if cuts is None else _finish(run, cuts))
                ran = True
                return rows
            except Exception as exc:
                err, lost = _core.failure(exc, safe=safe, again=src.reconnects and attempt == 0)
                if lost:
                    await src.discard(conn)
                if err is not None:
                    raise err from exc
            finally:
                give = src.give(conn, token, ran)
                await (give if cuts is None else _finish(give, cuts))
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
        one = self._try_one(costs, cost, reserve)
        if one is not None:
            return _core.combine(await self._exec(*one, False))
        return await self._drive(self._try(costs, cost, reserve))

    async def peek(self, costs: Costs, cost: float | None = None, *,
                   reserve: float | None = None) -> Decision:
        return await self._drive(self._peek(costs, cost, reserve))

    async def acquire(self, costs: Costs, cost: float | None = None, *,
                      timeout: Duration | None = None, reserve: float | None = None,
                      wait: str = "client") -> Decision:
        """As Limiter.acquire: wait="client" sleeps (asyncio.sleep) holding
        no connection; wait="server" holds one for the whole wait."""
        return await self._drive(self._acquire(costs, cost, timeout, reserve, wait))

    def reserve(self, costs: Costs, cost: float | None = None, *,
                timeout: Duration | None = None, reserve: float | None = None,
                wait: str = "client", headers: Mapping[str, str] | None = None,
                lease: str | None = None, slots: int = 1,
                ttl: Duration | None = None) -> PendingReservation:
        """`async with limiter.reserve(...) as r:` (or `r = await limiter.reserve(...)`);
        lease= as Limiter.reserve (released when the block is left, or by
        `await r.release()`)."""
        if lease is None:
            plan = self._reserved(costs, cost, timeout, reserve, wait)
            return PendingReservation(self, lambda: self._drive(plan, [], self._ungrant),
                                      self._mapping(headers))
        if wait != "client":
            raise ValueError("a lease with a reservation waits in the client (wait='client')")
        limit = lease
        return PendingReservation(self, lambda: self._waited(
            limit, timeout, lambda left: self._reserve_leased(costs, cost, left, reserve, limit,
                                                              slots, ttl), self._ungrant),
            self._mapping(headers))

    async def refund(self, name: str | Mapping[str, float], tokens: float | None = None, *,
                     reserved_at: datetime | None = None) -> Any:
        return await self._drive(self._refund(name, tokens, reserved_at))

    async def settle(self, name: str | Mapping[str, tuple[float, float]],
                     reserved: float | None = None, used: float | None = None, *,
                     reserved_at: datetime | None = None) -> Any:
        return await self._drive(self._settle(name, reserved, used, reserved_at))

    async def sync(self, name: str | Mapping[str, float], remaining: float | None = None) -> Any:
        return await self._drive(self._sync(name, remaining))

    async def pause(self, names: str | Iterable[str], duration: Duration) -> None:
        await self._drive(self._pause(names, duration))

    async def pause_until(self, names: str | Iterable[str], until: datetime) -> None:
        await self._drive(self._pause_until(names, until))

    async def observe(self, status: int, headers: Any, mapping: Mapping[str, str] | None = None,
                      pause: Iterable[str] | None = None) -> _headers.Observation:
        return await self._drive(self._observe(status, headers, mapping, pause))

    @contextlib.asynccontextmanager
    async def lease(self, name: str, slots: int = 1, *, timeout: Duration | None = 0,
                    ttl: Duration | None = None, reserve: float | None = None,
                    wait: str = "client") -> AsyncIterator[int]:
        """As Limiter.lease: with wait="client" the wait holds no connection
        and the lease is held by the process's lease connection; a
        cancellation never leaves a lease taken and unknown."""
        if wait == "server":
            async with self._server_lease(name, slots, timeout, ttl, reserve) as lease:
                yield lease
            return
        if wait != "client":
            raise ValueError("wait is 'client' or 'server'")
        lease = await self._waited(name, timeout, lambda left: self._lease(
            name, slots, left, ttl, reserve, None), self._unlease)
        try:
            yield lease
        finally:
            await self._release(lease)

    async def _waited(self, name: str, timeout: Duration | None,
                      plan: Callable[[float | None], Plan[T]],
                      undo: Callable[[T], Plan[Any]]) -> T:
        """plan(the time left), run when it is this process's turn to wait
        for name (at once for a call that does not wait); a cancellation
        never cuts off its lease (see _drive)."""
        limit = _core.seconds(timeout)
        if limit == 0:
            return await self._drive(plan(0), [], undo)
        keeper = self._src().leases()
        started = time.monotonic()
        if not await keeper.take_turn(name, limit):
            raise RateLimited(f"no free slot of {name}", math.nan)
        try:
            return await self._drive(plan(None if limit is None else
                                          max(0.0, limit - (time.monotonic() - started))),
                                     [], undo)
        finally:
            keeper.give_turn(name)

    async def _release(self, lease: int) -> None:
        await _to_the_end(self._drive(self._unlease(lease)))

    @contextlib.asynccontextmanager
    async def _server_lease(self, name: str, slots: int, timeout: Duration | None,
                            ttl: Duration | None, reserve: float | None) -> AsyncIterator[int]:
        st = await self._drive(self._statements())
        src = self._src()
        async with src.borrow() as conn:
            sql, params = _core.lease_call(st, name, slots, timeout, ttl, reserve)
            try:
                rows = await _drivers.async_run(src.kind, conn, sql, params)
            except Exception as exc:
                err, lost = _core.lease_failure(exc)
                if lost:
                    await src.discard(conn)
                raise err from exc
            lease = _core.leased(rows, name)
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
                    err_ = _core.release_failure(exc)
                    if err_ is not None:
                        raise err_ from exc

    # -- budgets (extension 1.9): as Limiter's

    async def cost(self, model: str, input_tokens: int, output_tokens: int = 0,
                   cached: int = 0) -> Decimal:
        return await self._drive(self._cost(model, input_tokens, output_tokens, cached))

    async def ensure_quota(self, name: str, budget: float, period: str | timedelta, *,
                           time_zone: str = "UTC", starts: datetime | None = None,
                           carry_max: float = 0, memory: bool = False) -> str:
        return await self._drive(self._ensure_quota(name, budget, period, time_zone, starts,
                                                    carry_max, memory))

    async def set_parent(self, child: str, parent: str | None) -> None:
        await self._drive(self._set_parent(child, parent))

    async def set_alerts(self, bucket: str, thresholds: Iterable[float]) -> None:
        await self._drive(self._set_alerts(bucket, thresholds))

    async def quotas(self, prefix: str | None = None) -> list[Quota]:
        return await self._drive(self._quotas(prefix))

    async def ensure(self, name: str, capacity: float, refill: float, per: Duration = 1.0,
                     memory: bool = False) -> str:
        return await self._drive(self._ensure(name, capacity, refill, per, memory))

    async def ensure_limit(self, name: str, max_in_flight: int, memory: bool = False) -> str:
        return await self._drive(self._ensure_limit(name, max_in_flight, memory))


async def _finish(aw: Awaitable[T], cuts: list[asyncio.CancelledError]) -> T:
    """aw's result, awaited to its end even when this task is cancelled
    meanwhile: the cancellation is kept in cuts, for the caller to raise
    when it is safe to."""
    task = asyncio.ensure_future(aw)
    while True:
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError as exc:
            if task.cancelled():    # aw itself was cancelled
                raise
            cuts.append(exc)
            if task.done():         # it ended before the cancellation got here
                return task.result()


async def _to_the_end(aw: Awaitable[T]) -> T:
    """aw's result, awaited to its end even when this task is cancelled
    meanwhile, and then the cancellation."""
    cuts: list[asyncio.CancelledError] = []
    result = await _finish(aw, cuts)
    if cuts:
        raise cuts[0]
    return result


class AsyncReservation(_core.ReservationCore):
    """Reservation for asyncio: settle, refund and observe are awaited.  A
    settlement or refund, once called, runs to its end even when the task is
    cancelled meanwhile (the cancellation is raised after), so that a
    reservation is never left half settled; an exception or a cancellation
    leaving the block refunds; a cancellation during reserve's grant lets
    the grant finish and refunds it."""

    limiter: AsyncLimiter

    def __init__(self, limiter: AsyncLimiter, costs: dict[str, float], decision: Decision,
                 mapping: Mapping[str, str], lease: int | None = None) -> None:
        super().__init__(limiter, costs, decision, mapping, lease)

    async def settle(self, used: float | Mapping[str, float] | None = None) -> None:
        await _to_the_end(self.limiter._drive(self._settle(used)))

    async def refund(self) -> None:
        await _to_the_end(self.limiter._drive(self._refund()))

    async def observe(self, status: int, headers: Any) -> _headers.Observation:
        return await self.limiter._drive(self._observe(status, headers))

    async def release(self) -> None:
        """Release the reservation's lease now (leaving the block does)."""
        lease = self._unlease()
        if lease is not None:
            await self.limiter._release(lease)

    async def __aenter__(self) -> AsyncReservation:
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if self._leaving(exc_type is not None):
                try:
                    await self.refund()
                except (TokenBucketError, asyncio.CancelledError):
                    pass        # the block's own exception is the one to see
        finally:
            await self.release()


class PendingReservation:
    """What AsyncLimiter.reserve returns: awaited, or entered with async with."""

    def __init__(self, limiter: AsyncLimiter, grant: Callable[[], Awaitable[_core.Granted]],
                 mapping: Mapping[str, str]) -> None:
        self.limiter, self.grant, self.mapping = limiter, grant, mapping
        self.reservation: AsyncReservation | None = None

    async def _take(self) -> AsyncReservation:
        # a cancellation during the grant: the grant finishes, and is refunded
        costs, decision, lease = await self.grant()
        return AsyncReservation(self.limiter, costs, decision, self.mapping, lease)

    def __await__(self) -> Generator[Any, None, AsyncReservation]:
        return self._take().__await__()

    async def __aenter__(self) -> AsyncReservation:
        self.reservation = await self._take()
        return self.reservation

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self.reservation is not None
        await self.reservation.__aexit__(exc_type, exc, tb)
