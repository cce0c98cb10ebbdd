"""What the sync and async limiters share: everything but the I/O.

Every call of a limiter is written once here, as a plan: a generator that
yields the steps it needs carried out, Run (a statement; its rows are sent
back) or Sleep, and returns the call's result.  Limiter (_sync) carries
plans out with blocking calls and time.sleep, AsyncLimiter (_async) with
awaits and asyncio.sleep; neither decides anything else.  An error of a
statement is thrown into the plan where it was yielded, so that a plan
can catch it (ensure before extension 1.8 takes AlreadyExists for an
answer).

The SQL is written once with $n parameters, each cast to its type in the
statement itself, so that every driver sends plain Python floats, strings
and lists and never meets an ambiguous overload (tb_pause(unknown, numeric))
or an interval it spells its own way: durations go as float seconds through
make_interval.
"""
from __future__ import annotations

import collections
import math
import random
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Generator, Iterable, Mapping, TypeVar, Union

from . import _drivers, headers as _headers
from .errors import (AlreadyExists, AlreadySettled, ConnectionLost, OutcomeUnknown,
                     RateLimited, TokenBucketError, TransactionInProgress, translate)

Costs = Union[str, Mapping[str, float], Iterable[str]]
Duration = Union[float, int, timedelta]
Rows = list[Any]
T = TypeVar("T")


# ---- what a call answers ----------------------------------------------------

@dataclass(frozen=True, slots=True)
class BucketDecision:
    """One bucket's part of a decision (a row of tb_try_all)."""
    name: str
    granted: bool
    remaining: float
    retry_after: float
    reset_after: float


@dataclass(frozen=True, slots=True)
class Decision:
    """What the server answered.  granted: the tokens were taken (for peek:
    would be); remaining: tokens left (the least over the buckets; NaN after
    a wait in the server, which reports no more); retry_after: seconds until
    the request could be granted (0 when granted); reset_after: seconds until
    full (the longest over the buckets); buckets: each bucket's row;
    denied_by: None when granted, else the bucket that refused (one called,
    or a parent of one: extension 1.9), of several the one that waits
    longest; None from a server that does not say (before 1.9, the proxy);
    reserved_at: a reservation's (reserve, and acquire with wait="server"),
    the server's now() of the transaction that took the tokens, the moment
    to give settle and refund (reserved_at=) so that they give back to the
    parents charged (None: not granted, or try_ and the others)."""
    granted: bool
    remaining: float
    retry_after: float
    reset_after: float
    buckets: tuple[BucketDecision, ...] = field(default=())
    denied_by: str | None = None
    reserved_at: datetime | None = None

    def __bool__(self) -> bool:
        return self.granted


@dataclass(frozen=True, slots=True)
class Quota:
    """A quota's spend in its current period (a row of tb_quotas): budget
    (tokens added at each period's start), capacity, remaining (below 0: in
    debt), spent (budget - remaining, at least 0), period (as PostgreSQL
    writes it: '1 mon', '1 day'), time_zone, period_start and period_end,
    memory, and the template it was made from (or None)."""
    name: str
    budget: float
    capacity: float
    remaining: float
    spent: float
    period: str
    time_zone: str
    period_start: datetime
    period_end: datetime
    memory: bool
    template: str | None


def combine(rows: Rows, names: list[str] | None = None) -> Decision:
    """A Decision from tb_try/tb_peek's row (granted, remaining, retry, reset,
    denied_by), or from tb_try_all's rows (name, granted, remaining, retry,
    reset); a reservation's try's rows end with now(), the moment of a grant."""
    if names is None:
        row = rows[0]
        at = row[5] if row[0] and len(row) > 5 else None
        return Decision(bool(row[0]), row[1], row[2], row[3], denied_by=row[4], reserved_at=at)
    parts = tuple(BucketDecision(r[0], bool(r[1]), r[2], r[3], r[4]) for r in rows)
    granted = all(p.granted for p in parts)
    longest = max(parts, key=lambda p: p.retry_after)
    at = rows[0][5] if granted and len(rows[0]) > 5 else None
    return Decision(granted, min(p.remaining for p in parts),
                    longest.retry_after, max(p.reset_after for p in parts),
                    parts, None if granted else longest.name, at)


WAITED = float("nan")


def waited(granted: bool, at: datetime | None = None) -> Decision:
    """The decision of a wait in the server, which answers only yes or no
    (at: the server's now() of a grant)."""
    return Decision(granted, WAITED, 0.0 if granted else math.inf, WAITED, reserved_at=at)


def one(given: object, names: list[str], rows: Rows) -> Any:
    """A call on several buckets answers a row each: the value for a name
    given alone, else {name: value}."""
    values = {n: r[0] for n, r in zip(names, rows)}
    return values[given] if isinstance(given, str) else values


# ---- arguments ------------------------------------------------------------------

