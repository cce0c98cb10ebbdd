"""Celery tasks that wait for tokens by being retried later, not by blocking
a worker process.

    limiter = tokenbucket.Limiter(os.environ["DATABASE_URL"])   # fork-safe

    @app.task(bind=True, max_retries=None)
    @tokenbucket.celery.limited(limiter, lambda prompt, max_tokens: {
        "openai:rpm": 1, "openai:tpm": len(prompt) // 4 + max_tokens})
    def complete(self, prompt, max_tokens, reservation=None):
        response = client.post(...)
        reservation.observe(response.status_code, response.headers)
        reservation.settle(response.json()["usage"]["total_tokens"])

Before the task body runs, the costs are taken at once (tb_try, nothing
waits).  When the buckets say no, the task books its tokens (book=True,
the default): it takes them now, into debt if need be (tb_settle), and is
retried with countdown = the seconds until the buckets are out of that
debt (the refusal's retry_after, counting the tasks that booked before
it) plus a random part of up to jitter times it; the retry runs on its
booked tokens without asking again.  So a task makes at most two tries,
however many wait, and the worker takes the next task meanwhile.  Booked
tokens are spent even if the retry never runs (a task revoked, or
max_retries reached: then they are refunded).  With book=False a refused
task takes nothing and is retried after the buckets' retry_after plus a
random part of up to jitter times it, that share doubling with each retry
(as many tries as it takes).  max_jitter, when given, caps the random
part in seconds.

lease=: an in-flight limit whose slot is taken with the tokens (all or
nothing, tb_lease_all) and held while the body runs; refused, the task is
retried after the tokens' retry_after, or LEASE_RETRY seconds for a slot,
plus jitter (no booking).

When granted, the body runs inside a Reservation (passed as reservation=
when the function takes that argument): an exception refunds, a normal
end keeps what was reserved unless settled.
"""
from __future__ import annotations

import functools
import inspect
import math
import random
from typing import Any, Callable, Mapping, Union

from ._core import costs_of, waited
from ._sync import Limiter, Reservation
from .errors import RateLimited

CostsFor = Union[Mapping[str, float], Callable[..., Mapping[str, float]]]

# the task's keyword argument that carries its booked tokens to its retry
BOOKED = "_tokenbucket_booked"
# seconds before a task refused a slot of an in-flight limit asks again
LEASE_RETRY = 1.0


def limited(limiter: Limiter, costs: CostsFor, *, jitter: float = 0.1,
            max_jitter: float | None = None, max_retries: int | None = None, book: bool = True,
            lease: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a task's function (under @app.task(bind=True) or not).
    costs: a mapping, or a function of the task's arguments returning one.
    max_retries: passed to task.retry (None: the task's own; give the task
    max_retries=None to retry for as long as it takes)."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        params = inspect.signature(fn).parameters
        wants = "reservation" in params
        bound = next(iter(params), None) == "self"

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            from celery import current_task
            booked = kwargs.pop(BOOKED, None)
            task = args[0] if bound else current_task
            if booked is not None:          # a retry that booked its tokens
                r = Reservation(limiter, {str(k): float(v) for k, v in booked.items()},
                                waited(True), limiter.headers)
            else:
                call_args = args[1:] if bound else args
                c = costs_of(costs(*call_args, **kwargs) if callable(costs) else costs)
                r = _grant(limiter, c, lease, book, (jitter, max_jitter), task, max_retries,
                           kwargs)
            with r:
                if wants:
                    kwargs["reservation"] = r
                return fn(*args, **kwargs)

        return run

    return decorate


def _grant(limiter: Limiter, costs: dict[str, float], lease: str | None, book: bool,
           jitters: tuple[float, float | None], task: Any, max_retries: int | None,
           kwargs: dict[str, Any]) -> Reservation:
    """The reservation of a task granted now; else the task retried later."""
    retry_kwargs = None
    jitter, max_jitter = jitters
    if lease is not None:
        try:
            return limiter.reserve(costs, lease=lease, timeout=0)
        except RateLimited as refused:
            wait = refused.retry_after if math.isfinite(refused.retry_after) else LEASE_RETRY
        booked = False
    else:
        decision = limiter._drive(limiter._try(costs, None, None, True))   # with its moment
        if decision.granted:
            return Reservation(limiter, costs, decision, limiter.headers)
        booked = book
        if booked:
            wait = limiter._drive(limiter._book(costs))
            retry_kwargs = {**kwargs, BOOKED: costs}
        else:
            wait = decision.retry_after
            jitter *= 2 ** min(task.request.retries or 0, 10)
    countdown = wait + min(random.uniform(0, jitter * wait),
                           math.inf if max_jitter is None else max_jitter)
    from celery.exceptions import Retry
    try:
        raise task.retry(countdown=countdown, max_retries=max_retries, kwargs=retry_kwargs)
    except Retry:
        raise
    except BaseException:
        if booked:                  # no retry: the booked tokens go back
            limiter.refund(costs)
        raise
