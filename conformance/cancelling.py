"""How the suite cancels an operation in flight and judges how it ended.

`cancel` starts an operation (or takes one already running), cancels it
at a point (event-loop iterations, seconds, or once an event says the
operation is held) and records an `Outcome`: whether the cancellation
found it running, how long it took to end, whether it raised
``CancelledError``. `check_raised` fails a test on an outcome that breaks
the promise (not prompt, swallowed, lost); `own_answer` checks that the
next call on the client gets its own answer. The ``cancellation`` group
(`cancellation`) and the held-backend tests
(`held`) share them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from ..storage import Storage
from .checks import describe, expect_value, fail, get_or_none
from .settings import DEFAULT_CANCEL_BOUND
from .timing import pending

__all__ = [
    "Outcome",
    "aclose_within",
    "cancel",
    "check_raised",
    "expect_listed_iff_readable",
    "observe",
    "own_answer",
    "patience",
    "point_text",
]

T = TypeVar("T")


def patience(bound: float) -> float:
    """How long a late cancellation is waited for, to measure its delay."""
    return max(6 * bound, 3.0)


async def wait_point(point: int | float) -> None:
    if isinstance(point, int):
        for _ in range(point):
            await asyncio.sleep(0)
    else:
        await asyncio.sleep(point)


def point_text(point: int | float | str) -> str:
    if isinstance(point, str):
        return point
    if isinstance(point, int):
        return f"cancelled {point} event-loop iteration{'s' if point != 1 else ''} after it started"
    return f"cancelled {point * 1000:g} ms after it started"


@dataclass
class Outcome:
    """What one cancellation did."""

    point: int | float | str
    key: str
    took: bool  # cancel() found the operation still running
    ended_in: float | None  # seconds from cancel() to the end; None: did not end at all
    cancelled: bool  # it raised CancelledError
    result: Any = None  # what it returned or raised instead
    observed: bytes | None = None
    ended_at: float = 0.0  # time.monotonic() when it ended (or when the wait gave up)


async def cancel(
    op: Callable[[], Awaitable[T]],
    point: int | float | str,
    key: str,
    *,
    bound: float = DEFAULT_CANCEL_BOUND,
    started: asyncio.Event | None = None,
    task: asyncio.Future[T] | None = None,
) -> Outcome:
    """Start ``op`` (or take ``task``), cancel it at ``point`` (or once ``started`` is set),
    and see how it ends."""
    __tracebackhide__ = True
    if task is None:
        task = asyncio.ensure_future(op())
    if started is not None:
        # Awaited directly, so that the cancellation lands the moment the stall holds the
        # call (a wait on several futures would let the call run a few iterations more).
        try:
            async with asyncio.timeout(10):
                await started.wait()
        except TimeoutError:
            task.cancel()
            await asyncio.wait({task}, timeout=patience(bound))
            if task.done() and not task.cancelled():
                task.exception()
            fail(
                "the stalled operation must reach the stall",
                key=key,
                expected="it to be held by the stall within 10 s",
                observed="it ended before reaching it"
                if task.done()
                else "nothing reached the stall (did the operation send anything?)",
            )
    elif isinstance(point, int | float):
        await wait_point(point)
    took = task.cancel()
    start = time.monotonic()
    await asyncio.wait({task}, timeout=patience(bound))
    if not task.done():
        # Leave nothing behind: cancel again and give it one more wait.
        task.cancel()
        await asyncio.wait({task}, timeout=patience(bound))
        if not task.done():
            return Outcome(
                point,
                key,
                took,
                None,
                False,
                "still running after two cancellations",
                ended_at=time.monotonic(),
            )
        if not task.cancelled():
            task.exception()  # retrieved, so that nothing logs "exception never retrieved"
        return Outcome(point, key, took, None, task.cancelled(), ended_at=time.monotonic())
    end = time.monotonic()
    ended = end - start
    if task.cancelled():
        return Outcome(point, key, took, ended, True, ended_at=end)
    exc = task.exception()
    return Outcome(
        point, key, took, ended, False, exc if exc is not None else task.result(), ended_at=end
    )


def check_raised(outcomes: list[Outcome], what: str, bound: float = DEFAULT_CANCEL_BOUND) -> None:
    __tracebackhide__ = True
    for o in outcomes:
        if not o.took:
            continue
        if o.ended_in is None:
            fail(
                f"a cancelled {what} must raise CancelledError promptly",
                key=o.key,
                expected=f"it to end within {bound:g} s of task.cancel() ({point_text(o.point)})",
                observed=f"it was still running {2 * patience(bound):g} s later, after a second "
                "cancellation (the cancellation was ignored, or the backend wait is not "
                "cancellable)",
                detail="To fix it, make every wait of the operation cancellable; a write that "
                "must not land later can be aborted (a flag checked before its commit) "
                "rather than waited for",
            )
        if o.cancelled and o.ended_in > bound:
            fail(
                f"a cancelled {what} must raise CancelledError promptly",
                key=o.key,
                expected=f"it to end within {bound:g} s of task.cancel() ({point_text(o.point)})",
                observed=f"it took {o.ended_in:.3f} s to raise CancelledError",
                detail="To fix it, abort the backend call on cancellation (close the "
                "connection, set a flag the worker checks before its commit, interrupt the "
                "statement) instead of waiting for it to finish; or raise the bound with "
                "--checkpointkit-cancel-bound if the backend cannot do better",
            )
        if not o.cancelled:
            fail(
                f"a cancelled {what} must raise CancelledError",
                key=o.key,
                expected=f"CancelledError (the {what} was {point_text(o.point)})",
                observed=(
                    f"it returned {describe(o.result)}: the cancellation was swallowed"
                    if not isinstance(o.result, BaseException)
                    else f"it raised {describe(o.result)} instead: the cancellation was lost"
                ),
            )


async def observe(observer: Storage, key: str) -> bytes | None:
    got = await get_or_none(observer, key)
    return None if got is None else got.data


async def expect_listed_iff_readable(observer: Storage, key: str, what: str) -> None:
    """After a cancelled write of ``key`` (``what`` says which, and when): a listing of
    ``key`` yields it if and only if a get finds it. Read as a get, a listing and a get
    again; a key that changed between the two gets (a write of unknown outcome landing)
    is not judged."""
    __tracebackhide__ = True
    before = await observe(observer, key)
    listed = key in [k async for k in observer.list(key)]
    if await observe(observer, key) != before or listed == (before is not None):
        return
    fail(
        "a cancelled write must leave its key listed if and only if it can be read",
        key=key,
        expected="a listing of the key to yield it, as a get finds it"
        if before is not None
        else "no listing to yield it, as no get finds it",
        observed=(
            f"a get finds {describe(before)} but a listing of {key!r} does not yield it"
            if before is not None
            else f"a get finds nothing but a listing of {key!r} yields it"
        )
        + f" (after {what})",
        detail="To fix it, write a key's item and its listing index in one request or "
        "transaction, or update the index row in place; an index row deleted and inserted "
        "again in two requests is lost when the write is cancelled between them",
    )


NEXT_CALLS_LIMIT: Final = 15.0
"""Seconds the calls after a cancelled one may take in all before the suite fails them as
hung: they take milliseconds on a healthy storage."""


@asynccontextmanager
async def next_calls(key: str, after: str) -> AsyncIterator[None]:
    """The calls made inside, after a cancelled call (``after`` says which), must end within
    `NEXT_CALLS_LIMIT` seconds: a cancelled call that kept a lock or a connection (an
    ``acquire()`` with its ``release()`` not in a ``finally``) makes every later call wait
    for it forever."""
    __tracebackhide__ = True
    scope = asyncio.timeout(NEXT_CALLS_LIMIT)
    began = asyncio.get_running_loop().time()
    try:
        async with scope:
            yield
    except TimeoutError:
        if not scope.expired():
            raise
        waiting = pending(began, scope.when() or 0.0)
        fail(
            "the calls after a cancelled call must return",
            key=key,
            expected=f"the next calls to return within {NEXT_CALLS_LIMIT:g} s",
            observed=f"they had not returned after {NEXT_CALLS_LIMIT:g} s ({after})"
            + (f": {'; '.join(waiting)}" if waiting else ""),
            detail="the cancelled call kept what the next ones wait for: release a lock, "
            "give back a connection and end a transaction in a finally block (or async "
            "with), so that a CancelledError releases them too",
        )


async def own_answer(storage: Storage, key: str, what: str) -> None:
    __tracebackhide__ = True
    async with next_calls(key, what):
        await storage.put(key, f"answer for {key}".encode())
        await expect_value(
            storage,
            key,
            f"answer for {key}".encode(),
            promise="the next call must get its own answer",
            detail=f"after {what}",
        )


async def aclose_within(storage: Storage, bound: float, key: str, context: str) -> None:
    """``storage.aclose()`` must return within ``bound`` seconds, without raising, while its
    backend does not answer (``context`` says how): it has nothing to ask the backend."""
    __tracebackhide__ = True
    scope = asyncio.timeout(bound)
    try:
        async with scope:
            await storage.aclose()
        return
    except TimeoutError as exc:
        if scope.expired():
            fail(
                "aclose() must return promptly while the backend does not answer",
                key=key,
                expected=f"aclose() to return within {bound:g} s",
                observed=f"it had not returned after {bound:g} s ({context})",
                detail="aclose() has nothing to ask the backend: close the sockets, sessions "
                "and files without waiting for an answer (a goodbye to the server, a QUIT "
                "awaited, waits as long as the server does not answer)",
            )
        error: Exception = exc
    except Exception as exc:
        error = exc
    fail(
        "aclose() must return without raising while the backend does not answer",
        key=key,
        expected="aclose() to release everything and return",
        observed=f"it raised {type(error).__module__}.{describe(error)} ({context})",
        detail="a goodbye to the server (a QUIT awaited, a final flush, a graceful close "
        "bounded by a timeout) fails when the server is gone or stopped, and its caller (the "
        "end of an async with, a shutdown hook) gets an error it can do nothing with: close "
        "without asking the backend, and release in a finally: block",
    )