def costs_of(spec: Costs, cost: float | None = None) -> dict[str, float]:
    """{name: cost} from a name (with cost, 1 by default), a mapping, or names (1 each)."""
    if isinstance(spec, str):
        out = {spec: 1.0 if cost is None else float(cost)}
    elif isinstance(spec, Mapping):
        out = {str(k): float(v) for k, v in spec.items()}
    else:
        out = {str(k): 1.0 for k in spec}
    if cost is not None and not isinstance(spec, str):
        raise TypeError("cost= goes with a single bucket name; give a mapping for several")
    if not out:
        raise ValueError("no bucket named")
    return out


def seconds(value: Duration | None) -> float | None:
    """Seconds as a float from a number or a timedelta (None stays None)."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise TypeError(f"a duration is seconds or a timedelta, not {type(value).__name__}")


def duration(value: Duration) -> float:
    """seconds() of a duration that must be given."""
    out = seconds(value)
    if out is None:
        raise TypeError("a duration is required: seconds or a timedelta")
    return out


def amounts(name: str | Mapping[str, float], value: float | None,
            what: str) -> dict[str, float]:
    """{name: value} for a call on one bucket, or the mapping for several."""
    if isinstance(name, str):
        if value is None:
            raise TypeError(f"{what}= goes with a bucket name; give a mapping for several")
        return {name: float(value)}
    if value is not None:
        raise TypeError(f"{what}= goes with a single bucket name, not a mapping")
    return {n: float(v) for n, v in name.items()}


def sorted_pairs(values: Mapping[str, float]) -> tuple[list[str], list[float]]:
    """Names sorted, and their values: two calls on the same buckets lock
    their rows in one order."""
    names = sorted(values)
    return names, [values[n] for n in names]


def names_of(names: str | Iterable[str]) -> list[str]:
    return [names] if isinstance(names, str) else sorted(names)


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# ---- the SQL ------------------------------------------------------------------------

_PARAM = re.compile(r"\$\d+")


class Statements:
    """The SQL of every call, qualified with the extension's schema (None:
    unqualified, found through search_path), in the driver's paramstyle."""

    def __init__(self, schema: str | None, paramstyle: str) -> None:
        s = "" if schema is None else quote_ident(schema) + "."
        sql = {
            "try": f"SELECT t.granted, t.remaining, t.retry_after_seconds, t.reset_after_seconds, "
                   f"to_jsonb(t) ->> 'denied_by' FROM {s}tb_try($1::text, $2::float8) AS t",
            "try_r": f"SELECT t.granted, t.remaining, t.retry_after_seconds, t.reset_after_seconds, "
                     f"to_jsonb(t) ->> 'denied_by' FROM {s}tb_try($1::text, $2::float8, $3::float8) AS t",
            "try_all": f"SELECT name, granted, remaining, retry_after_seconds, reset_after_seconds "
                       f"FROM {s}tb_try_all($1::text[], $2::float8[])",
            "try_all_r": f"SELECT name, granted, remaining, retry_after_seconds, "
                         f"reset_after_seconds FROM {s}tb_try_all($1::text[], $2::float8[], $3::float8)",
            "peek": f"SELECT t.granted, t.remaining, t.retry_after_seconds, t.reset_after_seconds, "
                    f"to_jsonb(t) ->> 'denied_by' FROM {s}tb_peek($1::text, $2::float8) AS t",
            "peek_r": f"SELECT t.granted, t.remaining, t.retry_after_seconds, t.reset_after_seconds, "
                      f"to_jsonb(t) ->> 'denied_by' FROM {s}tb_peek($1::text, $2::float8, $3::float8) AS t",
            # tb_peek has no form for several buckets: one row each, one round trip
            "peek_all": f"SELECT u.n, p.granted, p.remaining, p.retry_after_seconds, "
                        f"p.reset_after_seconds FROM unnest($1::text[], $2::float8[]) "
                        f"WITH ORDINALITY AS u(n, c, i), LATERAL {s}tb_peek(u.n, u.c) AS p ORDER BY u.i",
            "peek_all_r": f"SELECT u.n, p.granted, p.remaining, p.retry_after_seconds, "
                          f"p.reset_after_seconds FROM unnest($1::text[], $2::float8[]) "
                          f"WITH ORDINALITY AS u(n, c, i), LATERAL {s}tb_peek(u.n, u.c, $3::float8) "
                          f"AS p ORDER BY u.i",
            "wait": f"SELECT {s}tb_acquire_wait($1::text, $2::float8, "
                    f"make_interval(secs => $3::float8)), now()",
            "wait_all": f"SELECT {s}tb_acquire_all_wait($1::text[], $2::float8[], "
                        f"make_interval(secs => $3::float8)), now()",
            # names sorted by the caller: two refunds of the same buckets lock
            # their rows in one order
            "refund": f"SELECT {s}tb_refund(u.n, u.t) FROM unnest($1::text[], $2::float8[]) AS u(n, t)",
            "settle": f"SELECT {s}tb_settle(u.n, u.r, u.u) "
                      f"FROM unnest($1::text[], $2::float8[], $3::float8[]) AS u(n, r, u)",
            # with the reservation's moment: back up the parents it was charged to (1.9)
            "refund_at": f"SELECT {s}tb_refund(u.n, u.t, a.a) FROM unnest($1::text[], "
                         f"$2::float8[]) AS u(n, t), CAST($3::timestamptz AS timestamptz) AS a(a)",
            "settle_at": f"SELECT {s}tb_settle(u.n, u.r, u.u, a.a) "
                         f"FROM unnest($1::text[], $2::float8[], $3::float8[]) AS u(n, r, u), "
                         f"CAST($4::timestamptz AS timestamptz) AS a(a)",
            "has_at": "SELECT coalesce(has_function_privilege(to_regprocedure($1::text)::oid, "
                      "'EXECUTE') AND has_function_privilege(to_regprocedure($2::text)::oid, "
                      "'EXECUTE'), false)",
            "sync": f"SELECT {s}tb_sync(u.n, u.r) FROM unnest($1::text[], $2::float8[]) AS u(n, r)",
            "pause": f"SELECT {s}tb_pause(u.n, d.d) FROM unnest($1::text[]) AS u(n), "
                     f"make_interval(secs => $2::float8) AS d(d)",
            "pause_until": f"SELECT {s}tb_pause_until(u.n, d.d) FROM unnest($1::text[]) AS u(n), "
                           f"CAST($2::timestamptz AS timestamptz) AS d(d)",
            "lease": f"SELECT {s}tb_lease($1::text, $2::int4, 'session', "
                     f"make_interval(secs => $3::float8), $4::float8)",
            "lease_wait": f"SELECT {s}tb_lease_wait($1::text, $2::int4, 'session', "
                          f"make_interval(secs => $3::float8), make_interval(secs => $4::float8), $5::float8)",
            "lease_all": f"SELECT {s}tb_lease_all($1::text, $2::text[], $3::float8[], $4::int4, "
                         f"'session', make_interval(secs => $5::float8), $6::float8), now()",
            "release": f"SELECT {s}tb_release($1::int8)",
            "has_ensure": "SELECT to_regprocedure($1::text) IS NOT NULL",
            "ensure": f"SELECT {s}tb_ensure($1::text, $2::float8, $3::float8, "
                      f"make_interval(secs => $4::float8), $5::bool)",
            "ensure_limit": f"SELECT {s}tb_ensure_limit($1::text, $2::int4, $3::bool)",
            # before 1.8: tb_create, with 23505 meaning it exists already
            "create": f"SELECT {s}tb_create($1::text, $2::float8, $3::float8, "
                      f"make_interval(secs => $4::float8), $5::bool)",
            "create_limit": f"SELECT {s}tb_create_limit($1::text, $2::int4, $3::bool)",
            # budgets (extension 1.9): numeric as text, read into a Decimal
            "cost": f"SELECT {s}tb_cost($1::text, $2::int8, $3::int8, $4::int8)::text",
            "ensure_quota": f"SELECT {s}tb_ensure_quota($1::text, $2::float8, $3::text::interval, "
                            f"$4::text, $5::timestamp, $6::float8, $7::bool)",
            "set_parent": f"SELECT {s}tb_set_parent($1::text, $2::text)",
            "set_alerts": f"SELECT {s}tb_set_alerts($1::text, $2::float8[])",
            "quotas": f"SELECT name, budget, capacity, remaining, spent, period::text, time_zone, "
                      f"period_start, period_end, memory, template FROM {s}tb_quotas "
                      f"WHERE starts_with(name, coalesce($1::text, '')) ORDER BY name",
        }
        # a reservation's grant reads now() in its statement too: the moment
        # settle and refund give back (reserved_at); try_ goes without (a
        # timestamptz column costs a try_ a tenth more)
        for k in ("try", "try_r", "try_all", "try_all_r"):
            sql[k + "_at"] = sql[k].replace(" FROM ", ", now() FROM ", 1)
        self.prefix = s
        for text in sql.values():   # "%s" takes parameters in the order written
            used = [int(p[1:]) for p in _PARAM.findall(text)]
            assert used == list(range(1, len(used) + 1)), text
        if paramstyle == "format":
            sql = {k: _PARAM.sub("%s", v) for k, v in sql.items()}
        self.sql = sql

    def __getitem__(self, key: str) -> str:
        return self.sql[key]


