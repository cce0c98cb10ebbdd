"""Every SQLSTATE of the Errors table of docs/sql-reference.md has its class, and each that one
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


def documented_sqlstates() -> set[str]:
    """The SQLSTATEs of the extension's table of errors (README.md's
    "Errors", wherever the docs keep it: README.md or docs/)."""
    states: set[str] = set()
    for doc in [TOP / "README.md", *sorted(TOP.glob("docs/**/*.md"))]:
        if doc.is_file():
            states.update(re.findall(r"^\| `([0-9A-Z]{5})` [a-z_]+ \|", doc.read_text(), re.M))
    return states


def client_table() -> dict[str, str]:
    """class -> SQLSTATE, as the client's README lists them."""
    text = (TOP / "clients/python/README.md").read_text()
    section = text.split("### Errors", 1)[1]
    return dict(re.findall(r"^\| `(\w+)` \| ([0-9A-Z]{5})\b", section, re.M))


def test_every_documented_sqlstate_has_its_class():
    states = documented_sqlstates()
    assert len(states) >= 13
    for state in states:
        exc = errors.from_sqlstate(state, "m", "d", "h")
        assert type(exc) is not errors.DatabaseError, state
        assert isinstance(exc, tokenbucket.TokenBucketError)
        assert exc.sqlstate == state and exc.detail == "d" and exc.hint == "h"
    # the client's README names each class with its SQLSTATE, as the code does
    table = client_table()
    assert table == {cls.__name__: state for state, cls in errors.CLASSES.items()}
    assert all(getattr(tokenbucket, cls) is errors.CLASSES[state] for cls, state in table.items())
    assert set(errors.CLASSES) >= states
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


def test_lock_null_memory_and_version_errors(admin, name):
    """The SQLSTATEs no test above raises: 55P03 (a bucket's row held by
    another transaction past lock_timeout), 22004 (a NULL where a value is
    needed), 53200 (no room for another memory lease), 55000 (the extension
    older than its library)."""
    make_bucket(admin, name, 10, 1)
    with psycopg.connect(conninfo(options="-c search_path=limits")) as holder:
        holder.execute("SELECT tb_acquire(%s)", (name,))     # its row, held until rollback
        waits = tokenbucket.Limiter(conninfo(options="-c lock_timeout=200"))
        with pytest.raises(tokenbucket.LockedByTransaction) as e:
            waits.try_(name)
        assert e.value.sqlstate == "55P03"
        waits.close()
        holder.rollback()
    lim = tokenbucket.Limiter(conninfo())
    with pytest.raises(tokenbucket.NullArgument) as e:
        lim._exec("SELECT limits.tb_try(%s, NULL::float8)", (name,), safe=False)
    assert "must not be NULL" in e.value.message
    # a session may hold an eighth of tokenbucket.max_memory_leases (10,000)
    # leases of names made from memory templates
    admin.execute("SELECT tb_create_limit(%s, 1, memory => true)", (name + "l*",))
    with pytest.raises(tokenbucket.SharedMemoryFull) as e:
        lim._exec("SELECT limits.tb_lease(%s || i) FROM generate_series(1, 1300) AS i",
                  (name + "l",), safe=False)
    assert e.value.detail and "max_memory_leases" in e.value.hint
    lim.close()                                          # its session's leases go with it
    with psycopg.connect(conninfo("postgres"), autocommit=True) as c:
        c.execute("DROP DATABASE IF EXISTS tb_python_old WITH (FORCE)")
        c.execute("CREATE DATABASE tb_python_old")
    with psycopg.connect(conninfo("tb_python_old"), autocommit=True) as c:
        c.execute("CREATE EXTENSION tokenbucket VERSION '1.8'")
    old = tokenbucket.Limiter(conninfo("tb_python_old"))
    with pytest.raises(tokenbucket.PrerequisiteMissing) as e:
        old.try_("x")
    assert "ALTER EXTENSION tokenbucket UPDATE" in e.value.hint
    old.close()
