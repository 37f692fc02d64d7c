"""Retrying requests to remote storage: which failures are transient, and the backoff policy.

A dropped connection, a timeout, a 5xx answer or throttling is retried with exponential backoff
and jitter, each retry logged; a missing object or a permission error fails at once, naming the
URL. The policy is per process (:func:`set_retry_policy`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from ...errors import RemoteIOError, SourceNotFoundError

__all__ = ["RetryPolicy", "is_transient", "retrying", "set_retry_policy"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How transient failures of remote storage are retried.

    Args:
        attempts: tries per request in all (1 means no retry).
        initial_delay: seconds before the first retry; doubled for each further one.
        max_delay: cap on one delay. Each delay is jittered by up to a half of it.
    """

    attempts: int = 6
    initial_delay: float = 0.2
    max_delay: float = 8.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"{self.attempts=} must be at least 1")
        if not 0 <= self.initial_delay <= self.max_delay:
            raise ValueError(
                f"need 0 <= initial_delay <= max_delay, got {self.initial_delay}, {self.max_delay}"
            )

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (from 1)."""
        base = min(self.max_delay, self.initial_delay * 2 ** (retry - 1))
        return float(base * (0.5 + random.random() / 2))


_policy = RetryPolicy()


def set_retry_policy(policy: RetryPolicy) -> RetryPolicy:
    """Sets how remote reads are retried in this process; returns the previous policy."""
    global _policy
    previous, _policy = _policy, policy
    return previous


# Errors that say the request itself is wrong: retrying cannot help.
_PERMANENT = (
    FileNotFoundError,
    PermissionError,
    IsADirectoryError,
    NotADirectoryError,
    ValueError,
    TypeError,
)
_TRANSIENT_ERRNOS = {
    errno.EIO,
    errno.EBUSY,
    errno.EAGAIN,
    errno.ECONNRESET,
    errno.ECONNABORTED,
    errno.ECONNREFUSED,
    errno.EPIPE,
    errno.ETIMEDOUT,
    getattr(errno, "EREMOTEIO", 121),
}
# Transport errors of aiohttp, botocore, requests and http.client, matched by name so that none
# of them is imported here.
_TRANSIENT_NAMES = {
    "ClientConnectionError",
    "ClientOSError",
    "ClientPayloadError",
    "ServerDisconnectedError",
    "ServerTimeoutError",
    "EndpointConnectionError",
    "ConnectionClosedError",
    "ReadTimeoutError",
    "ConnectTimeoutError",
    "ResponseStreamingError",
    "IncompleteReadError",
    "IncompleteRead",
    "RemoteDisconnected",
    "ChunkedEncodingError",
    "ProtocolError",
}
_TRANSIENT_WORDS = (
    "SlowDown",
    "Throttl",
    "TooManyRequests",
    "ServiceUnavailable",
    "InternalError",
    "RequestTimeout",
)


def _status(error: BaseException) -> int | None:
    for name in ("status", "code", "status_code"):
        value = getattr(error, name, None)
        if isinstance(value, int) and 100 <= value < 600:
            return value
    return None


def is_transient(error: BaseException) -> bool:
    """Whether a failed request is worth retrying: a dropped connection, a timeout, a 5xx
    answer or throttling (429, SlowDown), here or anywhere in the error's chain of causes."""
    if isinstance(error, _PERMANENT) and not isinstance(error, ConnectionError):
        return False
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        status = _status(current)
        if status is not None:
            return status >= 500 or status in (408, 429)
        if isinstance(current, ConnectionError | TimeoutError | asyncio.TimeoutError | EOFError):
            return True
        if any(cls.__name__ in _TRANSIENT_NAMES for cls in type(current).__mro__):
            return True
        if isinstance(current, OSError) and current.errno in _TRANSIENT_ERRNOS:
            return True
        if any(word in str(current) for word in _TRANSIENT_WORDS):
            return True
        current = current.__cause__ or current.__context__
    return False


def retrying(call: Callable[[], T], url: str, what: str, policy: RetryPolicy | None = None) -> T:
    """Runs ``call``, retrying transient failures with backoff; each retry is logged.

    Raises:
        SourceNotFoundError: the object does not exist (at once, no retry).
        RemoteIOError: a permission error (at once), or a transient failure that outlasted
            every attempt; the message names the URL, what was being done and the attempts.
    """
    policy = policy or _policy
    for attempt in range(1, policy.attempts + 1):
        try:
            return call()
        except SourceNotFoundError:
            raise
        except FileNotFoundError as error:
            raise SourceNotFoundError(f"no such object: {url!r} ({what}): {error}") from error
        except Exception as error:
            if not is_transient(error):
                raise RemoteIOError(f"{what} of {url!r} failed: {type(error).__name__}: {error}") from error
            if attempt == policy.attempts:
                raise RemoteIOError(
                    f"{what} of {url!r} failed after {attempt} attempts: {type(error).__name__}: {error}"
                ) from error
            pause = policy.delay(attempt)
            logger.warning(
                "retry %d/%d of %s of %r in %.2fs after %s: %s",
                attempt,
                policy.attempts - 1,
                what,
                url,
                pause,
                type(error).__name__,
                error,
            )
            time.sleep(pause)
    raise AssertionError("unreachable")
