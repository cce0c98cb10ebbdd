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
waits); when the buckets say no, the task is retried with countdown =
their retry_after plus a random part (a tenth of it, doubling with each
retry of the task up to max_jitter seconds, so that many tasks refused
together spread out), and the worker takes the next task meanwhile.  When granted, the body runs inside a Reservation (passed as
reservation= when the function takes that argument): an exception
refunds, a normal end keeps what was reserved unless settled.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Mapping, Union

from ._core import costs_of, spread
from ._sync import Limiter, Reservation

CostsFor = Union[Mapping[str, float], Callable[..., Mapping[str, float]]]


def limited(limiter: Limiter, costs: CostsFor, *, jitter: float = 0.1, max_jitter: float = 1.0,
            max_retries: int | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
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
            call_args = args[1:] if bound else args
            c = costs(*call_args, **kwargs) if callable(costs) else costs
            decision = limiter.try_(c)
            if not decision.granted:
                task = args[0] if bound else current_task
                countdown = spread(decision.retry_after, task.request.retries or 0,
                                   jitter, max_jitter)
                raise task.retry(countdown=countdown, max_retries=max_retries)
            with Reservation(limiter, costs_of(c), decision, limiter.headers) as r:
                if wants:
                    kwargs["reservation"] = r
                return fn(*args, **kwargs)

        return run

    return decorate
