"""tokenbucket.alerts: quota alerts delivered to a webhook, each once.

The extension writes an event into tb_alert_events when a charge reaches
one of a quota's thresholds, in the charge's own transaction, and sends
it with NOTIFY on the channel tb_alerts.  This consumer LISTENs on that
channel and, whenever it hears something (or every ``poll`` seconds), reads
the events after the last one it handled and POSTs each, as JSON, to a
webhook URL, in id order, one POST per event::

    python3 -m tokenbucket.alerts 'dbname=app' https://hooks.example/quota \\
        --state /var/lib/quota-alerts/state.json

Events written while it was stopped are delivered when it starts: the
table keeps them, and the state file (JSON, written atomically after each
POST) remembers where it stopped.  A POST that fails (not 2xx, or no
answer within ``timeout``) is tried again at the next wake-up, and nothing
after it is sent before it: delivery is at least once (a crash between the
webhook's answer and the state file's write repeats that one event; the
payload's "id" lets the receiver drop a repeat).

Ids are given when an event is written, and transactions commit in any
order: an event with a smaller id may appear after a larger one was
delivered.  So the state is the last id below which every event was
handled, and the ids above it that were: a missing id is waited for until
an event after it is ``settle`` seconds old (a charge's transaction open
that long is taken to have rolled back, which leaves a gap for ever).

It logs (logger "tokenbucket.alerts"; the command line to stderr) a line
when it starts and one per event delivered.  A quota kept in money, given
``--currency`` (ISO 4217: EUR, USD, JPY...), has its budget and remaining
sent as decimal strings rounded to the currency's minor unit ("98.90", not
98.89749999999987), with "currency" in the payload.

The role it connects as needs SELECT on tb_alert_events and USAGE on the
extension's schema.  It needs psycopg 3 (the ``psycopg`` extra).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import select
import tempfile
import threading
import urllib.request
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from ._core import quote_ident

CHANNEL = "tb_alerts"
log = logging.getLogger("tokenbucket.alerts")

# ISO 4217 currencies whose minor unit is not a hundredth
MINOR_DIGITS = {"BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0,
                "PYG": 0, "RWF": 0, "UGX": 0, "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0,
                "XOF": 0, "XPF": 0, "BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3,
                "OMR": 3, "TND": 3, "CLF": 4, "UYW": 4}


def money(value: float, currency: str) -> str:
    """An amount as a decimal string in the currency's minor unit (half up)."""
    digits = MINOR_DIGITS.get(currency.upper(), 2)
    return str(Decimal(repr(value)).quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP))


@dataclass
class State:
    """Where delivery stands: every id up to ``last`` handled, and these above it."""

    last: int = 0
    delivered: set[int] = field(default_factory=set)

    @classmethod
    def load(cls, path: str) -> State:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return cls()
        return cls(int(data["last"]), {int(i) for i in data.get("delivered", [])})

    def save(self, path: str) -> None:
        """Write the state atomically (a temporary file renamed over it)."""
        folder = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tb-alerts-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"last": self.last, "delivered": sorted(self.delivered)}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def advance(self, settled_gaps: set[int]) -> None:
        """Move ``last`` over the ids handled, or settled as never to come."""
        while self.last + 1 in self.delivered or self.last + 1 in settled_gaps:
            self.last += 1
            self.delivered.discard(self.last)


def post(url: str, event: dict[str, Any], timeout: float) -> None:
    """POST one event as JSON; an error unless the webhook answers 2xx."""
    body = json.dumps(event).encode()
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        if not 200 <= response.status < 300:
            raise OSError(f"webhook answered {response.status}")


def find_schema(conn: Any) -> str:
    """The schema the extension is installed in."""
    row = conn.execute(
        "SELECT n.nspname FROM pg_catalog.pg_extension AS e"
        " JOIN pg_catalog.pg_namespace AS n ON n.oid = e.extnamespace"
        " WHERE e.extname = 'tokenbucket'").fetchone()
    if row is None:
        raise RuntimeError("the extension tokenbucket is not installed in this database")
    return str(row[0])


