"""Exceptions: one class per SQLSTATE the extension raises, and the client's own.

Every exception the package raises is a TokenBucketError.  A server error
keeps what the server said: its SQLSTATE, message, detail and hint; the
driver's exception is chained as __cause__.
"""
from __future__ import annotations

from typing import Any


class TokenBucketError(Exception):
    """The base of every error the package raises."""

    sqlstate: str | None = None

    def __init__(self, message: str = "", *, sqlstate: str | None = None,
                 detail: str | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if sqlstate is not None:
            self.sqlstate = sqlstate
        self.detail = detail
        self.hint = hint

    def __str__(self) -> str:
        text = self.message
        if self.detail:
            text += f"\nDETAIL: {self.detail}"
        if self.hint:
            text += f"\nHINT: {self.hint}"
        return text


class DatabaseError(TokenBucketError):
    """A server error with a SQLSTATE no class below names."""


class UndefinedBucket(DatabaseError):
    """42704: no such bucket or limit, and no template makes it."""
    sqlstate = "42704"


class InvalidArgument(DatabaseError):
    """22023: a cost, reserve, name or setting the extension refuses
    (a cost above the bucket's capacity among them: it could never be granted)."""
    sqlstate = "22023"


class NullArgument(DatabaseError):
    """22004: a NULL where it would be silently wrong (extension 1.8)."""
    sqlstate = "22004"


class OutOfRange(DatabaseError):
    """22003: a settlement whose debt would not fit in a float8."""
    sqlstate = "22003"


class SharedMemoryFull(DatabaseError):
    """53200: no room left for a memory bucket or a memory lease."""
    sqlstate = "53200"


class TooManyNames(DatabaseError):
    """54000: more names in one call than the server allows, or a chain of
    parents deeper than it allows (extension 1.9)."""
    sqlstate = "54000"


class ParentCycle(DatabaseError):
    """42P19: the parents of a bucket form a cycle (tb_parents, extension 1.9)."""
    sqlstate = "42P19"


class NotSupported(DatabaseError):
    """0A000: e.g. a waiting call inside a REPEATABLE READ transaction."""
    sqlstate = "0A000"


class ReadOnly(DatabaseError):
    """25006: a call that takes or changes tokens on a standby (or in a
    read-only transaction): call the primary."""
    sqlstate = "25006"


class SerializationFailure(DatabaseError):
    """40001: a grant in REPEATABLE READ or SERIALIZABLE on a bucket changed
    since the snapshot: retry the transaction."""
    sqlstate = "40001"


class PrerequisiteMissing(DatabaseError):
    """55000: the library is not preloaded (memory buckets, tb_stats), or
    ALTER EXTENSION tokenbucket UPDATE has not run yet; the hint says which."""
    sqlstate = "55000"


class LockedByTransaction(DatabaseError):
    """55P03: the bucket is held by another session's open transaction
    (extension 1.8: its detail names the holder)."""
    sqlstate = "55P03"


class Canceled(DatabaseError):
    """57014: statement_timeout or pg_cancel_backend during a call."""
    sqlstate = "57014"


class AlreadyExists(DatabaseError):
    """23505: tb_create or tb_create_limit of a name that exists."""
    sqlstate = "23505"


class CheckViolation(DatabaseError):
    """23514: a bad configuration written into tb_buckets or tb_limits."""
    sqlstate = "23514"


class InsufficientPrivilege(DatabaseError):
    """42501: the role lacks a grant (see README, Privileges)."""
    sqlstate = "42501"


class ConnectionLost(TokenBucketError):
    """The connection to the server was lost and could not be replaced."""


class OutcomeUnknown(ConnectionLost):
    """The connection was lost during a call that changes tokens or slots:
    it may or may not have taken effect on the server.  Not retried, since
    a grant or a refund made twice would be wrong."""


class RateLimited(TokenBucketError):
    """Not granted within the timeout.  retry_after: seconds until the
    bucket (or buckets) could grant it, as the server last said (NaN for a
    slot of an in-flight limit: no one can say).  decision: the refusal
    (a Decision), or None for a slot refused; decision.denied_by names the
    bucket that refused: one called, or a parent charged with it (a team's
    budget above a user's), so that the user's message can say which
    budget is spent and when it renews (retry_after)."""

    def __init__(self, message: str, retry_after: float, decision: Any = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.decision = decision


class AlreadySettled(TokenBucketError, RuntimeError):
    """A reservation was settled (or refunded) a second time."""


class TransactionInProgress(TokenBucketError):
    """The connection given is inside a transaction: a grant made in it would
    hold the bucket's row until that transaction ends.  Commit first, or use
    limiter.on(conn) to take part in the transaction on purpose."""


class ForkedConnection(TokenBucketError):
    """A single connection given to a limiter cannot be used in a forked
    child: give a DSN or a pool, or make the limiter after the fork."""


CLASSES: dict[str, type[DatabaseError]] = {
    cls.sqlstate: cls for cls in (
        UndefinedBucket, InvalidArgument, NullArgument, OutOfRange, SharedMemoryFull,
        TooManyNames, NotSupported, ReadOnly, SerializationFailure, PrerequisiteMissing,
        LockedByTransaction, Canceled, AlreadyExists, CheckViolation, InsufficientPrivilege,
        ParentCycle)
    if cls.sqlstate is not None
}

# the connection is gone: class 08, and the server's own shutdown codes
_LOST_STATES = ("57P01", "57P02", "57P03")


def from_sqlstate(sqlstate: str, message: str = "", detail: str | None = None,
                  hint: str | None = None) -> DatabaseError:
    """The exception for a SQLSTATE (DatabaseError for one not listed)."""
    cls = CLASSES.get(sqlstate, DatabaseError)
    return cls(message, sqlstate=sqlstate, detail=detail, hint=hint)


def _fields(exc: BaseException) -> tuple[str | None, str, str | None, str | None]:
    """(sqlstate, message, detail, hint) of a psycopg, psycopg2 or asyncpg error."""
    sqlstate = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    diag = getattr(exc, "diag", None)
    if diag is not None:        # psycopg 3 and psycopg2
        message = diag.message_primary or str(exc).strip()
        return sqlstate, message, diag.message_detail, diag.message_hint
    message = getattr(exc, "message", None) or str(exc).strip()   # asyncpg
    return sqlstate, message, getattr(exc, "detail", None), getattr(exc, "hint", None)


def is_connection_error(exc: BaseException) -> bool:
    """Whether a driver's exception means the connection is gone."""
    sqlstate, _, _, _ = _fields(exc)
    if sqlstate:
        return sqlstate.startswith("08") or sqlstate in _LOST_STATES
    if isinstance(exc, (OSError, EOFError)):
        return True
    name = type(exc).__name__
    # psycopg's and psycopg2's OperationalError and InterfaceError without a
    # SQLSTATE, asyncpg's ConnectionDoesNotExistError and InterfaceError
    return name in ("OperationalError", "InterfaceError", "ConnectionDoesNotExistError",
                    "ConnectionFailureError")


def translate(exc: BaseException) -> TokenBucketError:
    """The package's exception for a driver's (a server error by SQLSTATE,
    ConnectionLost for a lost connection)."""
    if isinstance(exc, TokenBucketError):
        return exc
    sqlstate, message, detail, hint = _fields(exc)
    if is_connection_error(exc):
        return ConnectionLost(message or type(exc).__name__, sqlstate=sqlstate,
                              detail=detail, hint=hint)
    if sqlstate:
        return from_sqlstate(sqlstate, message, detail, hint)
    return TokenBucketError(message or type(exc).__name__, detail=detail, hint=hint)
