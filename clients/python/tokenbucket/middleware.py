"""WSGI and ASGI middleware: a bucket per key taken from the request, and
429 Too Many Requests with Retry-After and RateLimit when it is empty.

    # Flask
    app.wsgi_app = WSGIMiddleware(app.wsgi_app, Limiter(DSN), key=from_header("x-api-key"))
    # Starlette / FastAPI
    app.add_middleware(ASGIMiddleware, limiter=AsyncLimiter(DSN), key=from_query("user"))

The DBA makes the template once: SELECT tb_create('user:*', 20, 1).  The
bucket is prefix + key; a key is untrusted input, so one that does not
match key_pattern (1 to 64 of A-Z a-z 0-9 _ . -: never '*', which would
name the template) is answered 400 and makes no bucket.  A request with no
key (key returns None) is refused: 400 "missing key" (missing_status=401
for 401), unless required=False, which lets it through unlimited.
Every limited answer carries `RateLimit: "<policy>";r=<left>;t=<seconds to full>`
(the IETF draft's field); a 429 also Retry-After in whole seconds, rounded up.
"""
from __future__ import annotations

import math
import re
from typing import Any, Callable, Iterable, Union
from urllib.parse import parse_qs

from ._async import AsyncLimiter
from ._core import Decision
from ._sync import Limiter

KEY_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,64}")

# a WSGI environ or an ASGI scope; a key function reads one
Request = dict[str, Any]
KeyOf = Callable[[Request], Union[str, None]]
Headers = list[tuple[str, str]]


def from_header(name: str) -> KeyOf:
    """A key function reading a request header (WSGI environ or ASGI scope)."""
    lower = name.lower()
    wsgi = "HTTP_" + name.upper().replace("-", "_")

    def key(request: Request) -> str | None:
        if "type" in request and "headers" in request:     # ASGI scope
            for k, v in request["headers"]:
                if k.decode("latin-1").lower() == lower:
                    return str(v.decode("latin-1"))
            return None
        value = request.get(wsgi)
        return None if value is None else str(value)
    return key


def from_query(name: str) -> KeyOf:
    """A key function reading a query parameter."""

    def key(request: Request) -> str | None:
        if "type" in request:
            raw = request.get("query_string", b"").decode("latin-1")
        else:
            raw = request.get("QUERY_STRING", "")
        values = parse_qs(raw, keep_blank_values=True).get(name)
        return values[0] if values else None
    return key


def _headers(decision: Decision, policy: str) -> Headers:
    left = max(0, math.floor(decision.remaining))
    out = [("RateLimit", f'"{policy}";r={left};t={math.ceil(decision.reset_after)}')]
    if not decision.granted:
        out.append(("Retry-After", str(max(1, math.ceil(decision.retry_after)))))
    return out


_REASONS = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden"}


class _Rules:
    def __init__(self, key: KeyOf, prefix: str, cost: float, key_pattern: re.Pattern[str],
                 required: bool, missing_status: int, policy: str) -> None:
        if missing_status not in _REASONS:
            raise ValueError("missing_status is 400, 401 or 403")
        self.key, self.prefix, self.cost = key, prefix, cost
        self.pattern, self.required, self.policy = key_pattern, required, policy
        self.missing_status = missing_status

    def bucket(self, request: Request) -> tuple[str | None, int, bytes]:
        """(bucket name or None, status to refuse with or 0, its body)."""
        value = self.key(request)
        if value is None:
            if self.required:
                return None, self.missing_status, b"missing key\n"
            return None, 0, b""
        if not self.pattern.fullmatch(value):
            return None, 400, b"invalid key\n"
        return self.prefix + value, 0, b""


class WSGIMiddleware:
    """For Flask and any WSGI application, with a Limiter."""

    def __init__(self, app: Callable[..., Iterable[bytes]], limiter: Limiter, *,
                 key: KeyOf, prefix: str = "user:", cost: float = 1,
                 key_pattern: re.Pattern[str] = KEY_PATTERN, required: bool = True,
                 missing_status: int = 400, policy: str = "default") -> None:
        self.app, self.limiter = app, limiter
        self.rules = _Rules(key, prefix, cost, key_pattern, required, missing_status, policy)

    def __call__(self, environ: Request, start_response: Callable[..., Any]) -> Iterable[bytes]:
        bucket, refuse, body = self.rules.bucket(environ)
        if refuse:
            start_response(f"{refuse} {_REASONS[refuse]}", [("Content-Type", "text/plain")])
            return [body]
        if bucket is None:
            return self.app(environ, start_response)
        decision = self.limiter.try_(bucket, self.rules.cost)
        extra = _headers(decision, self.rules.policy)
        if not decision.granted:
            start_response("429 Too Many Requests", [("Content-Type", "text/plain")] + extra)
            return [b"Too Many Requests\n"]

        def start(status: str, headers: Headers, exc_info: Any = None) -> Any:
            return start_response(status, list(headers) + extra, exc_info)
        return self.app(environ, start)


class ASGIMiddleware:
    """For Starlette, FastAPI and any ASGI application, with an AsyncLimiter."""

    def __init__(self, app: Any, limiter: AsyncLimiter, *,
                 key: KeyOf, prefix: str = "user:", cost: float = 1,
                 key_pattern: re.Pattern[str] = KEY_PATTERN, required: bool = True,
                 missing_status: int = 400, policy: str = "default") -> None:
        self.app, self.limiter = app, limiter
        self.rules = _Rules(key, prefix, cost, key_pattern, required, missing_status, policy)

    async def __call__(self, scope: Request, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        bucket, refuse, body = self.rules.bucket(scope)
        if refuse:
            await _answer(send, refuse, [], body)
            return
        if bucket is None:
            await self.app(scope, receive, send)
            return
        decision = await self.limiter.try_(bucket, self.rules.cost)
        extra = [(k.lower().encode(), v.encode()) for k, v in _headers(decision, self.rules.policy)]
        if not decision.granted:
            await _answer(send, 429, extra, b"Too Many Requests\n")
            return

        async def send_with(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": list(message.get("headers", [])) + extra}
            await send(message)
        await self.app(scope, receive, send_with)


async def _answer(send: Any, status: int, headers: list[tuple[bytes, bytes]],
                  body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain")] + headers})
    await send({"type": "http.response.body", "body": body})
