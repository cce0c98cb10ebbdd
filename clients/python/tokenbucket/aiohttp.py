"""An aiohttp session whose requests take tokens first.

    limiter = tokenbucket.AsyncLimiter(DSN, headers=tokenbucket.header_map(
        requests="openai:rpm", tokens="openai:tpm"))
    async with LimitedSession(limiter, {"openai:rpm": 1, "openai:tpm": 2000}) as session:
        async with session.post(url, json=body) as response:
            ...

Each request reserves its costs (costs= per request overrides the
session's), waiting up to timeout without holding a database connection;
the response's status and headers are observed as soon as they arrive (a
429 pauses the buckets and refunds); usage, a function of the JSON body
returning what was used, settles after the block; an exception or a
cancellation refunds.  lease=, the name of an in-flight limit: each
request also holds a slot of it, taken with the tokens (all or nothing,
waiting without a database connection) and released after the block.
"""
from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator, Callable, Mapping

import aiohttp

from ._async import AsyncLimiter
from ._core import Duration


class LimitedSession:
    """Wraps an aiohttp.ClientSession (made here when none is given)."""

    def __init__(self, limiter: AsyncLimiter, costs: Mapping[str, float], *,
                 session: aiohttp.ClientSession | None = None, timeout: Duration | None = 60,
                 headers: Mapping[str, str] | None = None,
                 usage: Callable[[Any], Any] | None = None, lease: str | None = None,
                 **session_kwargs: Any) -> None:
        self.limiter, self.costs, self.timeout = limiter, costs, timeout
        self.headers, self.usage, self.lease = headers, usage, lease
        self._own = session is None
        self.session = session if session is not None else aiohttp.ClientSession(**session_kwargs)

    @contextlib.asynccontextmanager
    async def request(self, method: str, url: Any, *, costs: Mapping[str, float] | None = None,
                      **kwargs: Any) -> AsyncIterator[aiohttp.ClientResponse]:
        async with self.limiter.reserve(self.costs if costs is None else costs,
                                        timeout=self.timeout, headers=self.headers,
                                        lease=self.lease) as r:
            async with self.session.request(method, url, **kwargs) as response:
                await r.observe(response.status, response.headers)
                if response.status == 429:
                    await r.refund()
                yield response
                if self.usage is not None and not r.settled:
                    used = self.usage(await response.json())
                    if used is not None:
                        await r.settle(used)

    def get(self, url: Any, **kwargs: Any) -> Any:
        return self.request("GET", url, **kwargs)

    def post(self, url: Any, **kwargs: Any) -> Any:
        return self.request("POST", url, **kwargs)

    async def close(self) -> None:
        if self._own:
            await self.session.close()

    async def __aenter__(self) -> "LimitedSession":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
