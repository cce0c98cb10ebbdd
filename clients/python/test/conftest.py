"""Fixtures for the tokenbucket client's tests, and a plugin printing TAP.

The tests run against the server in PGHOST/PGPORT (test/run.sh's throwaway
one), in a database of their own, tb_python, where the extension lives in
a schema "limits" that is not on the search path: the client must find it.
"""
from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

HERE = Path(__file__).resolve().parent
TOP = HERE.parents[2]
sys.path.insert(0, str(HERE.parent))

DB = "tb_python"
BASE = {k: os.environ[v] for k, v in (("host", "PGHOST"), ("port", "PGPORT"))
        if v in os.environ}
BASE["user"] = os.environ.get("PGUSER", "postgres")


def conninfo(dbname: str = DB, **extra: str) -> str:
    parts = {**BASE, "dbname": dbname, **extra}
    return " ".join(f"{k}='{v}'" for k, v in parts.items())


def url(dbname: str = DB, app: str | None = None) -> str:
    """The same server as a URL (what asyncpg's own parser reads)."""
    host = BASE.get("host", "")
    out = f"postgresql://{BASE['user']}@/{dbname}?host={host}&port={BASE.get('port', 5432)}"
    return out if app is None else out + f"&application_name={app}"


# ---- TAP ----------------------------------------------------------------------

class _Tap:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.n = 0

    def _write(self, line: str) -> None:
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        tr.write_line(line)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self.n += 1
            name = report.nodeid.split("::", 1)[-1]
            if report.passed:
                self._write(f"ok {self.n} - {name}")
            elif report.skipped:
                self._write(f"ok {self.n} - {name} # SKIP")
            else:
                self._write(f"not ok {self.n} - {name}")
        elif report.when == "teardown" and report.failed:
            self.n += 1
            self._write(f"not ok {self.n} - {report.nodeid} (teardown)")

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report: pytest.TestReport):
        # no progress letters: the TAP lines stand alone
        if report.when == "call":
            return report.outcome, "", report.outcome.upper()
        if report.failed:
            return "error", "", "ERROR"
        if report.skipped:
            return "skipped", "", "SKIPPED"
        return None

    def pytest_terminal_summary(self) -> None:
        self._write(f"1..{self.n}")


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("TB_TAP"):
        config.pluginmanager.register(_Tap(config), "tb_tap")


# ---- the database -------------------------------------------------------------

@pytest.fixture(scope="session", autouse=True)
def database() -> None:
    with psycopg.connect(conninfo(os.environ.get("PGDATABASE", "postgres")),
                         autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        c.execute(f"CREATE DATABASE {DB}")
    with psycopg.connect(conninfo(), autocommit=True) as c:
        c.execute("CREATE SCHEMA limits")
        c.execute("CREATE EXTENSION tokenbucket SCHEMA limits")


@pytest.fixture
def admin():
    """A superuser's connection, autocommit, with limits on its search path."""
    with psycopg.connect(conninfo(options="-c search_path=limits,public"),
                         autocommit=True) as c:
        yield c


_names = itertools.count(1)


@pytest.fixture
def name() -> str:
    """A prefix no other test uses."""
    return f"t{next(_names)}-{os.getpid()}:"


def make_bucket(admin, bucket: str, capacity: float, refill: float, per: float = 1.0) -> None:
    admin.execute("SELECT tb_create(%s, %s, %s, make_interval(secs => %s))",
                  (bucket, capacity, refill, per))


def tokens(admin, bucket: str) -> float:
    return admin.execute("SELECT remaining FROM tb_peek(%s, 0)", (bucket,)).fetchone()[0]


def stats(admin, bucket: str) -> dict:
    cur = admin.execute("SELECT * FROM tb_stats WHERE name = %s", (bucket,))
    row = cur.fetchone()
    return dict(zip([d.name for d in cur.description], row))


def backends(admin, app: str, state: str | None = None) -> int:
    return admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
        "AND (%s::text IS NULL OR state = %s)", (app, state, state)).fetchone()[0]


# ---- the stand-in provider ----------------------------------------------------

def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def provider():
    """start(**options) -> URL of examples/provider/provider.py, stopped after the test."""
    procs = []

    def start(**options: object) -> str:
        port = free_port()
        args = [sys.executable, str(TOP / "examples/provider/provider.py"), "--port", str(port)]
        for k, v in options.items():
            args += [f"--{k}", str(v)]
        procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                return f"http://127.0.0.1:{port}"
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the provider did not start")

    yield start
    for p in procs:
        p.terminate()
        p.wait()
