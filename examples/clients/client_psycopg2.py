#!/usr/bin/python3
"""examples/clients/client_psycopg2.py: the psycopg2 client of the clients
example (README.md), blocking, in autocommit.  Peeks once; proves on a
bucket of its own that sleeping retry_after_seconds is enough; then, with
the other clients, loops on tb_try on the shared bucket for
EXAMPLE_SECONDS, sleeping retry_after_seconds after each denial and waiting
in the server (tb_acquire_wait) every tenth call.  Prints one JSON line.
Connects with libpq's PGHOST, PGPORT, PGUSER and PGDATABASE.
"""
import json
import os
import time

import psycopg2

NAME = "psycopg2"
BUCKET = os.environ.get("EXAMPLE_BUCKET", "shared")
SECONDS = float(os.environ.get("EXAMPLE_SECONDS", "5"))
COST = float(os.environ.get("EXAMPLE_COST", "1"))
RATE = float(os.environ.get("EXAMPLE_RATE", "10"))      # to judge retry_after
BARRIER = int(os.environ.get("EXAMPLE_BARRIER", "0"))   # advisory lock key; 0: none
SOLO_ROUNDS = 5
WAIT_TIMEOUT = 1.0                                      # seconds


def main():
    db = psycopg2.connect("")
    # psycopg2 opens a transaction by default: a grant's row lock would be
    # held, and every other client kept waiting, until commit
    db.autocommit = True
    cur = db.cursor()
    r = {"client": NAME, "grants": 0, "denials": 0, "retried": 0, "retried_granted": 0,
         "waits": 0, "waits_granted": 0, "first_call": None, "last_grant": None,
         "retry_after_min": None, "retry_after_max": None, "retry_after_usable": True,
         "solo_retried": 0, "solo_retried_granted": 0}

    def try_once(bucket):
        """tb_try once; on a denial, judge retry_after_seconds and sleep it.
        Returns (granted, when the server answered, in epoch seconds)."""
        cur.execute("SELECT t.granted, t.retry_after_seconds,"
                    " extract(epoch FROM clock_timestamp())::float8"  # after the decision
                    " FROM tb_try(%s, %s) AS t", (bucket, COST))
        granted, wait, at = cur.fetchone()
        if not granted:
            usable = isinstance(wait, float) and 0 < wait <= COST / RATE + 0.001
            r["retry_after_usable"] = r["retry_after_usable"] and usable
            r["retry_after_min"] = min(wait, r["retry_after_min"] or wait)
            r["retry_after_max"] = max(wait, r["retry_after_max"] or wait)
            time.sleep(wait)
        return granted, at

    cur.execute("SELECT granted, remaining FROM tb_peek(%s, %s)", (BUCKET, COST))
    r["peek"] = dict(zip(("granted", "remaining"), cur.fetchone()))

    # alone on solo:psycopg2 (made from the template solo:*), a retry after
    # sleeping retry_after_seconds must be granted, every time
    while r["solo_retried"] < SOLO_ROUNDS:
        if not try_once("solo:" + NAME)[0]:
            r["solo_retried"] += 1
            r["solo_retried_granted"] += int(try_once("solo:" + NAME)[0])

    if BARRIER:     # start with the others: run.sh holds this lock until all wait
        cur.execute("SELECT pg_advisory_xact_lock_shared(%s)", (BARRIER,))
    cur.execute("SELECT extract(epoch FROM clock_timestamp())::float8")
    r["first_call"] = cur.fetchone()[0]
    after_denial = False
    calls = 0
    end = time.monotonic() + SECONDS
    while time.monotonic() < end:
        calls += 1
        if calls % 10 == 5:
            cur.execute("SELECT ok, extract(epoch FROM clock_timestamp())::float8"
                        " FROM tb_acquire_wait(%s, %s, make_interval(secs => %s)) AS ok",
                        (BUCKET, COST, WAIT_TIMEOUT))
            granted, at = cur.fetchone()
            r["waits"] += 1
            r["waits_granted"] += int(granted)
            after_denial = False
        else:
            granted, at = try_once(BUCKET)
            if after_denial:
                r["retried"] += 1
                r["retried_granted"] += int(granted)
            after_denial = not granted
            r["denials"] += int(not granted)
        if granted:
            r["grants"] += 1
            r["last_grant"] = at
    db.close()
    print(json.dumps(r))


if __name__ == "__main__":
    main()
