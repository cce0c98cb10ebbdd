"""What the sync and async limiters share: decisions, arguments, the SQL.

The SQL is written once with $n parameters, each cast to its type in the
statement itself, so that every driver sends plain Python floats, strings
and lists and never meets an ambiguous overload (tb_pause(unknown, numeric))
or an interval it spells its own way: durations go as float seconds through
make_interval.
"""
from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Iterable, Mapping, Union

Costs = Union[str, Mapping[str, float], Iterable[str]]
Duration = Union[float, int, timedelta]


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
    full (the longest over the buckets); buckets: each bucket's row."""
    granted: bool
    remaining: float
    retry_after: float
    reset_after: float
    buckets: tuple[BucketDecision, ...] = field(default=())

    def __bool__(self) -> bool:
        return self.granted


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


def cost_of(cost: float | None) -> float:
    """One bucket's cost: 1 by default, else as a float (what costs_of gives it)."""
    return 1.0 if cost is None else float(cost)


def seconds(value: Duration | None) -> float | None:
    """Seconds as a float from a number or a timedelta (None stays None)."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise TypeError(f"a duration is seconds or a timedelta, not {type(value).__name__}")


def combine(rows: list, names: list[str] | None = None) -> Decision:
    """A Decision from tb_try/tb_peek's row (granted, remaining, retry, reset),
    or from tb_try_all's rows (name, granted, remaining, retry, reset)."""
    if names is None:
        row = rows[0]
        return Decision(bool(row[0]), row[1], row[2], row[3])
    parts = tuple(BucketDecision(r[0], bool(r[1]), r[2], r[3], r[4]) for r in rows)
    return Decision(all(p.granted for p in parts), min(p.remaining for p in parts),
                    max(p.retry_after for p in parts), max(p.reset_after for p in parts),
                    parts)


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


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


_PARAM = re.compile(r"\$\d+")


class Statements:
    """The SQL of every call, qualified with the extension's schema (None:
    unqualified, found through search_path), in the driver's paramstyle."""

    def __init__(self, schema: str | None, paramstyle: str) -> None:
        s = "" if schema is None else quote_ident(schema) + "."
        sql = {
            "try": f"SELECT granted, remaining, retry_after_seconds, reset_after_seconds "
                   f"FROM {s}tb_try($1::text, $2::float8)",
            "try_r": f"SELECT granted, remaining, retry_after_seconds, reset_after_seconds "
                     f"FROM {s}tb_try($1::text, $2::float8, $3::float8)",
            "try_all": f"SELECT name, granted, remaining, retry_after_seconds, reset_after_seconds "
                       f"FROM {s}tb_try_all($1::text[], $2::float8[])",
            "try_all_r": f"SELECT name, granted, remaining, retry_after_seconds, "
                         f"reset_after_seconds FROM {s}tb_try_all($1::text[], $2::float8[], $3::float8)",
            "peek": f"SELECT granted, remaining, retry_after_seconds, reset_after_seconds "
                    f"FROM {s}tb_peek($1::text, $2::float8)",
            "peek_r": f"SELECT granted, remaining, retry_after_seconds, reset_after_seconds "
                      f"FROM {s}tb_peek($1::text, $2::float8, $3::float8)",
            # tb_peek has no form for several buckets: one row each, one round trip
            "peek_all": f"SELECT u.n, p.granted, p.remaining, p.retry_after_seconds, "
                        f"p.reset_after_seconds FROM unnest($1::text[], $2::float8[]) "
                        f"WITH ORDINALITY AS u(n, c, i), LATERAL {s}tb_peek(u.n, u.c) AS p ORDER BY u.i",
            "peek_all_r": f"SELECT u.n, p.granted, p.remaining, p.retry_after_seconds, "
                          f"p.reset_after_seconds FROM unnest($1::text[], $2::float8[]) "
                          f"WITH ORDINALITY AS u(n, c, i), LATERAL {s}tb_peek(u.n, u.c, $3::float8) "
                          f"AS p ORDER BY u.i",
            "wait": f"SELECT {s}tb_acquire_wait($1::text, $2::float8, make_interval(secs => $3::float8))",
            "wait_all": f"SELECT {s}tb_acquire_all_wait($1::text[], $2::float8[], "
                        f"make_interval(secs => $3::float8))",
            # names sorted by the caller: two refunds of the same buckets lock
            # their rows in one order
            "refund": f"SELECT {s}tb_refund(u.n, u.t) FROM unnest($1::text[], $2::float8[]) AS u(n, t)",
            "settle": f"SELECT {s}tb_settle(u.n, u.r, u.u) "
                      f"FROM unnest($1::text[], $2::float8[], $3::float8[]) AS u(n, r, u)",
            "sync": f"SELECT {s}tb_sync(u.n, u.r) FROM unnest($1::text[], $2::float8[]) AS u(n, r)",
            "pause": f"SELECT {s}tb_pause(u.n, d.d) FROM unnest($1::text[]) AS u(n), "
                     f"make_interval(secs => $2::float8) AS d(d)",
            "pause_until": f"SELECT {s}tb_pause_until(u.n, d.d) FROM unnest($1::text[]) AS u(n), "
                           f"CAST($2::timestamptz AS timestamptz) AS d(d)",
            "lease": f"SELECT {s}tb_lease($1::text, $2::int4, 'session', "
                     f"make_interval(secs => $3::float8), $4::float8)",
            "lease_wait": f"SELECT {s}tb_lease_wait($1::text, $2::int4, 'session', "
                          f"make_interval(secs => $3::float8), make_interval(secs => $4::float8), $5::float8)",
            "release": f"SELECT {s}tb_release($1::int8)",
            "has_ensure": f"SELECT to_regprocedure($1::text) IS NOT NULL",
            "ensure": f"SELECT {s}tb_ensure($1::text, $2::float8, $3::float8, "
                      f"make_interval(secs => $4::float8), $5::bool)",
            "ensure_limit": f"SELECT {s}tb_ensure_limit($1::text, $2::int4, $3::bool)",
            # before 1.8: tb_create, with 23505 meaning it exists already
            "create": f"SELECT {s}tb_create($1::text, $2::float8, $3::float8, "
                      f"make_interval(secs => $4::float8), $5::bool)",
            "create_limit": f"SELECT {s}tb_create_limit($1::text, $2::int4, $3::bool)",
        }
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


def try_call(st: Statements, costs: dict[str, float], reserve: float | None):
    """(sql, params, names or None) of the grant for these costs."""
    if len(costs) == 1:
        (name, cost), = costs.items()
        if reserve is None:
            return st["try"], (name, cost), None
        return st["try_r"], (name, cost, reserve), None
    names = list(costs)
    values = [costs[n] for n in names]
    if reserve is None:
        return st["try_all"], (names, values), names
    return st["try_all_r"], (names, values, reserve), names


def peek_call(st: Statements, costs: dict[str, float], reserve: float | None):
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
              reserve: float | None):
    if reserve is not None:
        raise ValueError("a wait in the server takes no reserve (tb_acquire_wait has none)")
    if len(costs) == 1:
        (name, cost), = costs.items()
        return st["wait"], (name, cost, timeout)
    names = list(costs)
    return st["wait_all"], (names, [costs[n] for n in names], timeout)


def sorted_pairs(amounts: Mapping[str, float]) -> tuple[list[str], list[float]]:
    names = sorted(amounts)
    return names, [float(amounts[n]) for n in names]


WAITED = float("nan")


def waited(granted: bool) -> Decision:
    """The decision of a wait in the server, which answers only yes or no."""
    return Decision(granted, WAITED, 0.0 if granted else math.inf, WAITED)
