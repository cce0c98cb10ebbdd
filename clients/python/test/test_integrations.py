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
    assert abs(tokens(admin, name) + 0.5) < 0.1          # booked: taken now, into debt
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
    keyless = client.get("/hello")                        # no key: refused by default
    assert keyless.status_code == 400 and keyless.data == b"missing key\n"
    app.wsgi_app = WSGIMiddleware(app.wsgi_app.app, lim, key=from_query("user"), prefix=name,
                                  missing_status=401)
    assert client.get("/hello").status_code == 401
    app.wsgi_app = WSGIMiddleware(app.wsgi_app.app, lim, key=from_query("user"), prefix=name,
                                  required=False)
    assert client.get("/hello").status_code == 200       # let through, unlimited, on purpose
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
                       prefix=name)                       # refusing a keyless request by default

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
    assert (await get(None))[0] == 400                    # required by default
    assert (await get("k*"))[0] == 400
    await lim.close()


SECONDS = 2.0
CAPACITY, RATE = 5, 20          # the template: 5 at once, then 20 a second


def _check_gateway(admin, name, answers, t0, t1):
    """answers: (user, status, headers) of every request; t0, t1: the
    server's clock around them.  Each user's bucket granted no more than
    capacity + rate x elapsed (and at least half of that: the limit is not
    refusing everyone), as the answers and the server's counters say."""
    elapsed = (t1 - t0).total_seconds()
    allowed = CAPACITY + RATE * elapsed
    for user in ("alice", "bob"):
        mine = [(s, h) for u, s, h in answers if u == user]
        ok = sum(s == 200 for s, _ in mine)
        refused = [h for s, h in mine if s == 429]
        assert ok + len(refused) == len(mine) and len(refused) > len(mine) // 2
        assert 0.5 * allowed <= ok <= allowed, (user, ok, allowed)
        server = admin.execute("SELECT granted FROM tb_stats WHERE name = %s",
                               (name + user,)).fetchone()[0]
        assert server == ok
        assert all(int(h["retry-after"]) >= 1 and h["ratelimit"].startswith('"default";r=0;')
                   for h in refused)
    print(f"# {len(answers)} requests in {elapsed:.2f} s: "
          f"{sum(s == 200 for _, s, _ in answers)} granted, at most {2 * allowed:.0f} allowed")


async def test_asgi_200_concurrent_clients(admin, name):
    """The gateway scenario on ASGI: 200 clients at once, half of them
    alice, half bob, each asking again as soon as answered for 2 s."""
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from tokenbucket.middleware import ASGIMiddleware, from_header

    make_bucket(admin, name + "*", CAPACITY, RATE)

    async def hello(request):
        return PlainTextResponse("hello\n")

    lim = tokenbucket.AsyncLimiter(url(), pool_size=10)
    app = Starlette(routes=[Route("/hello", hello)])
    app.add_middleware(ASGIMiddleware, limiter=lim, key=from_header("X-API-Key"), prefix=name)
    answers = []

    async def client(user):
        loop = asyncio.get_running_loop()
        end = loop.time() + SECONDS
        while loop.time() < end:
            sent = []
            scope = {"type": "http", "method": "GET", "path": "/hello", "raw_path": b"/hello",
                     "query_string": b"", "headers": [(b"x-api-key", user.encode())],
                     "http_version": "1.1", "scheme": "http", "server": ("t", 80),
                     "client": ("c", 1), "root_path": ""}

            async def receive():
                return {"type": "http.request", "body": b"", "more_body": False}

            async def send(message):
                sent.append(message)
            await app(scope, receive, send)
            answers.append((user, sent[0]["status"],
                            {k.decode(): v.decode() for k, v in sent[0]["headers"]}))
            await asyncio.sleep(0.01)

    t0 = admin.execute("SELECT clock_timestamp()").fetchone()[0]
    await asyncio.gather(*(client(("alice", "bob")[i % 2]) for i in range(200)))
    t1 = admin.execute("SELECT clock_timestamp()").fetchone()[0]
    _check_gateway(admin, name, answers, t0, t1)
    await lim.close()


