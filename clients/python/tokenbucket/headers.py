"""A provider's rate-limit headers, read into numbers, and applied to buckets.

parse(status, headers) reads what a response says: the requests and tokens
remaining (OpenAI's x-ratelimit-remaining-*, Anthropic's
anthropic-ratelimit-*-remaining, the IETF RateLimit fields), when each
resets ("6m0s", "20ms", RFC 3339 moments, seconds), and how long to stay
away (Retry-After in seconds or as an HTTP date, retry-after-ms).

Which header feeds which bucket is one dict, header name -> bucket name;
header_map(requests="openai:rpm", tokens="openai:tpm") builds it from ROLES,
and it can be edited like any dict.  The IETF RateLimit field is named
"ratelimit" there (any policy: the least remaining), or 'ratelimit;"name"'
for one policy.
"""
from __future__ import annotations

import email.utils
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

# role -> the headers that report what remains of it (lower case)
ROLES: dict[str, list[str]] = {
    "requests": ["x-ratelimit-remaining-requests", "anthropic-ratelimit-requests-remaining"],
    "tokens": ["x-ratelimit-remaining-tokens", "anthropic-ratelimit-tokens-remaining"],
    "input_tokens": ["anthropic-ratelimit-input-tokens-remaining"],
    "output_tokens": ["anthropic-ratelimit-output-tokens-remaining"],
    "ratelimit": ["ratelimit", "ratelimit-remaining", "x-ratelimit-remaining"],
}

# a reset header -> the remaining header it goes with
RESET_OF: dict[str, str] = {
    "x-ratelimit-reset-requests": "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-tokens": "x-ratelimit-remaining-tokens",
    "anthropic-ratelimit-requests-reset": "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-tokens-reset": "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-input-tokens-reset": "anthropic-ratelimit-input-tokens-remaining",
    "anthropic-ratelimit-output-tokens-reset": "anthropic-ratelimit-output-tokens-remaining",
    "ratelimit-reset": "ratelimit-remaining",
    "x-ratelimit-reset": "x-ratelimit-remaining",
}

# how long a 429 that says nothing of when to come back pauses the buckets
DEFAULT_PAUSE = 1.0


def header_map(**roles: str) -> dict[str, str]:
    """{header: bucket} for each role given (requests=, tokens=,
    input_tokens=, output_tokens=, ratelimit=), from ROLES."""
    out: dict[str, str] = {}
    for role, bucket in roles.items():
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; known: {', '.join(ROLES)}")
        for header in ROLES[role]:
            out[header] = bucket
    return out


_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_GO_DURATION = re.compile(r"(?:(\d+(?:\.\d*)?)(h|ms|m|s|us|µs|ns))")


def parse_duration(value: str, now: float | None = None) -> float | None:
    """Seconds from "6m0s", "20ms", "1.5", an RFC 3339 moment or an HTTP
    date (the last two counted from now); None when it is none of these."""
    text = value.strip()
    if not text:
        return None
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    parts = _GO_DURATION.findall(text)
    if parts and "".join(n + u for n, u in parts) == text:
        return sum(float(n) * _UNIT[u] for n, u in parts)
    moment: datetime | None = None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        try:
            moment = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return max(0.0, moment.timestamp() - (time.time() if now is None else now))


@dataclass
class Observation:
    """What one response said.  remaining and resets are keyed by header name
    (the IETF field: "ratelimit", and 'ratelimit;"policy"' per policy);
    retry_after: seconds, or None when the response gave none."""
    status: int
    remaining: dict[str, float] = field(default_factory=dict)
    resets: dict[str, float] = field(default_factory=dict)
    retry_after: float | None = None
    synced: dict[str, float] = field(default_factory=dict)
    paused: dict[str, float] = field(default_factory=dict)

    @property
    def refused(self) -> bool:
        return self.status == 429


def _number(text: str) -> float | None:
    try:
        return float(text.strip().strip('"'))
    except ValueError:
        return None


def _split(field_value: str) -> list[str]:
    """Top-level members of a structured field (commas outside quotes)."""
    out: list[str] = []
    cur: list[str] = []
    quoted = False
    for ch in field_value:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur).strip())
    return [m for m in out if m]


def _ietf(value: str, obs: Observation) -> None:
    """RateLimit: '"policy";r=50;t=30, ...' (draft 8 on), or
    'limit=100, remaining=50, reset=30' (earlier drafts)."""
    least: float | None = None
    least_reset: float | None = None
    members = _split(value)
    pairs = dict(m.split("=", 1) for m in members if "=" in m and ";" not in m)
    if "remaining" in pairs:
        least = _number(pairs["remaining"])
        least_reset = _number(pairs.get("reset", ""))
    for member in members:
        if ";" not in member:
            continue
        name, *params = member.split(";")
        kv = dict(p.strip().split("=", 1) for p in params if "=" in p)
        r = _number(kv.get("r", ""))
        if r is None:
            continue
        t = _number(kv.get("t", ""))
        key = f"ratelimit;{name.strip()}"
        obs.remaining[key] = r
        if t is not None:
            obs.resets[key] = t
        if least is None or r < least:
            least, least_reset = r, t
    if least is not None:
        obs.remaining["ratelimit"] = least
        if least_reset is not None:
            obs.resets["ratelimit"] = least_reset


def parse(status: int, headers: Any) -> Observation:
    """Read a response's status and headers (any mapping, or a list of pairs)."""
    items: Iterable[tuple[Any, Any]] = headers.items() if hasattr(headers, "items") else headers
    h: dict[str, str] = {}
    for k, v in items:
        k = (k.decode() if isinstance(k, bytes) else str(k)).lower()
        v = v.decode() if isinstance(v, bytes) else str(v)
        h[k] = h[k] + ", " + v if k in h else v
    obs = Observation(int(status))
    now = time.time()
    for name, value in h.items():
        if name == "ratelimit":
            _ietf(value, obs)
        elif name in RESET_OF:
            seconds = parse_duration(value, now)
            if seconds is not None:
                obs.resets[RESET_OF[name]] = seconds
        elif name.endswith("remaining") or "-remaining-" in name:
            n = _number(value)
            if n is not None:
                obs.remaining[name] = n
    if "retry-after-ms" in h:
        ms = _number(h["retry-after-ms"])
        if ms is not None:
            obs.retry_after = max(0.0, ms / 1000)
    if obs.retry_after is None and "retry-after" in h:
        obs.retry_after = parse_duration(h["retry-after"], now)
    return obs


def plan(obs: Observation, mapping: Mapping[str, str],
         pause: list[str] | None = None) -> tuple[dict[str, float], float | None]:
    """What to do: {bucket: remaining} to tb_sync (the least any header mapped
    to it says), and on a 429 how long to pause (Retry-After; else the
    longest reset of a header that reports nothing left; else any reset; else
    DEFAULT_PAUSE)."""
    sync: dict[str, float] = {}
    for header, bucket in mapping.items():
        if header in obs.remaining:
            value = max(0.0, obs.remaining[header])
            sync[bucket] = min(sync.get(bucket, value), value)
    if obs.status != 429:
        return sync, None
    if obs.retry_after is not None:
        return sync, obs.retry_after
    spent = [obs.resets[k] for k, v in obs.remaining.items() if v < 1 and k in obs.resets]
    if spent:
        return sync, max(spent)
    if obs.resets:
        return sync, max(obs.resets.values())
    return sync, DEFAULT_PAUSE