def deliver_pending(conn: Any, url: str, state: State, state_path: str, *, schema: str,
                    settle: float = 300.0, timeout: float = 10.0,
                    currency: str | None = None) -> int:
    """POST every event after those ``state`` says were handled; returns how many."""
    rows = conn.execute(
        "SELECT e.id, e.bucket, e.threshold, e.period_start, e.period_end, e.budget,"
        " e.remaining, e.at, pg_catalog.clock_timestamp() - e.at"
        f" > pg_catalog.make_interval(secs => %s) FROM {quote_ident(schema)}.tb_alert_events AS e"
        " WHERE e.id > %s ORDER BY e.id", (settle, state.last)).fetchall()
    sent = 0
    present = {row[0] for row in rows}
    for (id_, bucket, threshold, start, end, budget, remaining, at, _old) in rows:
        if id_ in state.delivered:
            continue
        event = {"id": id_, "bucket": bucket, "threshold": threshold,
                 "period_start": start.isoformat(), "period_end": end.isoformat(),
                 "budget": budget, "remaining": remaining, "at": at.isoformat()}
        if currency is not None:
            event.update(budget=money(budget, currency), remaining=money(remaining, currency),
                         currency=currency)
        post(url, event, timeout)
        log.info("delivered %s (%s at %g of its budget, %s left of %s) to %s", id_, bucket,
                 threshold, event["remaining"], event["budget"], url)
        state.delivered.add(id_)
        sent += 1
        state.advance(set())
        state.save(state_path)
    # gaps below an event older than settle seconds will never be filled
    oldest_settled = max((row[0] for row in rows if row[8]), default=0)
    gaps = {i for i in range(state.last + 1, oldest_settled) if i not in present}
    if gaps:
        state.advance(gaps)
        state.save(state_path)
    return sent


def run(dsn: str, url: str, state_path: str, *, schema: str | None = None, poll: float = 30.0,
        settle: float = 300.0, timeout: float = 10.0, once: bool = False,
        stop: threading.Event | None = None, currency: str | None = None) -> None:
    """LISTEN and deliver until ``stop`` is set (``once``: deliver what is there, and return)."""
    import psycopg

    state = State.load(state_path)
    with psycopg.connect(dsn, autocommit=True) as conn:
        schema = schema or find_schema(conn)
        conn.execute(f"LISTEN {CHANNEL}")
        log.info("started: events of %s.tb_alert_events after id %s to %s (state %s)%s",
                 schema, state.last, url, state_path,
                 "" if currency is None else f", money in {currency}")
        while True:
            try:
                deliver_pending(conn, url, state, state_path, schema=schema, settle=settle,
                                timeout=timeout, currency=currency)
            except OSError as exc:
                log.warning("the webhook failed, tried again at the next look: %s", exc)
                # the webhook failed (urllib's errors are OSErrors): again at the next look
                if once:
                    raise
            if once or (stop is not None and stop.is_set()):
                return
            # a NOTIFY wakes it at once; else it looks again every poll seconds
            select.select([conn.fileno()], [], [], poll if stop is None else min(poll, 0.2))


def main(argv: list[str] | None = None) -> int:
    """The command line: python3 -m tokenbucket.alerts DSN URL --state FILE."""
    parser = argparse.ArgumentParser(prog="python3 -m tokenbucket.alerts",
                                     description="POST tokenbucket's quota alerts to a webhook.")
    parser.add_argument("dsn", help="the database tokenbucket is installed in (libpq conninfo or URL)")
    parser.add_argument("url", help="the webhook each event is POSTed to, as JSON")
    parser.add_argument("--state", required=True, help="the file that remembers what was delivered")
    parser.add_argument("--schema", help="the extension's schema (default: found in the catalog)")
    parser.add_argument("--poll", type=float, default=30.0, help="seconds between looks without a NOTIFY")
    parser.add_argument("--settle", type=float, default=300.0,
                        help="seconds after which a missing id is taken for a rolled-back one")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds a POST may take")
    parser.add_argument("--once", action="store_true", help="deliver what is there, then exit")
    parser.add_argument("--currency", help="the quotas' money (ISO 4217, e.g. EUR): amounts "
                                           "sent as decimal strings in its minor unit")
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(name)s: %(message)s", level=logging.INFO)
    run(args.dsn, args.url, args.state, schema=args.schema, poll=args.poll, settle=args.settle,
        timeout=args.timeout, once=args.once, currency=args.currency)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