def test_wsgi_200_concurrent_clients(admin, name):
    """The same on WSGI (Flask): 200 client threads."""
    import threading
    import time
    from flask import Flask
    from tokenbucket.middleware import WSGIMiddleware, from_query

    make_bucket(admin, name + "*", CAPACITY, RATE)
    app = Flask("tb_test_200")

    @app.get("/hello")
    def hello():
        return "hello\n"

    lim = tokenbucket.Limiter(conninfo(), pool_size=10)
    app.wsgi_app = WSGIMiddleware(app.wsgi_app, lim, key=from_query("user"), prefix=name)
    answers = []
    go = threading.Event()

    def client(user):
        http = app.test_client()
        go.wait()
        end = time.monotonic() + SECONDS
        while time.monotonic() < end:
            r = http.get("/hello", query_string={"user": user})
            answers.append((user, r.status_code, {k.lower(): v for k, v in r.headers.items()}))
            time.sleep(0.01)

    threads = [threading.Thread(target=client, args=(("alice", "bob")[i % 2],))
               for i in range(200)]
    for t in threads:
        t.start()
    t0 = admin.execute("SELECT clock_timestamp()").fetchone()[0]
    go.set()
    for t in threads:
        t.join()
    t1 = admin.execute("SELECT clock_timestamp()").fetchone()[0]
    _check_gateway(admin, name, answers, t0, t1)
    lim.close()


def prefork(call, jobs: int, workers: int = 4, limit: float = 120):
    """Celery's prefork pool and broker, as the tests need them: workers
    processes forked now run call (a task under tokenbucket.celery.limited,
    its retry replaced by one that reports the countdown and kwargs); this
    process keeps each retried task until its countdown is up and hands it
    back with those kwargs.  (served [(n, result)], tries)."""
    import heapq
    import multiprocessing as mp
    import time
    from celery.exceptions import Retry

    retried: list = []                              # the retry of the task run last

    def retry(countdown=None, max_retries=None, kwargs=None, **kw):
        retried.append((countdown, kwargs))
        return Retry("later", when=countdown)
    call.retry = retry

    def worker(inbox, outbox):
        while (job := inbox.get()) is not None:
            n, retries, kwargs = job
            retried.clear()
            result = call.apply(args=(n,), kwargs=kwargs, retries=retries)
            outbox.put((n, result.state, result.result if result.state == "SUCCESS"
                        else retried[0] if retried else repr(result.result)))

    ctx = mp.get_context("fork")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(inbox, outbox)) for _ in range(workers)]
    for w in procs:
        w.start()
    for n in range(jobs):
        inbox.put((n, 0, {}))
    due, retries, served, tries = [], [0] * jobs, [], 0
    deadline = time.monotonic() + limit
    while len(served) < jobs and time.monotonic() < deadline:
        while due and due[0][0] <= time.monotonic():
            _, n, kwargs = heapq.heappop(due)
            inbox.put((n, retries[n], kwargs))
        try:
            n, state, value = outbox.get(timeout=0.005)
        except Exception:
            continue
        tries += 1
        if state == "SUCCESS":
            served.append((n, value))
        else:
            assert state == "RETRY", (state, value)
            retries[n] += 1
            countdown, kwargs = value
            heapq.heappush(due, (time.monotonic() + countdown, n, kwargs or {}))
    for w in procs:
        inbox.put(None)
    for w in procs:
        w.join(20)
    return served, tries


def test_celery_200_tasks_hold_the_limit(admin, name, provider):
    """The first article's scenario: 200 tasks at once on 4 worker processes
    forked after the limiter was made (Celery's prefork pool; the broker's
    countdown kept by this process, which hands each retried task back when
    its countdown is up), each limited by tokenbucket.celery.limited: the
    provider refuses none and serves each task once, and the bucket granted
    no more than capacity + rate x elapsed (the server's clock)."""
    import json
    import urllib.request
    from celery import Celery
    import tokenbucket.celery as tbc

    base = provider(rpm=50, tpm=1e9, window=1, latency=0.01)
    rpm = name + "rpm"
    make_bucket(admin, rpm, 5, 40)                 # under the provider's 50 a second
    app = f"tb-celery-{name}"
    lim = tokenbucket.Limiter(conninfo(application_name=app), driver="psycopg2",
                              headers=tokenbucket.header_map(requests=rpm))
    assert lim.peek(rpm).granted                    # the parent's connection is open
    celery = Celery("tb_test_200", broker="memory://", backend="cache+memory://")

    @celery.task(bind=True, max_retries=None)
    @tbc.limited(lim, {rpm: 1})
    def call(self, n, reservation=None):
        request = urllib.request.Request(base + "/v1/complete", data=b'{"prompt_tokens": 1}',
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request) as answer:
            reservation.observe(answer.status, answer.headers)
            return answer.status

    t0 = admin.execute("SELECT clock_timestamp()").fetchone()[0]
    served, tries = prefork(call, 200)
    t1 = admin.execute("SELECT clock_timestamp()").fetchone()[0]
    elapsed = (t1 - t0).total_seconds()
    with urllib.request.urlopen(base + "/stats") as answer:
        p = json.load(answer)
    s = admin.execute("SELECT granted FROM tb_stats WHERE name = %s", (rpm,)).fetchone()[0]
    print(f"# 200 tasks in {elapsed:.2f} s, {tries} tries; provider served {p['served']}, "
          f"refused {p['refused']}; granted {s}, at most {5 + 40 * elapsed:.0f}")
    assert sorted(n for n, _ in served) == list(range(200)) and {v for _, v in served} == {200}
    assert p["served"] == 200 and p["refused"] == 0
    assert s <= 200 and s <= 5 + 40 * elapsed
    assert elapsed < 10 * (195 / 40)
    lim.close()