SCHEMA_QUERY = ("SELECT n.nspname FROM pg_catalog.pg_extension e "
                "JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace "
                "WHERE e.extname = 'tokenbucket'")

Call = tuple[str, tuple[Any, ...], Union[list[str], None]]


def try_call(st: Statements, costs: dict[str, float], reserve: float | None,
             at: bool = False) -> Call:
    """(sql, params, names or None) of the grant for these costs (at: with
    the server's now(), for a reservation)."""
    end = "_at" if at else ""
    if len(costs) == 1:
        (name, cost), = costs.items()
        if reserve is None:
            return st["try" + end], (name, cost), None
        return st["try_r" + end], (name, cost, reserve), None
    names = list(costs)
    values = [costs[n] for n in names]
    if reserve is None:
        return st["try_all" + end], (names, values), names
    return st["try_all_r" + end], (names, values, reserve), names


def peek_call(st: Statements, costs: dict[str, float], reserve: float | None) -> Call:
    if len(costs) == 1:
        (name, cost), = costs.items()
        if reserve is None:
            return st["peek"], (name, cost), None
        return st["peek_r"], (name, cost, reserve), None
    names = list(costs)
    values = [costs[n] for n in names]
    if reserve is None:
        return st["peek_all"], (names, values), names
    return st["peek_all_r"], (names, values, reserve), names


