"""The first article's setup, with the limit in PostgreSQL: Celery tasks in
a prefork pool (every worker a forked process with its own connection),
each calling the stand-in provider.  With TB_LIMITER=on a task waits for
one request and its token estimate from the RPM and TPM buckets together
(tb_acquire_all_wait), calls, settles the estimate with the usage reported
(tb_settle), and on a 429 pauses the RPM bucket for the Retry-After given
(tb_pause), so every worker backs off.  With TB_LIMITER=off it just calls.
"""
import json
import os
import urllib.error
import urllib.request

import psycopg2
from celery import Celery
from celery.signals import worker_process_init

app = Celery("tokenbucket_example", broker=os.environ["BROKER_URL"], backend="rpc://")
app.conf.update(worker_prefetch_multiplier=1, task_acks_late=True,
                broker_connection_retry_on_startup=True)

LIMITER = os.environ.get("TB_LIMITER", "on") == "on"
PROVIDER = os.environ["PROVIDER_URL"]
db = None


@worker_process_init.connect
def connect(**_):
    """One connection per forked worker, opened after the fork."""
    global db
    db = psycopg2.connect(os.environ["DATABASE_URL"])
    db.autocommit = True


def sql(query, *args):
    with db.cursor() as cur:
        cur.execute(query, args)
        return cur.fetchone()[0]


@app.task
def call_llm(prompt_tokens, max_tokens):
    estimate = prompt_tokens + max_tokens
    if LIMITER and not sql("SELECT tb_acquire_all_wait(%s, %s, '60 seconds')",
                           ["provider:rpm", "provider:tpm"], [1, estimate]):
        return "timed out"
    request = urllib.request.Request(
        f"{PROVIDER}/v1/complete", method="POST",
        data=json.dumps({"prompt_tokens": prompt_tokens, "max_tokens": max_tokens}).encode(),
        headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request) as answer:
            used = json.load(answer)["usage"]["total_tokens"]
    except urllib.error.HTTPError as error:
        if error.code != 429:
            raise
        if LIMITER:
            sql("SELECT tb_pause('provider:rpm', %s * interval '1 second')",
                float(error.headers["Retry-After"]))
            sql("SELECT tb_settle('provider:tpm', %s, 0)", estimate)
        return "refused"
    if LIMITER:
        sql("SELECT tb_settle('provider:tpm', %s, %s)", estimate, used)
    return "served"