def test_celery_readme_example_two_tries_per_success(admin, name, provider):
    """README's Celery example (a request and its token estimate, observe,
    settle) with 200 tasks at once on 4 worker processes, the buckets below
    the provider's limits: at most 2 tries per task served (each refused
    task is retried once its turn has come, not over and over), and no 429."""
    import json
    import time
    import urllib.request
    from celery import Celery
    import tokenbucket.celery as tbc

    base = provider(rpm=50, tpm=30000, window=1, latency=0.01)
    rpm, tpm = name + "rpm", name + "tpm"
    make_bucket(admin, rpm, 5, 40)
    make_bucket(admin, tpm, 2000, 24000)
    lim = tokenbucket.Limiter(conninfo(), driver="psycopg2",
                              headers=tokenbucket.header_map(requests=rpm, tokens=tpm))
    celery = Celery("tb_test_readme", broker="memory://", backend="cache+memory://")

    @celery.task(bind=True, max_retries=None)
    @tbc.limited(lim, lambda n, reservation=None: {rpm: 1, tpm: 100 + 400})
    def complete(self, n, reservation=None):
        body = json.dumps({"prompt_tokens": 100, "max_tokens": 400}).encode()
        request = urllib.request.Request(base + "/v1/complete", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request) as response:
            reservation.observe(response.status, response.headers)
            reservation.settle(json.load(response)["usage"]["total_tokens"])
            return response.status

    started = time.monotonic()
    served, tries = prefork(complete, 200)
    elapsed = time.monotonic() - started
    with urllib.request.urlopen(base + "/stats") as answer:
        p = json.load(answer)
    print(f"# README's Celery example: 200 tasks in {elapsed:.2f} s, {tries} tries, "
          f"{tries / max(1, len(served)):.2f} a success; provider refused {p['refused']}")
    assert len(served) == 200 and p["refused"] == 0
    assert tries <= 2 * len(served)
    lim.close()


def test_celery_prefork_holds_leases(admin, name, provider):
    """tokenbucket.celery.limited(lease=...): 40 tasks on 4 worker processes,
    a limit of 2 in flight at a provider that refuses a third: each task's
    slot is taken with its token and held while its body runs, in its
    worker's lease connection; none refused, none over."""
    import json
    import urllib.request
    from celery import Celery
    import tokenbucket.celery as tbc

    base = provider(rpm=1000, tpm=1e9, window=1, latency=0.05, concurrency=2)
    rpm, inflight = name + "rpm", name + "inflight"
    make_bucket(admin, rpm, 10, 500)
    admin.execute("SELECT tb_create_limit(%s, 2)", (inflight,))
    lim = tokenbucket.Limiter(conninfo(), driver="psycopg2")
    celery = Celery("tb_test_lease", broker="memory://", backend="cache+memory://")

    @celery.task(bind=True, max_retries=None)
    @tbc.limited(lim, {rpm: 1}, lease=inflight)
    def call(self, n, reservation=None):
        assert reservation.lease is not None
        request = urllib.request.Request(base + "/v1/complete", data=b'{"prompt_tokens": 1}',
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request) as answer:
            return answer.status

    served, tries = prefork(call, 40)
    with urllib.request.urlopen(base + "/stats") as answer:
        p = json.load(answer)
    print(f"# 40 tasks with leases: {tries} tries, provider at most {p['max_in_flight']} "
          f"in flight, refused {p['refused_in_flight']}")
    assert sorted(n for n, _ in served) == list(range(40)) and {v for _, v in served} == {200}
    assert p["max_in_flight"] <= 2 and p["refused_in_flight"] == 0
    assert admin.execute("SELECT count(*) FROM tb_leases WHERE name = %s",
                         (inflight,)).fetchone()[0] == 0
    lim.close()
