"""Limiter: the extension's calls from synchronous code (psycopg 3, psycopg2)."""
from __future__ import annotations

import contextlib
import math
import threading
import time
from datetime import datetime
from typing import Any, Iterator, Mapping

from . import _core, _drivers, headers as _headers
from ._core import Backoff, Costs, Decision, Duration, costs_of, seconds
from .errors import (AlreadyExists, AlreadySettled, ConnectionLost, ForkedConnection,
                     OutcomeUnknown, RateLimited, TokenBucketError, TransactionInProgress,
                     translate)


# ---- where connections come from -------------------------------------------
#
# Each source lends a connection with take() and has it back with give();
# borrow() is the two as a context manager, for lease() and connection().
# The limiter's own statements call take and give directly and say when the
# statement ran (ours): a connection in autocommit that has just answered
# is neither closed nor in a transaction, and is not asked again.

class _Single:
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
            if _drivers.sync_in_transaction(self.kind, conn):
                raise TransactionInProgress(
                    "the connection is inside a transaction",
                    hint="Commit it first, or use limiter.on(conn) to take part in it on purpose.")
            conn.autocommit = True
            return conn, True
        except BaseException:
            self.lock.release()
            raise

    def give(self, conn: Any, restore: bool, ours: bool = False) -> None:
        try:
            if restore and not _drivers.sync_closed(self.kind, conn):
                conn.autocommit = False
        finally:
            self.lock.release()

    @contextlib.contextmanager
    def borrow(self, fresh: bool = False) -> Iterator[Any]:
        conn, restore = self.take(fresh)
        try:
            yield conn
        finally:
            self.give(conn, restore)

    def discard(self, conn: Any) -> None:
        pass

    def forked(self) -> Any:
        raise ForkedConnection(
            "this limiter was given a connection made before the process forked",
            hint="Give the limiter a DSN or a pool, or make it in the child.")

    def close(self) -> None:
        pass


