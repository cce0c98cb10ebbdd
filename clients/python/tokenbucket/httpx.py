"""httpx transports that take tokens before each request and give the
provider's answer back to the buckets.

    limiter = tokenbucket.Limiter(DSN, headers=tokenbucket.header_map(
        requests="openai:rpm", tokens="openai:tpm"))
    client = httpx.Client(transport=LimitedTransport(
        limiter, lambda request: {"openai:rpm": 1, "openai:tpm": 2000}))
    openai.OpenAI(http_client=client)

For each request: reserve the costs (waiting up to timeout, client-side),
send, observe the status and headers (tb_sync from the remaining counts;
on a 429, a pause for its retry-after), then settle: a 429 refunds (the
provider billed nothing); usage(response), when given, returns what the
call used (a number for the last bucket, or {bucket: used}) and settles it;
an exception sending refunds.  lease=, the name of an in-flight limit:
each request also holds a slot of it, taken together with the tokens (all
or nothing) and released when the transport returns the response (see
Limiter.reserve).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Union

import httpx

from ._core import Duration
from ._async import AsyncLimiter
from ._sync import Limiter

CostsFor = Union[Mapping[str, float], Callable[[httpx.Request], Mapping[str, float]]]
UsageOf = Callable[[httpx.Response], Union[float, Mapping[str, float], None]]


def _costs(costs: CostsFor, request: httpx.Request) -> Mapping[str, float]:
    return costs(request) if callable(costs) else costs


class LimitedTransport(httpx.BaseTransport):
    """A sync transport around another (httpx.HTTPTransport() by default)."""

    def __init__(self, limiter: Limiter, costs: CostsFor, *, timeout: Duration | None = 60,
                 headers: Mapping[str, str] | None = None, usage: UsageOf | None = None,
                 transport: httpx.BaseTransport | None = None,
                 lease: str | None = None) -> None:
        self.limiter, self.costs, self.timeout = limiter, costs, timeout
        self.headers, self.usage, self.lease = headers, usage, lease
        self.transport = transport or httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self.limiter.reserve(_costs(self.costs, request), timeout=self.timeout,
                                  headers=self.headers, lease=self.lease) as r:
            response = self.transport.handle_request(request)
            r.observe(response.status_code, response.headers)
            if response.status_code == 429:
                r.refund()
            elif self.usage is not None:
                response.read()
                used = self.usage(response)
                if used is not None:
                    r.settle(used)
            return response

    def close(self) -> None:
        self.transport.close()


class AsyncLimitedTransport(httpx.AsyncBaseTransport):
    """The same for httpx.AsyncClient, with an AsyncLimiter."""

    def __init__(self, limiter: AsyncLimiter, costs: CostsFor, *,
                 timeout: Duration | None = 60, headers: Mapping[str, str] | None = None,
                 usage: UsageOf | None = None,
                 transport: httpx.AsyncBaseTransport | None = None,
                 lease: str | None = None) -> None:
        self.limiter, self.costs, self.timeout = limiter, costs, timeout
        self.headers, self.usage, self.lease = headers, usage, lease
        self.transport = transport or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        async with self.limiter.reserve(_costs(self.costs, request), timeout=self.timeout,
                                        headers=self.headers, lease=self.lease) as r:
            response = await self.transport.handle_async_request(request)
            await r.observe(response.status_code, response.headers)
            if response.status_code == 429:
                await r.refund()
            elif self.usage is not None:
                await response.aread()
                used = self.usage(response)
                if used is not None:
                    await r.settle(used)
            return response

    async def aclose(self) -> None:
        await self.transport.aclose()


def openai_usage(response: httpx.Response) -> Any:
    """usage= for OpenAI-style answers: the JSON body's usage.total_tokens."""
    try:
        return response.json()["usage"]["total_tokens"]
    except (ValueError, KeyError, TypeError):
        return None
