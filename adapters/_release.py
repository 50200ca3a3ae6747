"""Releasing a client's resources so that a cancellation cannot cut the release halfway.

A client library's ``aclose()`` closes its connections one at a time; cancelled between
two, it leaves the rest open, and nothing closes them later (the storage is marked closed,
so a second ``aclose()`` returns at once). The conformance suite's
``test_aclose_cancelled_at_any_wait_still_releases_everything`` found it in the Redis
adapter (an unclosed connection, an unclosed cluster node).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["unbroken"]

T = TypeVar("T")


async def unbroken(work: Awaitable[T]) -> T:
    """Await ``work`` to its end even if the caller is cancelled meanwhile, then raise the
    cancellation.

    For a release only (closing connections on a local socket takes a few loop
    iterations): the caller waits for it however often it is cancelled.

    Raises:
        asyncio.CancelledError: the caller was cancelled while ``work`` ran (raised once
            ``work`` has ended, with ``work``'s error as its cause if it failed), or
            ``work`` itself was cancelled.
        Exception: whatever ``work`` raised, when the caller was not cancelled.
    """
    task = asyncio.ensure_future(work)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                raise  # the work itself was cancelled, not the caller
            cancelled = True
        except Exception as exc:
            if cancelled:  # the caller's cancellation wins; the failure is its cause
                raise asyncio.CancelledError from exc
            raise
        else:
            break
    if cancelled:
        raise asyncio.CancelledError
    return result