class _OwnPool:
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
            while True:
                if entry is None:
                    try:
                        conn = _drivers.sync_connect(self.kind, self.dsn, self.kwargs)
                    except Exception as exc:
                        err = translate(exc)
                        if isinstance(err, ConnectionLost):
                            err = ConnectionLost(f"could not connect: {err.message}")
                        raise err from exc
                    return conn, _drivers.poller(_drivers.sync_fileno(conn))
                conn, poll = entry
                # an idle session is sent nothing: something to read means the
                # server closed it (give kept none closed on this side)
                if fresh or poll is None or poll.poll(0):
                    _drivers.sync_close(conn)
                    with self.lock:
                        entry = self.idle.pop() if self.idle else None
                    continue
                return entry
        except BaseException:
            with self.lock:
                self.lent -= 1
                if self.waiting:
                    self.freed.notify()
            raise

    def give(self, conn: Any, poll: Any, ours: bool = False) -> None:
        keep = ours or not (_drivers.sync_closed(self.kind, conn) or
                            _drivers.sync_in_transaction(self.kind, conn))
        with self.lock:
            if keep:
                self.idle.append((conn, poll))
            self.lent -= 1
            if self.waiting:
                self.freed.notify()
        if not keep:
            _drivers.sync_close(conn)

    @contextlib.contextmanager
    def borrow(self, fresh: bool = False) -> Iterator[Any]:
        conn, poll = self.take(fresh)
        try:
            yield conn
        finally:
            self.give(conn, poll)

    def discard(self, conn: Any) -> None:
        _drivers.sync_close(conn)

    def forked(self) -> "_OwnPool":
        for conn, _ in self.idle:
            _drivers.disown(_drivers.sync_fileno(conn))
        self.idle = []
        return _OwnPool(self.dsn, self.kind, self.kwargs, self.max_size)

    def close(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for conn, _ in idle:
            _drivers.sync_close(conn)


class _PsycopgPool:
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
        raise ConnectionLost("every connection of the pool was closed by the server")

    def give(self, conn: Any, restore: bool, ours: bool = False) -> None:
        try:
            if restore and not conn.closed:
                conn.autocommit = False
        finally:
            self.pool.putconn(conn)

    @contextlib.contextmanager
    def borrow(self, fresh: bool = False) -> Iterator[Any]:
        conn, restore = self.take(fresh)
        try:
            yield conn
        finally:
            self.give(conn, restore)

    def discard(self, conn: Any) -> None:
        _drivers.sync_close(conn)

    def forked(self) -> _OwnPool:
        # a newer psycopg_pool (Debian sid's) keeps None when given no kwargs
        kwargs = {k: v for k, v in (self.pool.kwargs or {}).items() if k != "autocommit"}
        return _OwnPool(self.pool.conninfo, "psycopg", kwargs, self.pool.max_size)

    def close(self) -> None:
        pass


def _source(obj: Any, driver: str | None, pool_size: int,
            connect_kwargs: dict[str, Any] | None, join: bool) -> Any:
    if isinstance(obj, str):
        if driver is None:
            try:
                import psycopg  # noqa: F401
                driver = "psycopg"
            except ImportError:
                driver = "psycopg2"
        if driver not in ("psycopg", "psycopg2"):
            raise ValueError("driver is 'psycopg' or 'psycopg2' for a Limiter")
        return _OwnPool(obj, driver, dict(connect_kwargs or {}), pool_size)
    kind = _drivers.kind_of(obj)
    if kind == "psycopg_pool":
        if type(obj).__name__ != "ConnectionPool":
            raise TypeError("an async pool goes to AsyncLimiter")
        return _PsycopgPool(obj)
    if kind in ("psycopg", "psycopg2"):
        if type(obj).__name__.startswith("Async"):
            raise TypeError("an async connection goes to AsyncLimiter")
        return _Single(obj, kind, join)
    raise TypeError(f"a Limiter takes a DSN, a psycopg or psycopg2 connection, or a "
                    f"psycopg_pool.ConnectionPool, not {type(obj).__name__}")


# ---- the limiter ------------------------------------------------------------

class Limiter:
    """Token buckets and in-flight limits of the tokenbucket extension, from
    synchronous code.

    source: a DSN (the limiter opens up to pool_size connections of its own,
    with psycopg 3 if installed, else psycopg2; driver= to choose), a
    psycopg 3 or psycopg2 connection, or a psycopg_pool.ConnectionPool.
    schema: the extension's schema (found on first use when None).
    headers: the default {header: bucket} mapping of observe (see headers).
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

    # -- plumbing

    def on(self, conn: Any) -> "Limiter":
        """A limiter whose calls run on conn inside whatever transaction it has
        open: its grants, refunds and settlements commit or roll back with the
        caller's own writes."""
        lim = Limiter(conn, schema=self.schema, headers=self.headers, jitter=self.jitter,
                      max_jitter=self.max_jitter, _join=True)
        lim._st = self._st if self._st is not None and lim._source.kind == self._source.kind \
            else None
        return lim

    def _src(self) -> Any:
        if _drivers.FORKS != self._forks:
            # a forked child: never the parent's connections
            self._source = self._source.forked()
            self._forks = _drivers.FORKS
        return self._source

    def _statements(self) -> _core.Statements:
        if self._st is None:
            schema = self.schema
            if schema is None:
                rows = self._exec(_core.SCHEMA_QUERY, (), safe=True, raw=True)
                if not rows:
                    raise TokenBucketError("the tokenbucket extension is not installed in "
                                           "this database", hint="CREATE EXTENSION tokenbucket;")
                schema = rows[0][0]
            self._st = _core.Statements(schema, "format")
        return self._st

    def _exec(self, key: str, params: tuple, *, safe: bool, raw: bool = False) -> list:
        """Run one statement; a lost connection is replaced and the call made
        again once when safe, else OutcomeUnknown."""
        sql = key if raw else self._statements()[key]
        src = self._src()
        for attempt in (0, 1):
            conn, token = src.take(attempt > 0)
            ran = False
            try:
                rows = _drivers.sync_run(src.kind, conn, sql, params)
                ran = True
                return rows
            except Exception as exc:
                err = translate(exc)
                if not isinstance(err, ConnectionLost):
                    raise err from exc
                src.discard(conn)
                if safe and src.reconnects and attempt == 0:
                    continue
                if not safe:
                    raise OutcomeUnknown(
                        "the connection was lost during the call: whether it took "
                        "effect is unknown", detail=str(exc).strip()) from exc
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
        if reserve is None and type(costs) is str:     # one bucket: the call made most
            st = self._st or self._statements()
            return _core.combine(self._exec(st.sql["try"], (costs, _core.cost_of(cost)),
                                            safe=False, raw=True))
        c = costs_of(costs, cost)
        sql, params, names = _core.try_call(self._statements(), c, reserve)
        return _core.combine(self._exec(sql, params, safe=False, raw=True), names)

    def peek(self, costs: Costs, cost: float | None = None, *,
             reserve: float | None = None) -> Decision:
        """What try_ would answer now, taking nothing."""
        c = costs_of(costs, cost)
        sql, params, names = _core.peek_call(self._statements(), c, reserve)
        return _core.combine(self._exec(sql, params, safe=True, raw=True), names)

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
        c = costs_of(costs, cost)
        limit = seconds(timeout)
        if wait == "server":
            sql, params = _core.wait_call(self._statements(), c, limit, reserve)
            granted = bool(self._exec(sql, params, safe=False, raw=True)[0][0])
            return _core.waited(granted) if granted else self.peek(c, reserve=reserve)
        if wait != "client":
            raise ValueError("wait is 'client' or 'server'")
        deadline = None if limit is None else time.monotonic() + limit
        backoff = Backoff(self.jitter, self.max_jitter)
        while True:
            decision = self.try_(c, reserve=reserve)
            if decision.granted:
                return decision
            now = time.monotonic()
            if deadline is not None and now + decision.retry_after > deadline:
                return decision
            pause = backoff.next(decision.retry_after)
            time.sleep(pause if deadline is None else min(pause, deadline - now))

    def reserve(self, costs: Costs, cost: float | None = None, *,
                timeout: Duration | None = None, reserve: float | None = None,
                wait: str = "client", headers: Mapping[str, str] | None = None) -> "Reservation":
        """Take the tokens (as acquire) and return a Reservation to settle once;
        RateLimited when they were not granted within timeout."""
        c = costs_of(costs, cost)
        decision = self.acquire(c, timeout=timeout, reserve=reserve, wait=wait)
        if not decision.granted:
            raise RateLimited(f"not granted within {seconds(timeout)} s",
                              decision.retry_after, decision)
        return Reservation(self, c, decision, self.headers if headers is None else headers)

    # -- after a call

    def refund(self, name: str | Mapping[str, float], tokens: float | None = None) -> Any:
        """Give tokens back (tb_refund): the tokens held after, per bucket."""
        amounts = {name: tokens} if isinstance(name, str) else dict(name)
        names, values = _core.sorted_pairs(amounts)
        rows = self._exec("refund", (names, values), safe=False)
        return _one(name, names, rows)

    def settle(self, name: str | Mapping[str, tuple[float, float]],
               reserved: float | None = None, used: float | None = None) -> Any:
        """Charge what was used against what was reserved (tb_settle)."""
        pairs = {name: (reserved, used)} if isinstance(name, str) else dict(name)
        names = sorted(pairs)
        rows = self._exec("settle", (names, [float(pairs[n][0]) for n in names],
                                     [float(pairs[n][1]) for n in names]), safe=False)
        return _one(name, names, rows)

    def sync(self, name: str | Mapping[str, float], remaining: float | None = None) -> Any:
        """Lower a bucket to what the provider says remains (tb_sync; never raises it)."""
        amounts = {name: remaining} if isinstance(name, str) else dict(name)
        names, values = _core.sorted_pairs(amounts)
        return _one(name, names, self._exec("sync", (names, values), safe=True))

    def pause(self, names: str | list[str], duration: Duration) -> None:
        """No grants from these buckets for anyone for this long (tb_pause)."""
        names = [names] if isinstance(names, str) else sorted(names)
        self._exec("pause", (names, seconds(duration)), safe=True)

    def pause_until(self, names: str | list[str], until: datetime) -> None:
        names = [names] if isinstance(names, str) else sorted(names)
        self._exec("pause_until", (names, until), safe=True)

    def observe(self, status: int, headers: Any, mapping: Mapping[str, str] | None = None,
                pause: list[str] | None = None) -> _headers.Observation:
        """Sync buckets from a provider's response headers, through mapping
        ({header: bucket}; the limiter's headers= by default); on a 429, pause
        the buckets in pause (default: every bucket of the mapping)."""
        mapping = self.headers if mapping is None else mapping
        obs = _headers.parse(status, headers)
        sync, pause_for = _headers.plan(obs, mapping)
        if sync:
            obs.synced = self.sync(sync)
        if pause_for is not None:
            targets = sorted(set(pause if pause is not None else mapping.values()))
            if targets:
                self.pause(targets, pause_for)
                obs.paused = {n: pause_for for n in targets}
        return obs

    # -- in-flight limits

    @contextlib.contextmanager
    def lease(self, name: str, slots: int = 1, *, timeout: Duration | None = 0,
              ttl: Duration | None = None, reserve: float | None = None) -> Iterator[int]:
        """Hold slots of an in-flight limit for the block (tb_lease; with a
        timeout other than 0, tb_lease_wait: None waits without limit).  The
        lease is held by a connection kept for the block, so that it is freed
        if this process dies.  RateLimited when the slots were not had."""
        src = self._src()
        st = self._statements()
        with src.borrow() as conn:
            wait = seconds(timeout)
            if wait == 0:
                sql, params = st["lease"], (name, slots, seconds(ttl), reserve)
            else:
                sql, params = st["lease_wait"], (name, slots, seconds(ttl), wait, reserve)
            try:
                lease = _drivers.sync_run(src.kind, conn, sql, params)[0][0]
            except Exception as exc:
                err = translate(exc)
                if isinstance(err, ConnectionLost):
                    src.discard(conn)
                    raise OutcomeUnknown("the connection was lost while leasing") from exc
                raise err from exc
            if lease is None:
                raise RateLimited(f"no free slot of {name}", math.nan)
            try:
                yield lease
            finally:
                try:
                    _drivers.sync_run(src.kind, conn, st["release"], (lease,))
                except Exception as exc:
                    src.discard(conn)     # its session's end frees the slots
                    if not isinstance(translate(exc), ConnectionLost):
                        raise translate(exc) from exc

    # -- set-up

    def ensure(self, name: str, capacity: float, refill: float, per: Duration = 1.0,
               memory: bool = False) -> str:
        """Make the bucket if it is missing: 'created', 'changed' or 'unchanged'
        (tb_ensure, extension 1.8), or before 1.8 'created' or 'exists'."""
        if self._ensure_available():
            return self._exec("ensure", (name, capacity, refill, seconds(per), memory),
                              safe=True)[0][0]
        # --- before 1.8: create, and take "exists" for an answer ---
        try:
            self._exec("create", (name, capacity, refill, seconds(per), memory), safe=True)
            return "created"
        except AlreadyExists:
            return "exists"

    def ensure_limit(self, name: str, max_in_flight: int, memory: bool = False) -> str:
        """The same for an in-flight limit (tb_ensure_limit, or tb_create_limit)."""
        if self._ensure_available():
            return self._exec("ensure_limit", (name, max_in_flight, memory), safe=True)[0][0]
        # --- before 1.8 ---
        try:
            self._exec("create_limit", (name, max_in_flight, memory), safe=True)
            return "created"
        except AlreadyExists:
            return "exists"

    def _ensure_available(self) -> bool:
        if self._has_ensure is None:
            sig = self._statements().prefix + "tb_ensure(text,float8,float8,interval,boolean)"
            self._has_ensure = bool(self._exec("has_ensure", (sig,), safe=True)[0][0])
        return self._has_ensure


def _one(given: Any, names: list[str], rows: list) -> Any:
    values = {n: r[0] for n, r in zip(names, rows)}
    return values[given] if isinstance(given, str) else values


class Reservation:
    """Tokens taken for one call, to be settled exactly once.

    As a context manager: leaving the block by an exception refunds
    everything not yet settled; leaving it normally keeps what was reserved
    charged.  settle(used) charges the real usage: a number settles the last
    bucket named (the token estimate, by convention {rpm: 1, tpm: estimate});
    a mapping settles the buckets it names.  A second settle (or refund)
    raises AlreadySettled."""

    def __init__(self, limiter: Any, costs: dict[str, float], decision: Decision,
                 mapping: Mapping[str, str]) -> None:
        self.limiter = limiter
        self.costs = costs
        self.decision = decision
        self.mapping = mapping
        self.settled = False
        self.observation: _headers.Observation | None = None

    def _used(self, used: float | Mapping[str, float]) -> dict[str, float]:
        if isinstance(used, Mapping):
            unknown = set(used) - set(self.costs)
            if unknown:
                raise ValueError(f"not in this reservation: {', '.join(sorted(unknown))}")
            return {k: float(v) for k, v in used.items()}
        return {list(self.costs)[-1]: float(used)}

    def _claim(self) -> None:
        if self.settled:
            raise AlreadySettled("this reservation was settled already")
        self.settled = True

    def _settlement(self, used: float | Mapping[str, float]) -> dict[str, tuple[float, float]]:
        return {n: (self.costs[n], u) for n, u in self._used(used).items() if u != self.costs[n]}

    def settle(self, used: float | Mapping[str, float] | None = None) -> None:
        """Charge what the call used (None: what was reserved)."""
        pairs = self._settlement(used) if used is not None else {}
        self._claim()
        if pairs:
            self.limiter.settle(pairs)

    def refund(self) -> None:
        """Give everything back: the call was not made (or not billed)."""
        self._claim()
        self.limiter.refund(self.costs)

    def observe(self, status: int, headers: Any) -> _headers.Observation:
        """Sync the buckets from the provider's headers; on a 429, pause this
        reservation's buckets for the provider's retry-after."""
        self.observation = self.limiter.observe(status, headers, self.mapping,
                                                pause=list(self.costs))
        return self.observation

    def __enter__(self) -> "Reservation":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.settled:
            return
        if exc_type is None:
            self.settled = True
            return
        try:
            self.refund()
        except TokenBucketError:
            pass        # the call's own exception is the one to see
