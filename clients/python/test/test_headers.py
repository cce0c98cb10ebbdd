"""Reading providers' rate-limit headers, and applying them to buckets."""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest

import tokenbucket
from tokenbucket import headers as h
from conftest import conninfo, make_bucket, tokens


@pytest.mark.parametrize("text,seconds", [
    ("6m0s", 360), ("20ms", 0.02), ("1s", 1), ("0.5s", 0.5), ("1h2m3.5s", 3723.5),
    ("2m59.56s", 179.56), ("20", 20), ("0.25", 0.25), ("", None), ("soon", None)])
def test_durations(text, seconds):
    got = h.parse_duration(text)
    assert got == (None if seconds is None else pytest.approx(seconds))


def test_moments():
    now = time.time()
    in30 = datetime.fromtimestamp(now + 30, timezone.utc)
    assert h.parse_duration(in30.strftime("%Y-%m-%dT%H:%M:%SZ"), now) == pytest.approx(30, abs=1)
    assert h.parse_duration(format_datetime(in30, usegmt=True), now) == pytest.approx(30, abs=1)
    assert h.parse_duration("2000-01-01T00:00:00Z", now) == 0


def test_openai():
    obs = h.parse(200, {"X-RateLimit-Remaining-Requests": "59", "x-ratelimit-remaining-tokens": "41000",
                        "x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s"})
    assert obs.remaining == {"x-ratelimit-remaining-requests": 59,
                             "x-ratelimit-remaining-tokens": 41000}
    assert obs.resets == {"x-ratelimit-remaining-requests": 1,
                          "x-ratelimit-remaining-tokens": 360}
    m = tokenbucket.header_map(requests="openai:rpm", tokens="openai:tpm")
    assert h.plan(obs, m) == ({"openai:rpm": 59, "openai:tpm": 41000}, None)


def test_anthropic_and_429():
    reset = (datetime.now(timezone.utc) + timedelta(seconds=12)).isoformat()
    obs = h.parse(429, [("anthropic-ratelimit-requests-remaining", "0"),
                        ("anthropic-ratelimit-requests-reset", reset),
                        ("anthropic-ratelimit-tokens-remaining", "800"),
                        ("retry-after", "7")])
    m = tokenbucket.header_map(requests="a:rpm", tokens="a:tpm")
    assert h.plan(obs, m) == ({"a:rpm": 0, "a:tpm": 800}, 7)
    # no Retry-After: the reset of what is spent
    del_retry = h.parse(429, {"anthropic-ratelimit-requests-remaining": "0",
                              "anthropic-ratelimit-requests-reset": reset})
    assert h.plan(del_retry, m)[1] == pytest.approx(12, abs=1)
    assert h.parse(429, {"retry-after-ms": "1500", "Retry-After": "9"}).retry_after == 1.5
    assert h.plan(h.parse(429, {}), m) == ({}, h.DEFAULT_PAUSE)


def test_ietf():
    obs = h.parse(200, {"RateLimit": '"burst";r=5;t=2, "day";r=900;t=3600',
                        "RateLimit-Policy": '"burst";q=10;w=1, "day";q=1000;w=86400'})
    assert obs.remaining == {'ratelimit;"burst"': 5, 'ratelimit;"day"': 900, "ratelimit": 5}
    assert obs.resets["ratelimit"] == 2
    old = h.parse(200, {"RateLimit": "limit=100, remaining=50, reset=30"})
    assert old.remaining == {"ratelimit": 50} and old.resets == {"ratelimit": 30}
    sep = h.parse(200, {"RateLimit-Remaining": "3", "RateLimit-Reset": "4"})
    assert sep.remaining == {"ratelimit-remaining": 3}
    m = tokenbucket.header_map(ratelimit="api")
    m['ratelimit;"day"'] = "api:day"                     # the mapping is a plain dict
    assert h.plan(obs, m)[0] == {"api": 5, "api:day": 900}


def test_observe_syncs_and_pauses(admin, name):
    rpm, tpm = name + "rpm", name + "tpm"
    # refilling over a day, so that the checks below are not races with
    # the refill (a minute's refill is 1,500 tokens a second)
    make_bucket(admin, rpm, 60, 60, 86400)
    make_bucket(admin, tpm, 90000, 90000, 86400)
    lim = tokenbucket.Limiter(conninfo(), headers=tokenbucket.header_map(requests=rpm, tokens=tpm))
    with lim.reserve({rpm: 1, tpm: 1000}) as r:
        obs = r.observe(200, {"x-ratelimit-remaining-requests": "10",
                              "x-ratelimit-remaining-tokens": "41000"})
    assert obs.synced == pytest.approx({rpm: 10, tpm: 41000}, abs=0.5)
    assert abs(tokens(admin, tpm) - 41000) < 50 and abs(tokens(admin, rpm) - 10) < 0.5
    # a higher count never raises a bucket
    lim.observe(200, {"x-ratelimit-remaining-tokens": "80000"})
    assert tokens(admin, tpm) < 42000
    # a 429 pauses every bucket of the reservation for the provider's wait
    with lim.reserve({rpm: 1, tpm: 10}) as r:
        obs = r.observe(429, {"Retry-After": "20"})
        r.refund()
    assert obs.paused == {rpm: 20, tpm: 20}
    d = lim.peek({rpm: 1, tpm: 1})
    assert not d.granted and 10 < d.retry_after <= 20.01
    lim.close()
