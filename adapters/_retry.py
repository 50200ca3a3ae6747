"""Retrying one HTTP request: a deadline, backoff with jitter, errors translated.

The S3 and Azure adapters turn their SDK's retries off and retry here instead,
so that one policy holds for every request: a transient failure (as the
adapter judges it) is retried after an exponential backoff with full jitter,
at most ``retries`` times, and no retry starts after the request's deadline
(``timeout``, plus one second per MiB of body). A write runs each attempt
through `settle`, so that a cancelled
write settles within its grace, or is reset.

Writes whose outcome is unknown. An attempt of a write that fails after its
request may have left the client (it was handed a connection) without a
definite answer (a timeout, a lost connection, a 500) is indeterminate: the
adapter's translation raises `OutcomeUnknown`.
Retrying an if-match write is safe for the data (every write gets a new version,
so the condition holds for one attempt at most), but it makes the *answer* of a
later attempt ambiguous: a
412 or 409 (create-only: "the key exists"; if-match: "another version"), or a
404 of a delete, may be the echo of the earlier attempt that did land. So once
an attempt of a call was indeterminate, whatever a later attempt raises is
raised as ``OutcomeUnknown``, chained from that later error (the adapters first
look for their own write by its token, and answer success when they find it);
never a ``PreconditionFailed`` or ``NotFound`` that may be false. The same
holds when the retries run out on a plain ``StorageUnavailable``: the earlier
attempt may still have landed.

Any other write (an overwrite, a create-only put, a delete without if-match) is
not repeated at all after an indeterminate attempt (``repeatable=False``): a
repeat could take effect a second time, after another client's write, and undo
it, or, for a create-only put, after another client deleted what the first
attempt created (the linearizability group caught both on S3: a value came back
after its delete). It raises ``OutcomeUnknown`` at once; a caller who wants to
repeat it decides (``checkpointkit.reconcile``).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from ..errors import OutcomeUnknown, StorageClosed, StorageUnavailable
from ._inflight import Attempt, CallsUnderWay, recording, settle
from ._options import Options

__all__ = ["RetryPolicy", "call"]

T = TypeVar("T")

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """The timeouts and retries of one storage's requests.

    Attributes:
        timeout: the deadline, in seconds, of one request including its retries.
        connect_timeout: the deadline of one TCP connect.
        read_timeout: the longest silence while waiting for or reading a reply.
        retries: how many times a request is retried after a transient failure.
        backoff: the first backoff in seconds, doubled on each retry.
        backoff_max: the longest backoff.
    """

    timeout: float
    connect_timeout: float
    read_timeout: float
    retries: int
    backoff: float
    backoff_max: float

    @classmethod
    def checked(
        cls,
        options: Options,
        *,
        timeout: Any,
        connect_timeout: Any,
        read_timeout: Any,
        retries: Any,
        retry_backoff: Any,
        retry_backoff_max: Any,
    ) -> RetryPolicy:
        """The policy of these constructor options (``connect_timeout`` defaults to
        ``min(timeout, 5)``, ``read_timeout`` to ``timeout``).

        Raises:
            ConfigurationError: an option is out of range (checked in the order above).
        """
        total = options.check_float("timeout", timeout)
        return cls(
            timeout=total,
            connect_timeout=(
                min(total, 5.0)
                if connect_timeout is None
                else options.check_float("connect_timeout", connect_timeout)
            ),
            read_timeout=(
                total if read_timeout is None else options.check_float("read_timeout", read_timeout)
            ),
            retries=options.check_int("retries", retries, 0),
            backoff=options.check_float("retry_backoff", retry_backoff, zero=True),
            backoff_max=options.check_float("retry_backoff_max", retry_backoff_max, zero=True),
        )


Translate = Callable[[Callable[[], bool] | None], AbstractContextManager[None]]
"""Makes the context manager that translates one attempt's errors. Its argument is
None for a read, and for a write a function telling whether the attempt's request
may have left the client (`sent`)."""


async def call(
    request: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    translate: Translate,
    is_transient: Callable[[BaseException | None], bool],
    *,
    size: int = 0,
    write: bool = False,
    grace: float = 0.0,
    adopt: Callable[[asyncio.Task[Any]], None] | None = None,
    history: list[Exception] | None = None,
    repeatable: bool = True,
    closed: Callable[[], bool] | None = None,
    under_way: CallsUnderWay | None = None,
) -> T:
    """Run ``request`` with retries and backoff for transient failures, errors translated.

    Args:
        request: makes one attempt (a fresh awaitable each time).
        policy: the deadline and retries.
        translate: makes a fresh context manager per attempt that turns the
            SDK's errors into checkpointkit errors, the SDK's error as the
            cause (see `Translate`).
        is_transient: whether a retry may succeed after the cause of a
            `StorageUnavailable`.
        size: the request body's size: one more second of deadline per MiB.
        write: run each attempt through
            `settle` with ``grace`` and
            ``adopt`` (a write cancelled on the wire settles before the
            cancellation propagates).
        grace: see ``write``.
        adopt: see ``write`` (required with it).
        history: receives each failed attempt's translated error, so that a
            caller can tell that a successful answer came after an attempt
            whose outcome is unknown (a batch delete's 404s, say).
        repeatable: False for an unconditional write: after an attempt whose
            outcome is unknown it is not repeated (see the module documentation).
        closed: whether the storage was closed meanwhile: then no further attempt
            is made (its client may be gone), and the call ends with
            ``StorageClosed`` (or ``OutcomeUnknown`` for a write that may have landed).
        under_way: counts the call as under way until it ends or its deadline has
            passed (what the storage's ``aclose()`` waits for).

    Raises:
        OutcomeUnknown: a write's attempt failed after its request may have
            left, and no later attempt succeeded (whatever that later attempt
            raised is chained, see the module documentation).
        StorageUnavailable: the last attempt's, naming the number of attempts
            when there were several.
        Exception: whatever ``translate`` raises otherwise (not retried).
        asyncio.CancelledError: the caller was cancelled.
    """
    assert adopt is not None or not write
    loop = asyncio.get_running_loop()
    deadline = loop.time() + policy.timeout + size / MiB
    with nullcontext() if under_way is None else under_way.call(deadline):
        attempt = 0
        unknown: OutcomeUnknown | None = None  # an earlier attempt that may have landed
        while True:
            record = Attempt()
            try:
                with translate(record.sent if write else None):
                    if write and adopt is not None:
                        return await settle(
                            partial(_attempt, request, deadline, record), grace, adopt, record
                        )
                    return await _attempt(request, deadline, record)
            except StorageUnavailable as exc:
                if history is not None:
                    history.append(exc)
                cause = exc.__cause__
                delay = min(policy.backoff_max, policy.backoff * 2**attempt) * random.random()
                if (
                    attempt >= policy.retries
                    or not is_transient(cause)
                    or loop.time() + delay >= deadline
                    or (isinstance(exc, OutcomeUnknown) and not repeatable)
                ):
                    if unknown is not None and not isinstance(exc, OutcomeUnknown):
                        raise _still_unknown(unknown, exc, attempt) from exc
                    if attempt:
                        raise type(exc)(f"{exc} (after {attempt + 1} attempts)") from cause
                    raise
                if isinstance(exc, OutcomeUnknown):
                    unknown = exc
                last: StorageUnavailable = exc
            except Exception as exc:
                if unknown is not None:
                    raise _still_unknown(unknown, exc, attempt) from exc
                raise
            attempt += 1
            await asyncio.sleep(delay)
            if closed is not None and closed():
                if unknown is not None:
                    raise _still_unknown(unknown, last, attempt) from last
                raise StorageClosed(
                    f"the storage was closed while the call was retried ({last})"
                ) from last


def _still_unknown(unknown: OutcomeUnknown, later: Exception, attempt: int) -> OutcomeUnknown:
    """The error of a write whose earlier attempt was indeterminate and a later one failed."""
    return OutcomeUnknown(
        f"{unknown}; retried, attempt {attempt + 1} then failed ({later}), "
        "which may be the echo of the earlier attempt"
    )


async def _attempt(request: Callable[[], Awaitable[T]], deadline: float, record: Attempt) -> T:
    """One attempt of a request, bounded by the request's deadline; the connections it
    still holds when it fails, times out or is cancelled are closed (`recording`)."""
    with recording(record):
        async with asyncio.timeout_at(deadline):
            return await request()
