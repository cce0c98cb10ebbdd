"""The integrations: Celery's retry instead of a wait, WSGI and ASGI 429s."""
from __future__ import annotations

import asyncio

import pytest

import tokenbucket
from conftest import conninfo, make_bucket, tokens, url


def test_celery_retries_with_countdown(admin, name):
    from celery import Celery
    from celery.exceptions import Retry
    import tokenbucket.celery as tbc

    make_bucket(admin, name, 2, 1, 10)                   # 2 at once, then 1 every 10 s
    lim = tokenbucket.Limiter(conninfo())
    app = Celery("tb_test", broker="memory://", backend="cache+memory://")
    ran, countdowns = [], []

    @app.task(bind=True, max_retries=None)
    @tbc.limited(lim, lambda n, fail=False, reservation=None: {name: n})
    def work(self, n, fail=False, reservation=None):
        ran.append(reservation.decision.granted)
        if fail:
            raise ValueError("the call failed")
        reservation.settle(0.5)
        return n

    def retry(countdown=None, max_retries=None, **kw):
        countdowns.append(countdown)
        return Retry("later", when=countdown)
    work.retry = retry
    assert work.apply(args=(1,)).get() == 1              # 1 taken, 0.5 given back
    assert abs(tokens(admin, name) - 1.5) < 0.1
    with pytest.raises(ValueError):
        work.apply(args=(1,), kwargs={"fail": True}).get()   # refunded: the call failed
    assert abs(tokens(admin, name) - 1.5) < 0.1
    result = work.apply(args=(2,))                       # 2 > 1.5: not now
    assert result.state == "RETRY" and len(countdowns) == 1
    assert 4.5 < countdowns[0] < 7.0                     # 0.5 tokens at 0.1 a second, + jitter
    assert ran == [True, True]
    lim.close()


def test_wsgi_flask(admin, name):
    from flask import Flask
    from tokenbucket.middleware import WSGIMiddleware, from_query

    make_bucket(admin, name + "*", 3, 1, 3600)
    app = Flask("tb_test")

    @app.get("/hello")
    def hello():
        return "hello\n"

    lim = tokenbucket.Limiter(conninfo())
    app.wsgi_app = WSGIMiddleware(app.wsgi_app, lim, key=from_query("user"), prefix=name)
    client = app.test_client()
    answers = [client.get("/hello?user=alice") for _ in range(5)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429, 429]
    assert answers[0].headers["RateLimit"].startswith('"default";r=2;t=')
    assert answers[3].headers["Retry-After"] == "3600"
    assert answers[3].headers["RateLimit"].startswith('"default";r=0;t=')
    assert client.get("/hello?user=bob").status_code == 200
    for bad in ("*", "alice*", "a" * 65, "al ice", "\u00e5sa", ""):
        assert client.get("/hello", query_string={"user": bad}).status_code == 400
    assert client.get("/hello").status_code == 200        # no key: not limited
    n = admin.execute("SELECT count(*) FROM tb_status WHERE template = %s",
                      (name + "*",)).fetchone()[0]
    assert n == 2                                         # bad keys made no bucket
    lim.close()


async def test_asgi(admin, name):
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from tokenbucket.middleware import ASGIMiddleware, from_header

    make_bucket(admin, name + "*", 2, 1, 3600)

    async def hello(request):
        return PlainTextResponse("hello\n")

    lim = tokenbucket.AsyncLimiter(url())
    app = Starlette(routes=[Route("/hello", hello)])
    app.add_middleware(ASGIMiddleware, limiter=lim, key=from_header("X-API-Key"),
                       prefix=name, required=True)

    async def get(key):
        sent = []
        headers = [] if key is None else [(b"x-api-key", key.encode())]
        scope = {"type": "http", "method": "GET", "path": "/hello", "raw_path": b"/hello",
                 "query_string": b"", "headers": headers, "http_version": "1.1",
                 "scheme": "http", "server": ("t", 80), "client": ("c", 1), "root_path": ""}

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            sent.append(message)
        await app(scope, receive, send)
        start = sent[0]
        return start["status"], dict((k.decode(), v.decode()) for k, v in start["headers"])

    answers = [await get("k1") for _ in range(3)]
    assert [s for s, _ in answers] == [200, 200, 429]
    assert answers[2][1]["retry-after"] == "3600" and "ratelimit" in answers[2][1]
    assert (await get(None))[0] == 400                    # required
    assert (await get("k*"))[0] == 400
    await lim.close()
