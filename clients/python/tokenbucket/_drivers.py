"""What differs between psycopg 3, psycopg2 and asyncpg: connecting, running
one statement, a connection's transaction state, and its socket.
"""
from __future__ import annotations

import os
import re
import select
from typing import Any


def kind_of(obj: Any) -> str:
    """'psycopg', 'psycopg2', 'asyncpg', 'psycopg_pool' or 'asyncpg_pool' for a
    driver's connection or pool ('' for anything else)."""
    module = type(obj).__module__
    if module.startswith("psycopg_pool"):
        return "psycopg_pool"
    if module.startswith("psycopg2"):
        return "psycopg2"
    if module.startswith("psycopg"):
        return "psycopg"
    if module.startswith("asyncpg"):
        return "asyncpg_pool" if type(obj).__name__ == "Pool" else "asyncpg"
    return ""


# Forks of this process so far, as this process counts them: a child's
# count is its parent's plus one (os.fork, multiprocessing, Celery's
# prefork all run the hook), so a limiter that kept the count it was made
# with tells it is in a child by comparing two ints, with no system call.
FORKS = 0


def _forked() -> None:
    global FORKS
    FORKS += 1


os.register_at_fork(after_in_child=_forked)


def socket_readable(fd: int) -> bool:
    """Whether an idle connection's socket has something to read: the server
    closed it (or said why first), since an idle session is sent nothing
    else (unless it LISTENs, which the limiter's own connections do not)."""
    try:
        readable, _, _ = select.select([fd], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def stale(poll: Any, fresh: bool) -> bool:
    """Whether an idle connection, kept with poller()'s answer, is not to be
    used: fresh asks for a new one; something to read on an idle session's
    socket means the server closed it."""
    return fresh or poll is None or bool(poll.poll(0))


def poller(fd: int | None) -> Any:
    """A poll object on a connection's socket, made once for it:
    poller.poll(0) is socket_readable for that connection (a closed
    descriptor answers too), without building select's lists each time.
    None when the socket is not known (to be taken as closed)."""
    if fd is None or fd < 0:
        return None
    p = select.poll()
    p.register(fd, select.POLLIN)
    return p


_devnull: int | None = None


def disown(fd: int | None) -> None:
    """In a forked child: point the child's copy of an inherited connection's
    socket at /dev/null, so that closing that connection object here (which
    says goodbye to the server) cannot end the parent's session."""
    global _devnull
    if fd is None or fd < 0:
        return
    if _devnull is None:
        _devnull = os.open(os.devnull, os.O_RDWR)
    try:
        os.dup2(_devnull, fd)
    except OSError:
        pass


# ---- psycopg 3 and psycopg2, sync ------------------------------------------

def sync_connect(kind: str, dsn: str, kwargs: dict[str, Any]) -> Any:
    if kind == "psycopg2":
        import psycopg2
        conn = psycopg2.connect(dsn, **kwargs)
        conn.autocommit = True
        return conn
    import psycopg
    return psycopg.connect(dsn, autocommit=True, **kwargs)


def sync_in_transaction(conn: Any) -> bool:
    # psycopg2's TRANSACTION_STATUS_IDLE and psycopg's pq.TransactionStatus.IDLE
    return bool(conn.info.transaction_status != 0)


def sync_closed(conn: Any) -> bool:
    return bool(conn.closed) or bool(getattr(conn, "broken", False))


def sync_run(kind: str, conn: Any, sql: str, params: tuple[Any, ...]) -> list[Any]:
    if kind == "psycopg2":
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall())
    return list(conn.execute(sql, params).fetchall())


def sync_fileno(conn: Any) -> int | None:
    try:
        return int(conn.fileno())
    except Exception:
        return None


def sync_close(conn: Any) -> None:
    try:
        conn.close()
    except Exception:
        pass


# ---- psycopg 3 and asyncpg, async --------------------------------------------

_ASYNCPG_KEYS = {"host": "host", "port": "port", "user": "user", "password": "password",
                 "dbname": "database", "passfile": "passfile"}


def keywords(dsn: str) -> dict[str, str]:
    """A libpq "key=value ..." string as a dict (values may be 'quoted')."""
    out: dict[str, str] = {}
    for m in re.finditer(r"(\w+)\s*=\s*('(?:[^'\\]|\\.)*'|\S*)", dsn):
        value = m.group(2)
        if value.startswith("'"):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        out[m.group(1)] = value
    return out


async def async_connect(kind: str, dsn: str, kwargs: dict[str, Any]) -> Any:
    if kind == "asyncpg":
        import asyncpg
        if "://" in dsn or not dsn:
            return await asyncpg.connect(dsn or None, **kwargs)
        # asyncpg reads URLs only: a libpq keyword string becomes arguments
        args: dict[str, Any] = {}
        for key, value in keywords(dsn).items():
            if key == "application_name":
                args.setdefault("server_settings", {})["application_name"] = value
            elif key in _ASYNCPG_KEYS:
                args[_ASYNCPG_KEYS[key]] = value
        return await asyncpg.connect(**{**args, **kwargs})
    import psycopg
    return await psycopg.AsyncConnection.connect(dsn, autocommit=True, **kwargs)


def async_in_transaction(kind: str, conn: Any) -> bool:
    if kind == "asyncpg":
        return bool(conn.is_in_transaction())
    return sync_in_transaction(conn)


def async_closed(kind: str, conn: Any) -> bool:
    if kind == "asyncpg":
        return bool(conn.is_closed())
    return sync_closed(conn)


def async_fileno(kind: str, conn: Any) -> int | None:
    try:
        if kind == "asyncpg":
            return int(conn._transport.get_extra_info("socket").fileno())
        return int(conn.fileno())
    except Exception:
        return None


async def async_run(kind: str, conn: Any, sql: str, params: tuple[Any, ...]) -> list[Any]:
    if kind == "asyncpg":
        return list(await conn.fetch(sql, *params))
    cur = await conn.execute(sql, params)
    return list(await cur.fetchall())


async def async_close(kind: str, conn: Any) -> None:
    try:
        if kind == "asyncpg":
            conn.terminate()
        else:
            await conn.close()
    except Exception:
        pass


# connection objects a forked child inherited: kept, never finalized there
ORPHANS: list[Any] = []


def psycopg_pool_settings(pool: Any) -> tuple[str, str, dict[str, Any], int]:
    """(conninfo, driver, connect kwargs, max size) of a psycopg_pool pool,
    sync or async: what a forked child opens its own connections with."""
    # a newer psycopg_pool (Debian sid's) keeps None when given no kwargs
    kwargs = {k: v for k, v in (pool.kwargs or {}).items() if k != "autocommit"}
    return pool.conninfo, "psycopg", kwargs, pool.max_size


def asyncpg_pool_settings(pool: Any) -> tuple[str, str, dict[str, Any], int]:
    """The same for an asyncpg pool."""
    args, kwargs = pool._connect_args, dict(pool._connect_kwargs)
    return args[0] if args else "", "asyncpg", kwargs, pool._maxsize
