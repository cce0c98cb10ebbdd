"""tokenbucket: a client for the tokenbucket PostgreSQL extension.

    limiter = tokenbucket.Limiter("postgresql:///app")
    with limiter.reserve({"openai:rpm": 1, "openai:tpm": 1500}, timeout=30) as r:
        response = call_the_provider()
        r.observe(response.status_code, response.headers)
        r.settle(used=response.json()["usage"]["total_tokens"])

Limiter is for threads and processes (psycopg 3 or psycopg2), AsyncLimiter
for asyncio (asyncpg or psycopg 3).  Integrations live in submodules:
tokenbucket.httpx, tokenbucket.aiohttp, tokenbucket.celery,
tokenbucket.middleware.
"""
from ._async import AsyncLimiter, AsyncReservation
from ._core import BucketDecision, Decision, Quota
from ._sync import Limiter, Reservation
from .errors import (AlreadyExists, AlreadySettled, Canceled, CheckViolation, ConnectionLost,
                     DatabaseError, ForkedConnection, InsufficientPrivilege, InvalidArgument,
                     LockedByTransaction, NotSupported, NullArgument, OutcomeUnknown,
                     OutOfRange, ParentCycle, PrerequisiteMissing, RateLimited, ReadOnly,
                     SerializationFailure, SharedMemoryFull, TokenBucketError, TooManyNames,
                     TransactionInProgress, UndefinedBucket)
from .headers import Observation, header_map

__version__ = "0.1.0"

__all__ = [
    "AlreadyExists", "AlreadySettled", "AsyncLimiter", "AsyncReservation", "BucketDecision",
    "Canceled", "CheckViolation", "ConnectionLost", "DatabaseError", "Decision",
    "ForkedConnection", "InsufficientPrivilege", "InvalidArgument", "Limiter",
    "LockedByTransaction", "NotSupported", "NullArgument", "Observation", "OutcomeUnknown",
    "OutOfRange", "ParentCycle", "PrerequisiteMissing", "Quota", "RateLimited", "ReadOnly",
    "Reservation",
    "SerializationFailure", "SharedMemoryFull", "TokenBucketError", "TooManyNames",
    "TransactionInProgress", "UndefinedBucket", "header_map",
]