def wait_call(st: Statements, costs: dict[str, float], timeout: float | None,
              reserve: float | None) -> tuple[str, tuple[Any, ...]]:
    if reserve is not None:
        raise ValueError("a wait in the server takes no reserve (tb_acquire_wait has none)")
    if len(costs) == 1:
        (name, cost), = costs.items()
        return st["wait"], (name, cost, timeout)
    names = list(costs)
    return st["wait_all"], (names, [costs[n] for n in names], timeout)


def lease_call(st: Statements, name: str, slots: int, timeout: Duration | None,
               ttl: Duration | None, reserve: float | None) -> tuple[str, tuple[Any, ...]]:
    """tb_lease for timeout 0, else tb_lease_wait (None: no limit)."""
    wait = seconds(timeout)
    if wait == 0:
        return st["lease"], (name, slots, seconds(ttl), reserve)
    return st["lease_wait"], (name, slots, seconds(ttl), wait, reserve)


def lease_all_call(st: Statements, name: str, slots: int, costs: dict[str, float],
                   ttl: Duration | None, reserve: float | None) -> tuple[str, tuple[Any, ...]]:
    """tb_lease_all: the lease and the tokens, all or nothing, never waiting."""
    names, values = list(costs), list(costs.values())
    return st["lease_all"], (name, names, values, slots, seconds(ttl), reserve)


def leased(rows: Rows, name: str) -> int:
    """The lease id tb_lease answered, or RateLimited when it had no slot."""
    lease = rows[0][0]
    if lease is None:
        raise RateLimited(f"no free slot of {name}", math.nan)
    return int(lease)


# ---- waiting ------------------------------------------------------------------------

class Backoff:
    """Sleeps of a client-side wait: the server's retry_after, plus a random
    part that starts at a tenth of it and doubles with each refusal (up to
    max_jitter), so that many waiters of one bucket spread out instead of
    all asking again at the same moment."""

    def __init__(self, jitter: float = 0.1, max_jitter: float = 1.0) -> None:
        self.jitter = jitter
        self.max_jitter = max_jitter
        self.window = 0.0

    def next(self, retry_after: float) -> float:
        self.window = min(self.max_jitter, max(self.window * 2, retry_after * self.jitter, 0.001))
        return retry_after + random.uniform(0, self.window)


# ---- errors -------------------------------------------------------------------------

def failure(exc: Exception, *, safe: bool, again: bool) -> tuple[TokenBucketError | None, bool]:
    """What a driver's exception raised by a statement means: (the exception
    to raise, or None to make the call again on a new connection; whether the
    connection is lost, to be discarded).  A lost connection is worth a second
    try only for a call that is safe to repeat (again: the source can replace
    it, and this was the first try); for one that takes or gives tokens or
    slots, whether it took effect is unknown."""
    err = translate(exc)
    if not isinstance(err, ConnectionLost):
        return err, False
    if safe and again:
        return None, True
    if not safe:
        return OutcomeUnknown("the connection was lost during the call: whether it took "
                              "effect is unknown", detail=str(exc).strip()), True
    return err, True


def connect_failure(exc: BaseException) -> TokenBucketError:
    """The exception for a failure to open a connection."""
    err = translate(exc)
    if isinstance(err, ConnectionLost):
        return ConnectionLost(f"could not connect: {err.message}")
    return err


def lease_failure(exc: Exception) -> tuple[TokenBucketError, bool]:
    """(the exception, whether the connection is lost) for a failed tb_lease:
    a lost connection leaves the lease's fate unknown."""
    err = translate(exc)
    if isinstance(err, ConnectionLost):
        return OutcomeUnknown("the connection was lost while leasing"), True
    return err, False


def release_failure(exc: Exception) -> TokenBucketError | None:
    """The exception for a failed tb_release, None for a lost connection
    (its session's end frees the slots)."""
    err = translate(exc)
    return None if isinstance(err, ConnectionLost) else err


def pool_closed() -> ConnectionLost:
    return ConnectionLost("every connection of the pool was closed by the server")


def in_transaction() -> TransactionInProgress:
    return TransactionInProgress(
        "the connection is inside a transaction",
        hint="Commit it first, or use limiter.on(conn) to take part in it on purpose.")


# ---- sources --------------------------------------------------------------------------

