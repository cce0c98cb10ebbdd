"""tokenbucket.alerts: quota alerts POSTed to a webhook (a stand-in HTTP
server on loopback), one POST per event; events written while the consumer
was stopped delivered when it starts; none for a rolled-back charge; a
webhook that fails is tried again, nothing after it sent first."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg
import pytest

from conftest import conninfo
from tokenbucket import alerts


class Webhook:
    """A stand-in webhook: records each POSTed body; answers ``status``."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.status = 200
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if hook.status == 200:
                    hook.bodies.append(json.loads(body))
                self.send_response(hook.status)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def of(self, prefix: str) -> list[tuple[str, float]]:
        return [(b["bucket"], b["threshold"]) for b in self.bodies if b["bucket"].startswith(prefix)]


@pytest.fixture
def webhook():
    hook = Webhook()
    yield hook
    hook.server.shutdown()


def test_delivers_each_event_once(admin, name, webhook, tmp_path):
    state = str(tmp_path / "state.json")
    q, m, rb = f"{name}q", f"{name}m", f"{name}rb"
    admin.execute("SELECT tb_create_quota(%s, 10, '1 day'), tb_create_quota(%s, 10, '1 day', memory => true),"
                  " tb_create_quota(%s, 10, '1 day')", (q, m, rb))
    for b in (q, m, rb):
        admin.execute("SELECT tb_set_alerts(%s, '{0.5, 1}')", (b,))
    # while the consumer is stopped: q and m reach 0.5; rb's charge rolls back
    admin.execute("SELECT tb_acquire(%s, 6), tb_acquire(%s, 6)", (q, m))
    with psycopg.connect(conninfo(options="-c search_path=limits,public")) as c:
        c.execute("SELECT tb_acquire(%s, 6)", (rb,))
        c.rollback()
    alerts.run(conninfo(), webhook.url, state, once=True)
    assert sorted(webhook.of(name)) == [(m, 0.5), (q, 0.5)]
    first = [b for b in webhook.bodies if b["bucket"] == q][0]
    row = admin.execute("SELECT id, budget, remaining FROM tb_alert_events WHERE bucket = %s",
                        (q,)).fetchone()
    assert (first["id"], first["budget"], first["remaining"]) == row
    assert first["period_end"] > first["period_start"]

    # running: a NOTIFY wakes it; rb's next charge at the level, and q's last
    stop = threading.Event()
    consumer = threading.Thread(target=alerts.run, args=(conninfo(), webhook.url, state),
                                kwargs={"stop": stop, "poll": 60})
    consumer.start()
    try:
        admin.execute("SELECT tb_acquire(%s, 6), tb_acquire(%s, 4)", (rb, q))
        deadline = time.monotonic() + 20
        while len(webhook.of(name)) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        consumer.join(10)
    assert sorted(webhook.of(name)) == [(m, 0.5), (q, 0.5), (q, 1.0), (rb, 0.5)]

    # started again: nothing is sent twice
    alerts.run(conninfo(), webhook.url, state, once=True)
    assert len(webhook.of(name)) == 4
    assert json.load(open(state))["last"] >= row[0]


def test_failed_webhook_is_tried_again(admin, name, webhook, tmp_path):
    state = str(tmp_path / "state.json")
    q = f"{name}q"
    admin.execute("SELECT tb_create_quota(%s, 10, '1 day'), tb_set_alerts(%s, '{0.5, 1}')", (q, q))
    admin.execute("SELECT tb_acquire(%s, 6), tb_acquire(%s, 4)", (q, q))
    webhook.status = 503
    with pytest.raises(OSError):
        alerts.run(conninfo(), webhook.url, state, once=True)
    assert webhook.of(name) == []
    webhook.status = 200
    alerts.run(conninfo(), webhook.url, state, once=True)
    assert webhook.of(name) == [(q, 0.5), (q, 1.0)]


def test_gap_settles():
    """An id missing below an event older than settle seconds is passed over."""
    state = alerts.State(last=3, delivered={5})
    state.advance({4})
    assert (state.last, state.delivered) == (5, set())


def test_logs_and_sends_money_in_minor_units(admin, name, webhook, tmp_path):
    """The command line says it started and each delivery; with --currency
    a money quota's budget and remaining go as decimal strings rounded to
    the currency's minor unit (cents; none for JPY), not as float noise."""
    import subprocess
    import sys
    state = str(tmp_path / "state.json")
    q = f"{name}eur"
    admin.execute("SELECT tb_create_quota(%s, 100, '1 month')", (q,))
    admin.execute("SELECT tb_set_alerts(%s, '{0.01}')", (q,))
    admin.execute("SELECT tb_acquire(%s, 1.1025)", (q,))
    # the float noise of a sum of prices: 98.89749999999987 after 1.1025
    remaining = admin.execute("SELECT remaining FROM tb_alert_events WHERE bucket = %s",
                              (q,)).fetchone()[0]
    run = subprocess.run([sys.executable, "-m", "tokenbucket.alerts", conninfo(), webhook.url,
                          "--state", state, "--once", "--currency", "EUR"],
                         capture_output=True, text=True, cwd=alerts.__file__.rsplit("/", 2)[0])
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    assert lines[0].startswith("tokenbucket.alerts: started") and webhook.url in lines[0]
    body = [b for b in webhook.bodies if b["bucket"] == q][0]
    assert body["budget"] == "100.00" and body["currency"] == "EUR"
    assert body["remaining"] == f"{remaining:.2f}" and "." in body["remaining"]
    assert sum(f"delivered {body['id']} " in line for line in lines) == 1
    assert alerts.money(98.89749999999987, "EUR") == "98.90"
    assert alerts.money(1234.5, "JPY") == "1235" and alerts.money(1.23456, "KWD") == "1.235"
