"""Limiter: the extension's calls from synchronous code (psycopg 3, psycopg2).

Only the I/O is here: where connections come from, running a statement,
sleeping.  What each call does is its plan in _core, shared with
AsyncLimiter.
"""
from __future__ import annotations

import contextlib
import math
import threading
import time
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Callable, Iterable, Iterator, Mapping, cast

from . import _core, _drivers, headers as _headers
from ._core import Costs, Decision, Duration, Freed, Keep, Plan, Quota, Run, T
from .errors import ForkedConnection, RateLimited, TokenBucketError


# ---- where connections come from -------------------------------------------
#
# Each source lends a connection with take() and has it back with give();
# borrow() is the two as a context manager, for lease() and connection().
# The limiter's own statements call take and give directly and say when the
# statement ran (ours): a connection in autocommit that has just answered
# is neither closed nor in a transaction, and is not asked again.

class _Source:
    kind: str
    reconnects: bool
    keeper: _Keeper | None = None

    def take(self, fresh: bool = False) -> tuple[Any, Any]:
        raise NotImplementedError

    def open(self) -> Any:
        """A new connection of the source's own, in autocommit (the lease
        connection)."""
        raise NotImplementedError

    def leases(self) -> _Keeper:
        if self.keeper is None:
            self.keeper = _Keeper(self)
        return self.keeper

    def orphan(self) -> None:
        """In a forked child: the parent's lease connection left alone."""
        if self.keeper is not None and self.keeper.conn is not None:
            _drivers.disown(_drivers.sync_fileno(self.keeper.conn))
            self.keeper.conn = None

    def give(self, conn: Any, token: Any, ours: bool = False) -> None:
        raise NotImplementedError

    @contextlib.contextmanager
    def borrow(self) -> Iterator[Any]:
        conn, token = self.take()
        try:
            yield conn
        finally:
            self.give(conn, token)

    def discard(self, conn: Any) -> None:
        _drivers.sync_close(conn)

    def forked(self) -> _Source:
        raise NotImplementedError

    def close(self) -> None:
        if self.keeper is not None:
            self.keeper.close()