def classify(obj: object, driver: str | None, asynchronous: bool) -> tuple[str, str]:
    """(what, kind) of a limiter's source: what is "dsn", "pool" or
    "connection", kind the driver ("psycopg", "psycopg2", "asyncpg").  A
    DSN's driver is driver=, else the first installed of psycopg 3 and
    psycopg2 (Limiter) or asyncpg and psycopg 3 (AsyncLimiter)."""
    choices = ("asyncpg", "psycopg") if asynchronous else ("psycopg", "psycopg2")
    if isinstance(obj, str):
        if driver is None:
            try:
                __import__(choices[0])
                driver = choices[0]
            except ImportError:
                driver = choices[1]
        if driver not in choices:
            raise ValueError(f"driver is {choices[0]!r} or {choices[1]!r} for "
                             f"{'an AsyncLimiter' if asynchronous else 'a Limiter'}")
        return "dsn", driver
    kind = _drivers.kind_of(obj)
    name = type(obj).__name__
    is_async = kind in ("asyncpg", "asyncpg_pool") or name.startswith("Async")
    if kind and is_async != asynchronous:
        raise TypeError(f"a {name} goes to {'Limiter' if is_async else 'AsyncLimiter'}")
    if kind == "psycopg_pool":
        return "pool", "psycopg"
    if kind == "asyncpg_pool":
        return "pool", "asyncpg"
    if kind:
        return "connection", kind
    raise TypeError(
        "an AsyncLimiter takes a DSN, an asyncpg connection or pool, or a psycopg "
        f"AsyncConnection or AsyncConnectionPool, not {name}" if asynchronous else
        "a Limiter takes a DSN, a psycopg or psycopg2 connection, or a "
        f"psycopg_pool.ConnectionPool, not {name}")


# ---- the calls ------------------------------------------------------------------------

@dataclass(slots=True)
class Run:
    """A step of a plan: run one statement; its rows are sent back.  safe:
    the call may be made again on a new connection when the connection is
    lost (it takes and gives nothing)."""
    sql: str
    params: tuple[Any, ...]
    safe: bool


@dataclass(slots=True)
class Sleep:
    """A step of a plan: sleep, holding no connection."""
    seconds: float


@dataclass(slots=True)
class Keep:
    """A step of a plan: run one statement on the connection that holds
    the process's leases (see Limiter.lease); (its rows, how many leases the
    process had released just before it ran) are sent back."""
    sql: str
    params: tuple[Any, ...]
    frees: bool = False     # a release: wakes a waiter of this process once it ran


@dataclass(slots=True)
class Freed:
    """A step of a plan: sleep until this process releases a lease after
    the seen-th (woken one waiter at a time, in order), or for seconds at
    most (a lease released by another process is seen only by asking again)."""
    seen: int
    seconds: float


# the longest pause between two asks for a slot another process may free
LEASE_POLL = 0.25


class Turns:
    """Whose turn it is to wait for a limit's slots, per limit, in this
    process: the first caller takes it at once, the others queue (FIFO) and
    ask the server nothing meanwhile, so that a hundred waiters of one
    process cost its lease connection one try at a time, not a hundred.
    Waiting for a turn is the driver's (a threading.Event or a future in
    each queued entry); the bookkeeping is here."""

    def __init__(self) -> None:
        self.queues: dict[str, Any] = {}      # name -> deque of waiters (held while present)

    def enter(self, name: str, make: Any) -> Any:
        """None when the turn is the caller's now, else a waiter queued."""
        queue = self.queues.get(name)
        if queue is None:
            self.queues[name] = collections.deque()
            return None
        waiter = make()
        queue.append(waiter)
        return waiter

    def leave(self, name: str) -> Any:
        """The waiter whose turn it is now (to be woken), or None."""
        queue = self.queues[name]
        if queue:
            return queue.popleft()
        del self.queues[name]
        return None

    def drop(self, name: str, waiter: Any) -> None:
        """A waiter that gave up before its turn came."""
        self.queues[name].remove(waiter)

Plan = Generator[Union[Run, Sleep, Keep, Freed], Any, T]
# what a reservation's grant took: its costs, the decision, its lease or None
Granted = tuple[dict[str, float], "Decision", Union[int, None]]
C = TypeVar("C", bound="Core")


