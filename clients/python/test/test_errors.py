"""Every SQLSTATE of README's Errors table has its class, and each that one
server can raise is raised through the client, with its detail and hint."""
from __future__ import annotations

import re
import threading

import psycopg
import psycopg2
import asyncpg
import pytest

import tokenbucket
from tokenbucket import errors
from conftest import TOP, conninfo, make_bucket, url


def readme_sqlstates() -> list[str]:
    text = (TOP / "README.md").read_text()
    section = text.split("### Errors", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([0-9A-Z]{5})` ", section, re.M)


def test_every_readme_sqlstate_has_its_class():
    states = readme_sqlstates()
    assert len(states) >= 13
    for state in states:
        exc = errors.from_sqlstate(state, "m", "d", "h")
        assert type(exc) is not errors.DatabaseError, state
        assert isinstance(exc, tokenbucket.TokenBucketError)
        assert exc.sqlstate == state and exc.detail == "d" and exc.hint == "h"
    # and the two of extension 1.8
    assert errors.from_sqlstate("55P03").__class__ is tokenbucket.LockedByTransaction
    assert errors.from_sqlstate("22004").__class__ is tokenbucket.NullArgument
    assert type(errors.from_sqlstate("XX000")) is errors.DatabaseError


@pytest.fixture
def lim():
    lim = tokenbucket.Limiter(conninfo())
    yield lim
    lim.close()


def test_server_errors(admin, name, lim):
    make_bucket(admin, name, 10, 1)
    with pytest.raises(tokenbucket.UndefinedBucket) as e:
        lim.try_(name + "missing")
    assert e.value.sqlstate == "42704" and "tb_create" in e.value.hint
    with pytest.raises(tokenbucket.InvalidArgument):
        lim.try_(name, -1)
    with pytest.raises(tokenbucket.InvalidArgument):
        lim.try_(name, 11)                           # over capacity: never granted
    with pytest.raises(tokenbucket.InvalidArgument):
        lim.try_(name + "*")                         # a template's name
    lim.settle(name, 0, 1.7e308)
    with pytest.raises(tokenbucket.OutOfRange):
        lim.settle(name, 0, 1.7e308)
    many = {f"{name}m{i}": 1 for i in range(70)}
    for b in many:
        make_bucket(admin, b, 1, 1)
    with pytest.raises(tokenbucket.TooManyNames):
        lim.acquire(many, timeout=1, wait="server")
    with pytest.raises(tokenbucket.AlreadyExists):
        lim._has_ensure = None
        lim._exec("SELECT limits.tb_create(%s, 1, 1)", (name,), safe=True)
    with pytest.raises(tokenbucket.CheckViolation):
        lim._exec("INSERT INTO limits.tb_buckets (name, capacity, refill_rate) "
                  "VALUES (%s, -1, 1)", (name + "bad",), safe=True)


def test_transaction_errors(admin, name):
    make_bucket(admin, name, 10, 1)
    # a wait in REPEATABLE READ: 0A000; a grant after another changed the
    # bucket since the snapshot: 40001
    conn = psycopg.connect(conninfo())
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    lim = tokenbucket.Limiter(conn)
    with conn.transaction():
        with pytest.raises(tokenbucket.NotSupported):
            lim.on(conn).acquire(name, timeout=1, wait="server")
    with pytest.raises(tokenbucket.SerializationFailure):
        with conn.transaction():
            conn.execute("SELECT 1")
            admin.execute("SELECT limits.tb_acquire(%s)", (name,))
            lim.on(conn).try_(name)
    conn.close()
    # read-only (as on a standby): 25006
    ro = tokenbucket.Limiter(conninfo(options="-c default_transaction_read_only=on"))
    with pytest.raises(tokenbucket.ReadOnly):
        ro.try_(name)
    assert ro.peek(name).granted                     # a look works there
    ro.close()
    # statement_timeout during a wait in the server: 57014
    slow = tokenbucket.Limiter(conninfo(options="-c statement_timeout=200"))
    slow.try_(name, 10)
    with pytest.raises(tokenbucket.Canceled):
        slow.acquire(name, 10, timeout=None, wait="server")
    slow.close()


def test_privilege_and_prerequisite(admin, name):
    make_bucket(admin, name, 10, 1)
    admin.execute("DROP ROLE IF EXISTS tb_python_app")
    admin.execute("CREATE ROLE tb_python_app LOGIN")
    admin.execute("GRANT USAGE ON SCHEMA limits TO tb_python_app")
    app = tokenbucket.Limiter(conninfo(user="tb_python_app"))
    assert app.try_(name).granted                    # tb_try is PUBLIC's
    with pytest.raises(tokenbucket.InsufficientPrivilege):
        app.refund(name, 1)                          # tb_refund is not
    app.close()
    # a memory bucket used in a transaction cannot be prepared: 0A000
    with psycopg.connect(conninfo()) as c:
        joined = tokenbucket.Limiter(c).on(c)
        joined.ensure(name + "mem", 5, 1, memory=True)
        with pytest.raises(tokenbucket.NotSupported) as e:
            joined._exec("PREPARE TRANSACTION 'tb_python'", (), safe=True)
        assert e.value.detail and e.value.hint


@pytest.mark.parametrize("driver", ["psycopg", "psycopg2", "asyncpg"])
async def test_each_driver_translates(admin, name, driver):
    """Detail and hint reach the exception whichever driver raised it."""
    if driver == "asyncpg":
        lim = tokenbucket.AsyncLimiter(url())
        with pytest.raises(tokenbucket.UndefinedBucket) as e:
            await lim.try_(name + "none")
        await lim.close()
    else:
        lim = tokenbucket.Limiter(conninfo(), driver=driver)
        with pytest.raises(tokenbucket.UndefinedBucket) as e:
            lim.try_(name + "none")
        lim.close()
    assert e.value.hint and "tb_create" in e.value.hint
    assert name + "none" in e.value.message
    assert isinstance(e.value.__cause__, (psycopg.Error, psycopg2.Error, asyncpg.PostgresError))