class _Keeper:
    """The one connection of a process that holds every session lease its
    limiter takes: a held lease costs the process this connection in all,
    never one per call, and the process's death still frees them all (its
    session ends).  Statements on it take turns, each short (tb_lease never
    waits here: the waits are the plans', holding nothing); a release wakes
    the longest waiter of this process (see _core.Freed)."""

    def __init__(self, source: _Source) -> None:
        self.source = source
        self.conn: Any = None
        self.lock = threading.Lock()
        self.freed = threading.Condition(threading.Lock())
        self.released = 0
        self.turns = _core.Turns()
        self.turns_lock = threading.Lock()

    def run(self, sql: str, params: tuple[Any, ...], frees: bool) -> tuple[_core.Rows, int]:
        seen = self.released
        try:
            return self._take_turn(sql, params), seen
        finally:
            if frees:
                with self.freed:
                    self.released += 1
                    self.freed.notify_all()

    def _take_turn(self, sql: str, params: tuple[Any, ...]) -> _core.Rows:
        if isinstance(self.source, _Single):       # the caller's one connection
            conn, token = self.source.take()
            try:
                return self._run(conn, sql, params)
            finally:
                self.source.give(conn, token)
        with self.lock:
            if self.conn is not None and (_drivers.sync_closed(self.conn) or
                                          _drivers.socket_readable(self.conn.fileno())):
                self.close_conn()                   # the server closed it
            if self.conn is None:
                try:
                    self.conn = self.source.open()
                except Exception as exc:
                    raise _core.connect_failure(exc) from exc
            return self._run(self.conn, sql, params)

    def _run(self, conn: Any, sql: str, params: tuple[Any, ...]) -> _core.Rows:
        try:
            return _drivers.sync_run(self.source.kind, conn, sql, params)
        except Exception as exc:
            err, lost = _core.lease_failure(exc)
            if lost and conn is self.conn:
                self.close_conn()
            raise err from exc

    def wait(self, seen: int, seconds: float) -> None:
        with self.freed:
            if self.released == seen:
                self.freed.wait(seconds)

    def take_turn(self, name: str, timeout: float | None) -> bool:
        """Wait for this process's turn to wait for name's slots (see
        _core.Turns); False when timeout passed first."""
        with self.turns_lock:
            waiter = self.turns.enter(name, threading.Event)
        if waiter is None or waiter.wait(timeout):
            return True
        with self.turns_lock:
            if not waiter.is_set():
                self.turns.drop(name, waiter)
                return False
        return True

    def give_turn(self, name: str) -> None:
        with self.turns_lock:
            waiter = self.turns.leave(name)
        if waiter is not None:
            waiter.set()

    def close_conn(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            _drivers.sync_close(conn)

    def close(self) -> None:
        with self.lock:
            self.close_conn()


class _Single(_Source):
    """One connection the caller gave.  Calls take turns on it; without join,
    each runs in autocommit and one made while the caller has a transaction
    open is refused (a grant would hold the bucket's row until it ends)."""

    reconnects = False

    def __init__(self, conn: Any, kind: str, join: bool) -> None:
        self.conn, self.kind, self.join = conn, kind, join
        self.lock = threading.RLock()     # a call made inside lease()'s block

    def take(self, fresh: bool = False) -> tuple[Any, bool]:
        """(the connection, whether give sets autocommit back off)."""
        self.lock.acquire()
        try:
            conn = self.conn
            if self.join or conn.autocommit:
                return conn, False
            if _drivers.sync_in_transaction(conn):
                raise _core.in_transaction()
            conn.autocommit = True
            return conn, True
        except BaseException:
            self.lock.release()
            raise

    def give(self, conn: Any, restore: bool, ours: bool = False) -> None:
        try:
            if restore and not _drivers.sync_closed(conn):
                conn.autocommit = False
        finally:
            self.lock.release()

    def discard(self, conn: Any) -> None:
        pass

    def close(self) -> None:
        pass

    def forked(self) -> _Source:
        raise ForkedConnection(
            "this limiter was given a connection made before the process forked",
            hint="Give the limiter a DSN or a pool, or make it in the child.")


class _OwnPool(_Source):
    """Connections the limiter opens from a DSN, in autocommit, kept idle
    between calls (at most max_size at once).  Each idle one is kept with a
    poll object on its socket (see take)."""

    reconnects = True

    def __init__(self, dsn: str, kind: str, kwargs: dict[str, Any], max_size: int) -> None:
        self.dsn, self.kind, self.kwargs, self.max_size = dsn, kind, kwargs, max_size
        self.idle: list[tuple[Any, Any]] = []      # (connection, its poller)
        self.lock = threading.Lock()
        self.freed = threading.Condition(self.lock)
        self.lent = 0           # connections out (at most max_size)
        self.waiting = 0        # threads waiting for one to come back

    def take(self, fresh: bool = False) -> tuple[Any, Any]:
        """(a connection, its poller): an idle one that the server has not
        closed meanwhile (a restart, a terminate), else a new one."""
        with self.lock:
            while self.lent >= self.max_size:
                self.waiting += 1
                try:
                    self.freed.wait()
                finally:
                    self.waiting -= 1
            self.lent += 1
            entry = self.idle.pop() if self.idle else None
        try:
            while entry is not None:
                conn, poll = entry
                # an idle session is sent nothing: something to read means the
                # server closed it (give kept none closed on this side)
                if not _drivers.stale(poll, fresh):
                    return entry
                _drivers.sync_close(conn)
                with self.lock:
                    entry = self.idle.pop() if self.idle else None
            try:
                conn = _drivers.sync_connect(self.kind, self.dsn, self.kwargs)
            except Exception as exc:
                raise _core.connect_failure(exc) from exc
            return conn, _drivers.poller(_drivers.sync_fileno(conn))
        except BaseException:
            with self.lock:
                self.lent -= 1
                if self.waiting:
                    self.freed.notify()
            raise

    def give(self, conn: Any, poll: Any, ours: bool = False) -> None:
        keep = ours or not (_drivers.sync_closed(conn) or _drivers.sync_in_transaction(conn))
        with self.lock:
            if keep:
                self.idle.append((conn, poll))
            self.lent -= 1
            if self.waiting:
                self.freed.notify()
        if not keep:
            _drivers.sync_close(conn)

    def open(self) -> Any:
        return _drivers.sync_connect(self.kind, self.dsn, self.kwargs)

    def forked(self) -> _OwnPool:
        for conn, _ in self.idle:
            _drivers.disown(_drivers.sync_fileno(conn))
        self.idle = []
        self.orphan()
        return _OwnPool(self.dsn, self.kind, self.kwargs, self.max_size)

    def close(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for conn, _ in idle:
            _drivers.sync_close(conn)
        super().close()


class _PsycopgPool(_Source):
    """A psycopg_pool.ConnectionPool the caller gave."""

    reconnects = True
    kind = "psycopg"

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def take(self, fresh: bool = False) -> tuple[Any, bool]:
        for _ in range(self.pool.max_size + 1):
            conn = self.pool.getconn()
            if _drivers.socket_readable(conn.fileno()):
                conn.close()            # the pool replaces a closed connection
                self.pool.putconn(conn)
                continue
            restore = not conn.autocommit
            if restore:
                try:
                    conn.autocommit = True
                except BaseException:
                    self.pool.putconn(conn)
                    raise
            return conn, restore
        raise _core.pool_closed()

    def give(self, conn: Any, restore: bool, ours: bool = False) -> None:
        try:
            if restore and not conn.closed:
                conn.autocommit = False
        finally:
            self.pool.putconn(conn)

    def open(self) -> Any:
        dsn, kind, kwargs, _ = _drivers.psycopg_pool_settings(self.pool)
        return _drivers.sync_connect(kind, dsn, kwargs)

    def forked(self) -> _OwnPool:
        self.orphan()
        return _OwnPool(*_drivers.psycopg_pool_settings(self.pool))


def _source(obj: Any, driver: str | None, pool_size: int,
            connect_kwargs: dict[str, Any] | None, join: bool) -> _Source:
    what, kind = _core.classify(obj, driver, asynchronous=False)
    if what == "dsn":
        return _OwnPool(obj, kind, dict(connect_kwargs or {}), pool_size)
    if what == "pool":
        return _PsycopgPool(obj)
    return _Single(obj, kind, join)


# ---- the limiter ------------------------------------------------------------

class Limiter(_core.Core):
    """Token buckets and in-flight limits of the tokenbucket extension, from
    synchronous code.

    source: a DSN (the limiter opens up to pool_size connections of its own,
    with psycopg 3 if installed, else psycopg2; driver= to choose), a
    psycopg 3 or psycopg2 connection, or a psycopg_pool.ConnectionPool.
    schema: the extension's schema (found on first use when None).
    headers: the default {header: bucket} mapping of observe (see headers).
    """

    _source: _Source

    def __init__(self, source: Any, *, schema: str | None = None, driver: str | None = None,
                 pool_size: int = 10, connect_kwargs: dict[str, Any] | None = None,
                 headers: Mapping[str, str] | None = None, jitter: float = 0.1,
                 max_jitter: float = 1.0, _join: bool = False) -> None:
        super().__init__(_source(source, driver, pool_size, connect_kwargs, _join),
                         schema, headers, jitter, max_jitter)

    # -- plumbing

    def on(self, conn: Any) -> Limiter:
        """A limiter whose calls run on conn inside whatever transaction it has
        open: its grants, refunds and settlements commit or roll back with the
        caller's own writes."""
        return self._joined(Limiter(conn, schema=self.schema, headers=self.headers,
                                    jitter=self.jitter, max_jitter=self.max_jitter,
                                    _join=True))

    def _drive(self, plan: Plan[T]) -> T:
        """Carry out a plan: its statements on the limiter's connections (an
        error thrown back into it), its sleeps with time.sleep."""
        answer: Any = None
        error: TokenBucketError | None = None
        while True:
            try:
                step = plan.send(answer) if error is None else plan.throw(error)
            except StopIteration as done:
                return cast(T, done.value)
            answer, error = None, None
            if isinstance(step, Run):
                try:
                    answer = self._exec(step.sql, step.params, step.safe)
                except TokenBucketError as exc:
                    error = exc
            elif isinstance(step, Keep):
                try:
                    answer = self._src().leases().run(step.sql, step.params, step.frees)
                except TokenBucketError as exc:
                    error = exc
            elif isinstance(step, Freed):
                self._src().leases().wait(step.seen, step.seconds)
            else:
                time.sleep(step.seconds)

    def _exec(self, sql: str, params: tuple[Any, ...], safe: bool) -> _core.Rows:
        """Run one statement; a lost connection is replaced and the call made
        again once when safe, else OutcomeUnknown."""
        src = self._src()
        for attempt in (0, 1):
            conn, token = src.take(attempt > 0)
            ran = False
            try:
                rows = _drivers.sync_run(src.kind, conn, sql, params)
                ran = True
                return rows
            except Exception as exc:
                err, lost = _core.failure(exc, safe=safe, again=src.reconnects and attempt == 0)
                if lost:
                    src.discard(conn)
                if err is not None:
                    raise err from exc
            finally:
                src.give(conn, token, ran)
        raise AssertionError("unreachable")

    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        """A connection of the limiter's, for SQL of your own (in autocommit
        unless it is a connection you gave in join mode)."""
        with self._src().borrow() as conn:
            yield conn

    def close(self) -> None:
        """Close the connections the limiter opened itself."""
        self._source.close()

    # -- taking tokens

    def try_(self, costs: Costs, cost: float | None = None, *,
             reserve: float | None = None) -> Decision:
        """Take the tokens now if every bucket holds them (all or nothing)."""
        one = self._try_one(costs, cost, reserve)
        if one is not None:
            return _core.combine(self._exec(*one, False))
        return self._drive(self._try(costs, cost, reserve))

    def peek(self, costs: Costs, cost: float | None = None, *,
             reserve: float | None = None) -> Decision:
        """What try_ would answer now, taking nothing."""
        return self._drive(self._peek(costs, cost, reserve))

    def acquire(self, costs: Costs, cost: float | None = None, *,
                timeout: Duration | None = None, reserve: float | None = None,
                wait: str = "client") -> Decision:
        """Take the tokens, waiting up to timeout (None: no limit).

        wait="client" (the default) sleeps here on the server's retry_after
        with jitter and holds no connection while it sleeps; it gives up at
        once when the buckets say they cannot grant before the timeout.
        wait="server" waits in the server (tb_acquire_all_wait): in arrival
        order, woken when the tokens are there, but holding a connection for
        the whole wait."""
        return self._drive(self._acquire(costs, cost, timeout, reserve, wait))

    def reserve(self, costs: Costs, cost: float | None = None, *,
                timeout: Duration | None = None, reserve: float | None = None,
                wait: str = "client", headers: Mapping[str, str] | None = None,
                lease: str | None = None, slots: int = 1,
                ttl: Duration | None = None) -> Reservation:
        """Take the tokens (as acquire) and return a Reservation to settle once;
        RateLimited when they were not granted within timeout.

        lease: an in-flight limit whose slots are taken together with the
        tokens, all or nothing (tb_lease_all), held as lease() holds them
        (no connection while waiting, the process's lease connection while
        held) and released when the block is left (or by release())."""
        if lease is None:
            plan = self._reserved(costs, cost, timeout, reserve, wait)
        elif wait != "client":
            raise ValueError("a lease with a reservation waits in the client (wait='client')")
        else:
            limit = lease
            c, decision, held = self._waited(limit, timeout, lambda left: self._reserve_leased(
                costs, cost, left, reserve, limit, slots, ttl))
            return Reservation(self, c, decision, self._mapping(headers), held)
        c, decision, held = self._drive(plan)
        return Reservation(self, c, decision, self._mapping(headers), held)

    # -- after a call

    def refund(self, name: str | Mapping[str, float], tokens: float | None = None, *,
               reserved_at: datetime | None = None) -> Any:
        """Give tokens back (tb_refund): the tokens held after, per bucket.
        reserved_at: the moment of the reservation (Decision.reserved_at), so
        that the parents it was charged to get them back too; without it,
        the buckets alone."""
        return self._drive(self._refund(name, tokens, reserved_at))

    def settle(self, name: str | Mapping[str, tuple[float, float]],
               reserved: float | None = None, used: float | None = None, *,
               reserved_at: datetime | None = None) -> Any:
        """Charge what was used against what was reserved (tb_settle);
        reserved_at as refund's."""
        return self._drive(self._settle(name, reserved, used, reserved_at))

    def sync(self, name: str | Mapping[str, float], remaining: float | None = None) -> Any:
        """Lower a bucket to what the provider says remains (tb_sync; never raises it)."""
        return self._drive(self._sync(name, remaining))

    def pause(self, names: str | Iterable[str], duration: Duration) -> None:
        """No grants from these buckets for anyone for this long (tb_pause)."""
        self._drive(self._pause(names, duration))

    def pause_until(self, names: str | Iterable[str], until: datetime) -> None:
        self._drive(self._pause_until(names, until))

    def observe(self, status: int, headers: Any, mapping: Mapping[str, str] | None = None,
                pause: Iterable[str] | None = None) -> _headers.Observation:
        """Sync buckets from a provider's response headers, through mapping
        ({header: bucket}; the limiter's headers= by default); on a 429, pause
        the buckets in pause (default: every bucket of the mapping)."""
        return self._drive(self._observe(status, headers, mapping, pause))

    # -- in-flight limits

    @contextlib.contextmanager
    def lease(self, name: str, slots: int = 1, *, timeout: Duration | None = 0,
              ttl: Duration | None = None, reserve: float | None = None,
              wait: str = "client") -> Iterator[int]:
        """Hold slots of an in-flight limit for the block (tb_lease); the
        lease id.  RateLimited when the slots were not had within timeout
        (0: at once; None: no limit).

        wait="client" (the default): the lease is held by the one connection
        this process keeps for its leases (so that the process's death frees
        it), and the wait happens here, holding no connection: woken by a
        release in this process, else asking again after a short pause.
        wait="server": tb_lease_wait on a connection of the pool, kept for
        the block (in arrival order across processes, but a connection per
        lease held or awaited)."""
        if wait == "server":
            with self._server_lease(name, slots, timeout, ttl, reserve) as lease:
                yield lease
            return
        if wait != "client":
            raise ValueError("wait is 'client' or 'server'")
        lease = self._waited(name, timeout,
                             lambda left: self._lease(name, slots, left, ttl, reserve, None))
        try:
            yield lease
        finally:
            self._release(lease)

    def _waited(self, name: str, timeout: Duration | None,
                plan: Callable[[float | None], Plan[T]]) -> T:
        """plan(the time left), run when it is this process's turn to wait
        for name (at once for a call that does not wait)."""
        limit = _core.seconds(timeout)
        if limit == 0:
            return self._drive(plan(0))
        keeper = self._src().leases()
        started = time.monotonic()
        if not keeper.take_turn(name, limit):
            raise RateLimited(f"no free slot of {name}", math.nan)
        try:
            return self._drive(plan(None if limit is None else
                                    max(0.0, limit - (time.monotonic() - started))))
        finally:
            keeper.give_turn(name)

    def _release(self, lease: int) -> None:
        self._drive(self._unlease(lease))

    @contextlib.contextmanager
    def _server_lease(self, name: str, slots: int, timeout: Duration | None,
                      ttl: Duration | None, reserve: float | None) -> Iterator[int]:
        st = self._drive(self._statements())
        src = self._src()
        with src.borrow() as conn:
            sql, params = _core.lease_call(st, name, slots, timeout, ttl, reserve)
            try:
                rows = _drivers.sync_run(src.kind, conn, sql, params)
            except Exception as exc:
                err, lost = _core.lease_failure(exc)
                if lost:
                    src.discard(conn)
                raise err from exc
            lease = _core.leased(rows, name)
            try:
                yield lease
            finally:
                try:
                    _drivers.sync_run(src.kind, conn, st["release"], (lease,))
                except Exception as exc:
                    src.discard(conn)     # its session's end frees the slots
                    err_ = _core.release_failure(exc)
                    if err_ is not None:
                        raise err_ from exc

    # -- budgets (extension 1.9)

    def cost(self, model: str, input_tokens: int, output_tokens: int = 0,
             cached: int = 0) -> Decimal:
        """What a call costs by the price of model in force now (tb_cost),
        exact, in the price's currency: input_tokens counts every input
        token, cached those of them read from the provider's cache."""
        return self._drive(self._cost(model, input_tokens, output_tokens, cached))

    def ensure_quota(self, name: str, budget: float, period: str | timedelta, *,
                     time_zone: str = "UTC", starts: datetime | None = None,
                     carry_max: float = 0, memory: bool = False) -> str:
        """A quota of budget tokens at each start of period ('1 month',
        '1 day', or a timedelta) by the calendar of time_zone, made if
        missing: 'created', 'changed' or 'unchanged' (tb_ensure_quota)."""
        return self._drive(self._ensure_quota(name, budget, period, time_zone, starts,
                                              carry_max, memory))

    def set_parent(self, child: str, parent: str | None) -> None:
        """Charge parent with every grant of child (None: no parent; tb_set_parent)."""
        self._drive(self._set_parent(child, parent))

    def set_alerts(self, bucket: str, thresholds: Iterable[float]) -> None:
        """A quota's alert thresholds, shares of its budget spent (tb_set_alerts;
        empty: none)."""
        self._drive(self._set_alerts(bucket, thresholds))

    def quotas(self, prefix: str | None = None) -> list[Quota]:
        """Each quota's spend in its current period (tb_quotas), those whose
        name starts with prefix when given."""
        return self._drive(self._quotas(prefix))

    # -- set-up

    def ensure(self, name: str, capacity: float, refill: float, per: Duration = 1.0,
               memory: bool = False) -> str:
        """Make the bucket if it is missing: 'created', 'changed' or 'unchanged'
        (tb_ensure, extension 1.8), or before 1.8 'created' or 'exists'."""
        return self._drive(self._ensure(name, capacity, refill, per, memory))

    def ensure_limit(self, name: str, max_in_flight: int, memory: bool = False) -> str:
        """The same for an in-flight limit (tb_ensure_limit, or tb_create_limit)."""
        return self._drive(self._ensure_limit(name, max_in_flight, memory))


class Reservation(_core.ReservationCore):
    """Tokens taken for one call, to be settled exactly once.

    As a context manager: leaving the block by an exception refunds
    everything not yet settled; leaving it normally keeps what was reserved
    charged.  settle(used) charges the real usage: a number settles the last
    bucket named (the token estimate, by convention {rpm: 1, tpm: estimate});
    a mapping settles the buckets it names.  A second settle (or refund)
    raises AlreadySettled."""

    limiter: Limiter

    def __init__(self, limiter: Limiter, costs: dict[str, float], decision: Decision,
                 mapping: Mapping[str, str], lease: int | None = None) -> None:
        super().__init__(limiter, costs, decision, mapping, lease)

    def settle(self, used: float | Mapping[str, float] | None = None) -> None:
        """Charge what the call used (None: what was reserved)."""
        self.limiter._drive(self._settle(used))

    def refund(self) -> None:
        """Give everything back: the call was not made (or not billed)."""
        self.limiter._drive(self._refund())

    def observe(self, status: int, headers: Any) -> _headers.Observation:
        """Sync the buckets from the provider's headers; on a 429, pause this
        reservation's buckets for the provider's retry-after."""
        return self.limiter._drive(self._observe(status, headers))

    def release(self) -> None:
        """Release the reservation's lease now (leaving the block does)."""
        lease = self._unlease()
        if lease is not None:
            self.limiter._release(lease)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if self._leaving(exc_type is not None):
                try:
                    self.refund()
                except TokenBucketError:
                    pass        # the call's own exception is the one to see
        finally:
            self.release()