class Core:
    """What Limiter and AsyncLimiter share: their settings, where the
    connections come from (_source, replaced in a forked child), and the
    plan of every call.  A subclass supplies _drive, which carries a plan
    out."""

    def __init__(self, source: Any, schema: str | None, headers: Mapping[str, str] | None,
                 jitter: float, max_jitter: float) -> None:
        self._source = source
        self._forks = _drivers.FORKS
        self.schema = schema
        self.headers = dict(headers or {})
        self.jitter, self.max_jitter = jitter, max_jitter
        self._st: Statements | None = None
        self._has_ensure: bool | None = None
        self._has_at: bool | None = None

    def _joined(self, lim: C) -> C:
        """lim, made by on(conn): it shares this limiter's SQL when its driver's
        paramstyle is the same."""
        if self._st is not None and lim._source.kind == self._source.kind:
            lim._st = self._st
        return lim

    def _src(self) -> Any:
        if _drivers.FORKS != self._forks:
            # a forked child: never the parent's connections
            self._source = self._source.forked()
            self._forks = _drivers.FORKS
        return self._source

    def _mapping(self, headers: Mapping[str, str] | None) -> Mapping[str, str]:
        return self.headers if headers is None else headers

    def _statements(self) -> Plan[Statements]:
        if self._st is None:
            schema = self.schema
            if schema is None:
                rows = yield Run(SCHEMA_QUERY, (), True)
                if not rows:
                    raise TokenBucketError("the tokenbucket extension is not installed in "
                                           "this database", hint="CREATE EXTENSION tokenbucket;")
                schema = rows[0][0]
            style = "numeric" if self._source.kind == "asyncpg" else "format"
            self._st = Statements(schema, style)
        return self._st

    # -- taking tokens

    def _try_one(self, costs: Costs, cost: float | None,
                 reserve: float | None) -> tuple[str, tuple[Any, ...]] | None:
        """The statement of a try_ of one bucket (the call made most), once the
        SQL is known: run at once, without a plan, then combine(rows)."""
        if reserve is None and type(costs) is str and self._st is not None:
            return self._st.sql["try"], (costs, 1.0 if cost is None else float(cost))
        return None

    def _try(self, costs: Costs, cost: float | None, reserve: float | None,
             at: bool = False) -> Plan[Decision]:
        st = self._st or (yield from self._statements())
        sql, params, names = try_call(st, costs_of(costs, cost), reserve, at)
        return combine((yield Run(sql, params, False)), names)

    def _peek(self, costs: Costs, cost: float | None, reserve: float | None) -> Plan[Decision]:
        st = yield from self._statements()
        sql, params, names = peek_call(st, costs_of(costs, cost), reserve)
        return combine((yield Run(sql, params, True)), names)

    def _acquire(self, costs: Costs, cost: float | None, timeout: Duration | None,
                 reserve: float | None, wait: str, at: bool = False) -> Plan[Decision]:
        """at: a reservation's, whose decision keeps the server's now() of the
        grant (reserved_at)."""
        c = costs_of(costs, cost)
        limit = seconds(timeout)
        if wait == "server":
            sql, params = wait_call((yield from self._statements()), c, limit, reserve)
            rows = yield Run(sql, params, False)
            if rows[0][0]:
                return waited(True, rows[0][1])
            return (yield from self._peek(c, None, reserve))
        if wait != "client":
            raise ValueError("wait is 'client' or 'server'")
        deadline = None if limit is None else time.monotonic() + limit
        backoff = Backoff(self.jitter, self.max_jitter)
        while True:
            decision = yield from self._try(c, None, reserve, at)
            if decision.granted:
                return decision
            now = time.monotonic()
            if deadline is not None and now + decision.retry_after > deadline:
                return decision
            pause = backoff.next(decision.retry_after)
            yield Sleep(pause if deadline is None else min(pause, deadline - now))

    def _reserve(self, costs: Costs, cost: float | None, timeout: Duration | None,
                 reserve: float | None, wait: str) -> Plan[tuple[dict[str, float], Decision]]:
        c = costs_of(costs, cost)
        decision = yield from self._acquire(c, None, timeout, reserve, wait, True)
        if not decision.granted:
            raise RateLimited(f"not granted within {seconds(timeout)} s",
                              decision.retry_after, decision)
        return c, decision

    # -- in-flight limits

    def _lease(self, name: str, slots: int, timeout: Duration | None, ttl: Duration | None,
               reserve: float | None, costs: dict[str, float] | None) -> Plan[int]:
        """_leased's lease."""
        return (yield from self._leased(name, slots, timeout, ttl, reserve, costs))[0]

    def _leased(self, name: str, slots: int, timeout: Duration | None, ttl: Duration | None,
                reserve: float | None,
                costs: dict[str, float] | None) -> Plan[tuple[int, datetime | None]]:
        """(the lease, the server's now() when taken with costs) of a session
        lease on the process's lease connection (tb_lease, or
        tb_lease_all with costs: the tokens too, all or nothing), waiting
        here up to timeout (None: no limit) and holding no connection while
        it waits: woken by a release of this process, else asking again
        after a pause that doubles up to LEASE_POLL; with costs refused, on
        the buckets' retry_after (plus up to jitter times it).  RateLimited
        when not had in time.  The driver lets one waiter of a process per
        limit run this at a time (Turns), so that the others ask nothing."""
        st = self._st or (yield from self._statements())
        limit = seconds(timeout)
        deadline = None if limit is None else time.monotonic() + limit
        if costs is None:
            sql, params = lease_call(st, name, slots, 0, ttl, reserve)
        else:
            sql, params = lease_all_call(st, name, slots, costs, ttl, reserve)
        poll = 0.005
        while True:
            rows, seen = yield Keep(sql, params)
            if rows[0][0] is not None:
                return int(rows[0][0]), rows[0][1] if len(rows[0]) > 1 else None
            now = time.monotonic()
            left = math.inf if deadline is None else deadline - now
            decision = None
            if costs is not None:
                decision = yield from self._peek(costs, None, reserve)
                if not decision.granted:
                    if decision.retry_after > left:
                        raise RateLimited(f"not granted within {limit} s",
                                          decision.retry_after, decision)
                    pause = decision.retry_after * (1 + random.uniform(0, self.jitter))
                    yield Sleep(min(max(pause, 0.001), left))
                    continue
            if left <= 0:
                raise RateLimited(f"no free slot of {name}", math.nan, decision)
            yield Freed(seen, min(poll, left))
            poll = min(poll * 2, LEASE_POLL)

    def _unlease(self, lease: int) -> Plan[None]:
        """tb_release on the lease connection; a lost connection freed it already."""
        st = self._st or (yield from self._statements())
        try:
            yield Keep(st["release"], (lease,), True)
        except OutcomeUnknown:
            pass

    def _reserve_leased(self, costs: Costs, cost: float | None, timeout: Duration | None,
                        reserve: float | None, lease: str, slots: int,
                        ttl: Duration | None) -> Plan[Granted]:
        """reserve(lease=...): the lease and the tokens together (tb_lease_all)."""
        c = costs_of(costs, cost)
        held, at = yield from self._leased(lease, slots, timeout, ttl, reserve, c)
        return c, waited(True, at), held

    def _reserved(self, costs: Costs, cost: float | None, timeout: Duration | None,
                  reserve: float | None, wait: str) -> Plan[Granted]:
        c, decision = yield from self._reserve(costs, cost, timeout, reserve, wait)
        return c, decision, None

    def _ungrant(self, got: Granted) -> Plan[None]:
        """Undo a grant a cancellation cut short: refund, release."""
        try:
            yield from self._refund(got[0], None, got[1].reserved_at)
        finally:
            if got[2] is not None:
                yield from self._unlease(got[2])

    def _book(self, costs: dict[str, float]) -> Plan[float]:
        """Take the costs now, into debt if need be (tb_settle of nothing
        reserved): seconds until the buckets are out of the debt this
        leaves, when the tokens are the booker's in turn (the callers who
        booked before it first)."""
        yield from self._settle({n: (0.0, c) for n, c in costs.items()}, None, None, None)
        return (yield from self._peek({n: 0.0 for n in costs}, None, None)).retry_after

    # -- after a call

    def _apply(self, key: str, name: str | Mapping[str, Any], values: dict[str, float],
               safe: bool, *more: Any) -> Plan[Any]:
        """tb_refund or tb_sync of each bucket (sorted): one(name, ...)."""
        names, amounts_ = sorted_pairs(values)
        st = yield from self._statements()
        return one(name, names, (yield Run(st[key], (names, amounts_, *more), safe)))

    def _at(self, reserved_at: datetime | None) -> Plan[bool]:
        """Whether to settle or refund with reserved_at: given, and the
        server has the forms with it (extension 1.9, tokenbucket_proxy 1.5)
        and lets this role call them (asked once); else the forms without
        it, which give back to the buckets alone."""
        if reserved_at is None:
            return False
        if self._has_at is None:
            st = yield from self._statements()
            rows = yield Run(st["has_at"], (
                st.prefix + "tb_settle(text,float8,float8,timestamptz)",
                st.prefix + "tb_refund(text,float8,timestamptz)"), True)
            self._has_at = bool(rows[0][0])
        return self._has_at

    def _refund(self, name: str | Mapping[str, float], tokens: float | None,
                reserved_at: datetime | None = None) -> Plan[Any]:
        values = amounts(name, tokens, "tokens")
        if (yield from self._at(reserved_at)):
            return (yield from self._apply("refund_at", name, values, False, reserved_at))
        return (yield from self._apply("refund", name, values, False))

    def _sync(self, name: str | Mapping[str, float], remaining: float | None) -> Plan[Any]:
        return (yield from self._apply("sync", name, amounts(name, remaining, "remaining"),
                                       True))

    def _settle(self, name: str | Mapping[str, tuple[float, float]], reserved: float | None,
                used: float | None, reserved_at: datetime | None = None) -> Plan[Any]:
        if isinstance(name, str):
            if reserved is None or used is None:
                raise TypeError("reserved= and used= go with a bucket name; give a mapping "
                                "{name: (reserved, used)} for several")
            pairs = {name: (float(reserved), float(used))}
        else:
            pairs = {n: (float(r), float(u)) for n, (r, u) in name.items()}
        names = sorted(pairs)
        st = yield from self._statements()
        params: tuple[Any, ...] = (names, [pairs[n][0] for n in names],
                                   [pairs[n][1] for n in names])
        if (yield from self._at(reserved_at)):
            rows = yield Run(st["settle_at"], (*params, reserved_at), False)
        else:
            rows = yield Run(st["settle"], params, False)
        return one(name, names, rows)

    def _pause(self, names: str | Iterable[str], for_: Duration) -> Plan[None]:
        st = yield from self._statements()
        yield Run(st["pause"], (names_of(names), duration(for_)), True)

    def _pause_until(self, names: str | Iterable[str], until: datetime) -> Plan[None]:
        st = yield from self._statements()
        yield Run(st["pause_until"], (names_of(names), until), True)

    def _observe(self, status: int, headers: Any, mapping: Mapping[str, str] | None,
                 pause: Iterable[str] | None) -> Plan[_headers.Observation]:
        mapping = self.headers if mapping is None else mapping
        obs = _headers.parse(status, headers)
        sync, pause_for = _headers.plan(obs, mapping)
        if sync:
            obs.synced = yield from self._sync(sync, None)
        if pause_for is not None:
            targets = sorted(set(pause if pause is not None else mapping.values()))
            if targets:
                yield from self._pause(targets, pause_for)
                obs.paused = {n: pause_for for n in targets}
        return obs

    # -- budgets

    def _cost(self, model: str, input_tokens: int, output_tokens: int,
              cached: int) -> Plan[Decimal]:
        st = yield from self._statements()
        rows = yield Run(st["cost"], (model, input_tokens, output_tokens, cached), True)
        return Decimal(rows[0][0])

    def _ensure_quota(self, name: str, budget: float, period: str | timedelta, time_zone: str,
                      starts: datetime | None, carry_max: float, memory: bool) -> Plan[str]:
        if isinstance(period, timedelta):
            period = f"{period.total_seconds()} seconds"
        st = yield from self._statements()
        rows = yield Run(st["ensure_quota"], (name, float(budget), period, time_zone, starts,
                                              float(carry_max), memory), True)
        return str(rows[0][0])

    def _set_parent(self, child: str, parent: str | None) -> Plan[None]:
        st = yield from self._statements()
        yield Run(st["set_parent"], (child, parent), True)

    def _set_alerts(self, bucket: str, thresholds: Iterable[float]) -> Plan[None]:
        st = yield from self._statements()
        yield Run(st["set_alerts"], (bucket, [float(t) for t in thresholds]), True)

    def _quotas(self, prefix: str | None) -> Plan[list[Quota]]:
        st = yield from self._statements()
        rows = yield Run(st["quotas"], (prefix,), True)
        return [Quota(*row) for row in rows]

    # -- set-up

    def _ensure(self, name: str, capacity: float, refill: float, per: Duration,
                memory: bool) -> Plan[str]:
        return (yield from self._ensured("ensure", "create",
                                         (name, capacity, refill, duration(per), memory)))

    def _ensure_limit(self, name: str, max_in_flight: int, memory: bool) -> Plan[str]:
        return (yield from self._ensured("ensure_limit", "create_limit",
                                         (name, max_in_flight, memory)))

    def _ensured(self, ensure: str, create: str, args: tuple[Any, ...]) -> Plan[str]:
        """tb_ensure or tb_ensure_limit (extension 1.8); before 1.8, tb_create
        or tb_create_limit, taking "exists" (23505) for an answer."""
        st = yield from self._statements()
        if (yield from self._ensure_available()):
            return str((yield Run(st[ensure], args, True))[0][0])
        try:
            yield Run(st[create], args, True)
            return "created"
        except AlreadyExists:
            return "exists"

    def _ensure_available(self) -> Plan[bool]:
        if self._has_ensure is None:
            st = yield from self._statements()
            sig = st.prefix + "tb_ensure(text,float8,float8,interval,boolean)"
            self._has_ensure = bool((yield Run(st["has_ensure"], (sig,), True))[0][0])
        return self._has_ensure


