"""The first article's setup, with the limit in PostgreSQL: Celery tasks in
a prefork pool calling the stand-in provider, limited by the tokenbucket
package (clients/python).  With TB_LIMITER=on, a task first takes one
request and its token estimate from the RPM and TPM buckets together; when
they are short, the task is retried with countdown = their retry_after
instead of blocking its worker process.  Granted, it calls, gives the
provider's rate-limit headers back to the buckets (tb_sync; on a 429 a
pause of both for the Retry-After given, so every worker backs off), and
settles the estimate with the usage reported (tb_settle).  With
TB_LIMITER=off it just calls.
"""
import json
import os
import sys
import urllib.error
import urllib.request

from celery import Celery

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../clients/python"))
import tokenbucket  # noqa: E402
import tokenbucket.celery  # noqa: E402

app = Celery("tokenbucket_example", broker=os.environ["BROKER_URL"], backend="rpc://")
app.conf.update(worker_prefetch_multiplier=1, task_acks_late=True,
                broker_connection_retry_on_startup=True)

LIMITER = os.environ.get("TB_LIMITER", "on") == "on"
PROVIDER = os.environ["PROVIDER_URL"]

# made in the parent, before Celery forks its pool: each worker process
# opens its own connection on first use
limiter = tokenbucket.Limiter(os.environ["DATABASE_URL"], driver="psycopg2",
                              headers=tokenbucket.header_map(requests="provider:rpm",
                                                             tokens="provider:tpm"))


def call(prompt_tokens, max_tokens):
    """POST to the provider: (status, headers, tokens used)."""
    request = urllib.request.Request(
        f"{PROVIDER}/v1/complete", method="POST",
        data=json.dumps({"prompt_tokens": prompt_tokens, "max_tokens": max_tokens}).encode(),
        headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request) as answer:
            return answer.status, answer.headers, json.load(answer)["usage"]["total_tokens"]
    except urllib.error.HTTPError as error:
        if error.code != 429:
            raise
        return 429, error.headers, 0


if LIMITER:
    @app.task(bind=True, max_retries=None)
    @tokenbucket.celery.limited(limiter, lambda prompt_tokens, max_tokens: {
        "provider:rpm": 1, "provider:tpm": prompt_tokens + max_tokens})
    def call_llm(self, prompt_tokens, max_tokens, reservation=None):
        status, headers, used = call(prompt_tokens, max_tokens)
        reservation.observe(status, headers)
        if status == 429:
            reservation.refund()
            return "refused"
        reservation.settle(used)
        return "served"
else:
    @app.task
    def call_llm(prompt_tokens, max_tokens):
        return "served" if call(prompt_tokens, max_tokens)[0] == 200 else "refused"