class ReservationCore:
    """What Reservation and AsyncReservation share: the tokens taken for one
    call, and the plans that settle them exactly once (see Reservation)."""

    def __init__(self, limiter: Core, costs: dict[str, float], decision: Decision,
                 mapping: Mapping[str, str], lease: int | None = None) -> None:
        self.limiter = limiter
        self.costs = costs
        self.decision = decision
        self.mapping = mapping
        self.settled = False
        self.observation: _headers.Observation | None = None
        self.lease = lease          # the lease taken with the tokens, until released

    def _unlease(self) -> int | None:
        lease, self.lease = self.lease, None
        return lease

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

    def _settle(self, used: float | Mapping[str, float] | None) -> Plan[None]:
        pairs = {} if used is None else {
            n: (self.costs[n], u) for n, u in self._used(used).items() if u != self.costs[n]}
        self._claim()
        if pairs:
            yield from self.limiter._settle(pairs, None, None, self.decision.reserved_at)

    def _refund(self) -> Plan[None]:
        self._claim()
        yield from self.limiter._refund(self.costs, None, self.decision.reserved_at)

    def _observe(self, status: int, headers: Any) -> Plan[_headers.Observation]:
        self.observation = yield from self.limiter._observe(status, headers, self.mapping,
                                                            list(self.costs))
        return self.observation

    def _leaving(self, failed: bool) -> bool:
        """Whether leaving the block refunds: by an exception, unless settled;
        leaving it normally keeps what was reserved charged."""
        if self.settled:
            return False
        if not failed:
            self.settled = True
            return False
        return True
