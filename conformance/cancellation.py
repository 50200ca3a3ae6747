"""Group ``cancellation``: a cancelled operation did all or nothing, promptly, and the
client stays healthy.

Three ways to cancel an operation in flight:

- a sweep over the adapter itself: start the operation, let the event loop run
  a few iterations (or a few milliseconds) and cancel, at many points, so that
  cancellation lands inside the adapter's own awaits;
- the fault-injecting wrapper (:mod:`~checkpointkit.conformance.faults`),
  usable around every adapter: the call stalls before or after the backend;
- for network adapters whose target accepts an ``endpoint``, the loopback
  stall proxy (:mod:`~checkpointkit.conformance.proxy`): the backend stops
  answering mid-request or mid-response.

After each cancellation the suite checks: ``CancelledError`` within
:data:`CANCEL_BOUND` seconds; the key holds the whole old or the whole new
value; the value does not change later (watched for a while); the next
operation on the same client gets its own answer.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

from ..storage import Storage
from .checks import ConformanceFailure, describe, expect_value, fail, get_or_none
from .faults import FaultyStorage
from .fixtures import StorageFixtures
from .proxy import StallProxy
from .target import Target

__all__ = ["CANCEL_BOUND", "CANCEL_POINTS", "CancellationTests"]

T = TypeVar("T")

CANCEL_BOUND = 2.0
"""Seconds within which a cancelled operation must raise CancelledError."""

CANCEL_POINTS: list[int | float] = [0, 1, 2, 3, 5, 8, 13, 21, 0.001, 0.003, 0.01, 0.03]
"""When the sweep cancels: ints are event-loop iterations, floats seconds."""

WATCH_SECONDS = 0.3
"""How long a cancelled key is watched for a late landing."""


async def _wait_point(point: int | float) -> None:
    if isinstance(point, int):
        for _ in range(point):
            await asyncio.sleep(0)
    else:
        await asyncio.sleep(point)


def _point_text(point: int | float) -> str:
    if isinstance(point, int):
        return f"{point} event-loop iteration{'s' if point != 1 else ''} after it started"
    return f"{point * 1000:g} ms after it started"


@dataclass
class _Outcome:
    """What one cancellation did."""

    point: int | float
    key: str
    took: bool  # cancel() found the operation still running
    ended_in: float | None  # seconds from cancel() to the end; None: did not end in the bound
    cancelled: bool  # it raised CancelledError
    result: Any = None  # what it returned or raised instead
    observed: bytes | None = None


async def _cancel(
    op: Callable[[], Awaitable[T]],
    point: int | float,
    key: str,
    *,
    started: asyncio.Event | None = None,
) -> _Outcome:
    """Start ``op``, cancel it at ``point`` (or once ``started`` is set), and see how it ends."""
    __tracebackhide__ = True
    task = asyncio.ensure_future(op())
    if started is not None:
        try:
            async with asyncio.timeout(10):
                await started.wait()
        except TimeoutError:
            task.cancel()
            await asyncio.wait({task}, timeout=CANCEL_BOUND)
            fail(
                "the stalled operation must reach the stall",
                key=key,
                expected="it to be held by the stall within 10 s",
                observed="nothing reached the stall (did the operation send anything?)",
            )
    else:
        await _wait_point(point)
    took = task.cancel()
    start = time.monotonic()
    await asyncio.wait({task}, timeout=CANCEL_BOUND)
    if not task.done():
        # Leave nothing behind: cancel again and give it one more bound.
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_BOUND)
        if not task.done():
            return _Outcome(point, key, took, None, False, "still running after two cancellations")
        if not task.cancelled():
            task.exception()  # retrieved, so that nothing logs "exception never retrieved"
        return _Outcome(point, key, took, None, task.cancelled())
    ended = time.monotonic() - start
    if task.cancelled():
        return _Outcome(point, key, took, ended, True)
    exc = task.exception()
    return _Outcome(point, key, took, ended, False, exc if exc is not None else task.result())


def _check_raised(outcomes: list[_Outcome], what: str) -> None:
    __tracebackhide__ = True
    for o in outcomes:
        if not o.took:
            continue
        if o.ended_in is None:
            fail(
                f"a cancelled {what} must raise CancelledError promptly",
                key=o.key,
                expected=f"it to end within {CANCEL_BOUND:g} s of task.cancel() "
                f"(cancelled {_point_text(o.point)})",
                observed="it was still running after that (the cancellation was ignored, "
                "or the backend wait is not cancellable)",
            )
        if not o.cancelled:
            fail(
                f"a cancelled {what} must raise CancelledError",
                key=o.key,
                expected=f"CancelledError (the {what} was cancelled {_point_text(o.point)})",
                observed=(
                    f"it returned {describe(o.result)}: the cancellation was swallowed"
                    if not isinstance(o.result, BaseException)
                    else f"it raised {describe(o.result)} instead: the cancellation was lost"
                ),
            )


async def _watch(
    storage: Storage, outcomes: list[_Outcome], *, seconds: float, interval: float, what: str
) -> None:
    """Poll every cancelled key for ``seconds``; fail at the first change."""
    __tracebackhide__ = True
    deadline = time.monotonic() + seconds
    rounds = 0
    while True:
        for o in outcomes:
            got = await get_or_none(storage, o.key)
            now = None if got is None else got.data
            if now != o.observed:
                fail(
                    f"a cancelled {what} must not land later",
                    key=o.key,
                    expected=f"it to keep holding {describe(o.observed)} "
                    "once the cancellation returned",
                    observed=f"it changed to {describe(now)} {rounds + 1} polling rounds later "
                    f"(cancelled {_point_text(o.point)})",
                )
        rounds += 1
        if time.monotonic() >= deadline:
            return
        await asyncio.sleep(interval)


class CancellationTests(StorageFixtures):
    """Cancelled puts and gets: prompt, whole or absent, never late, no stale replies."""

    conformance_group: ClassVar[str | None] = "cancellation"

    # -- the sweep over the adapter's own awaits ---------------------------------------------
    async def _sweep_puts(
        self, storage: Storage, size: int = 64 * 1024, *, check_whole: bool = True
    ) -> list[_Outcome]:
        __tracebackhide__ = True
        outcomes = []
        for i, point in enumerate(CANCEL_POINTS):
            key = f"cancel/{i:02d}"
            old, new = b"o" * size, bytes([97 + i % 26]) * size
            await storage.put(key, old)
            outcome = await _cancel(functools.partial(storage.put, key, new), point, key)
            got = await get_or_none(storage, key)
            outcome.observed = None if got is None else got.data
            if check_whole and outcome.observed not in (old, new):
                fail(
                    "a cancelled put must be whole or absent",
                    key=key,
                    expected=f"the whole old value {describe(old)} "
                    f"or the whole new value {describe(new)}",
                    observed=f"it holds {describe(outcome.observed, reference=[new, old])} "
                    f"(cancelled {_point_text(point)})",
                )
            if (
                check_whole
                and not outcome.cancelled
                and outcome.took
                and outcome.ended_in is not None
                and not isinstance(outcome.result, BaseException)
                and outcome.observed != new
            ):
                fail(
                    "a put that returned a version must have written",
                    key=key,
                    expected=f"the new value {describe(new)}",
                    observed=f"it holds {describe(outcome.observed)}",
                )
            outcomes.append(outcome)
        return outcomes

    async def test_cancelled_put_raises_cancelled_error_promptly(self, storage: Storage) -> None:
        _check_raised(await self._sweep_puts(storage, check_whole=False), "put")

    async def test_cancelled_put_is_whole_or_absent(self, storage: Storage) -> None:
        await self._sweep_puts(storage)  # checks each key right after its cancellation

    async def test_cancelled_put_does_not_land_later(self, storage: Storage, scale: float) -> None:
        outcomes = await self._sweep_puts(storage, size=1024, check_whole=False)
        await _watch(
            storage, outcomes, seconds=WATCH_SECONDS, interval=max(0.01, 0.02 / scale), what="put"
        )

    async def test_cancelled_delete_raises_promptly_and_is_whole_or_absent(
        self, storage: Storage
    ) -> None:
        outcomes = []
        for i, point in enumerate(CANCEL_POINTS):
            key = f"cdel/{i:02d}"
            await storage.put(key, b"still here")
            outcome = await _cancel(functools.partial(storage.delete, key), point, key)
            got = await get_or_none(storage, key)
            outcome.observed = None if got is None else got.data
            if outcome.observed not in (None, b"still here"):
                fail(
                    "a cancelled delete must be whole or absent",
                    key=key,
                    expected="the key to be deleted or to keep its value",
                    observed=f"it holds {describe(outcome.observed)}",
                )
            outcomes.append(outcome)
        _check_raised(outcomes, "delete")

    async def test_next_call_after_cancelled_get_gets_its_own_answer(
        self, storage: Storage
    ) -> None:
        for i, point in enumerate(CANCEL_POINTS):
            a, b = f"own/a{i:02d}", f"own/b{i:02d}"
            await storage.put(a, f"answer for {a}".encode())
            await storage.put(b, f"answer for {b}".encode())
            outcome = await _cancel(functools.partial(storage.get, a), point, a)
            detail = f"the get of {a!r} before it was cancelled {_point_text(point)}"
            await expect_value(
                storage,
                b,
                f"answer for {b}".encode(),
                promise="after a cancelled get, the next call must get its own answer",
                detail=detail,
            )
            await expect_value(
                storage,
                a,
                f"answer for {a}".encode(),
                promise="after a cancelled get, the client must stay healthy",
                detail=detail,
            )
            _check_raised([outcome], "get")

    async def test_next_call_after_cancelled_put_gets_its_own_answer(
        self, storage: Storage
    ) -> None:
        for i, point in enumerate(CANCEL_POINTS):
            a, b = f"own/a{i:02d}", f"own/b{i:02d}"
            await storage.put(b, f"answer for {b}".encode())
            await _cancel(functools.partial(storage.put, a, b"cancelled put"), point, a)
            detail = f"a put of {a!r} was cancelled {_point_text(point)}"
            await expect_value(
                storage,
                b,
                f"answer for {b}".encode(),
                promise="after a cancelled put, the next call must get its own answer",
                detail=detail,
            )
            version = await storage.put(b, b"after")
            await expect_value(
                storage,
                b,
                b"after",
                version=version,
                promise="after a cancelled put, the next put must get its own version",
                detail=detail,
            )

    # -- the fault-injecting wrapper --------------------------------------------------------------
    async def test_put_cancelled_while_backend_stalls_raises_promptly(
        self, storage: Storage, scale: float
    ) -> None:
        faulty = FaultyStorage(storage)
        await storage.put("stall", b"old")
        stall = faulty.stall("put", when="before")
        outcome = await _cancel(
            lambda: faulty.put("stall", b"new"), 0, "stall", started=stall.entered
        )
        _check_raised([outcome], "put (stalled before the backend call)")
        await expect_value(
            storage,
            "stall",
            b"old",
            promise="a put cancelled before reaching the backend must not have happened",
        )
        outcome.observed = b"old"
        await _watch(
            storage, [outcome], seconds=WATCH_SECONDS, interval=max(0.01, 0.02 / scale), what="put"
        )
        await _own_answer(faulty, "stall-next", "the stalled put was cancelled")

    async def test_put_cancelled_after_backend_answered_is_whole(
        self, storage: Storage, scale: float
    ) -> None:
        faulty = FaultyStorage(storage)
        await storage.put("stall", b"old")
        stall = faulty.stall("put", when="after")
        outcome = await _cancel(
            lambda: faulty.put("stall", b"new"), 0, "stall", started=stall.entered
        )
        _check_raised([outcome], "put (reply held after the backend call)")
        await expect_value(
            storage,
            "stall",
            b"new",
            promise="a put cancelled after the backend applied it must be whole",
        )
        outcome.observed = b"new"
        await _watch(
            storage, [outcome], seconds=WATCH_SECONDS, interval=max(0.01, 0.02 / scale), what="put"
        )
        await _own_answer(faulty, "stall-next", "the put's reply was held and then cancelled")

    # -- the stall proxy (network adapters) --------------------------------------------------------
    async def test_put_cancelled_mid_request_raises_promptly_and_client_recovers(
        self, target: Target, scale: float
    ) -> None:
        await _through_proxy(target, "request", scale)

    async def test_put_cancelled_mid_response_raises_promptly_and_client_recovers(
        self, target: Target, scale: float
    ) -> None:
        await _through_proxy(target, "response", scale)


async def _own_answer(storage: Storage, key: str, what: str) -> None:
    __tracebackhide__ = True
    await storage.put(key, f"answer for {key}".encode())
    await expect_value(
        storage,
        key,
        f"answer for {key}".encode(),
        promise="the next call must get its own answer",
        detail=f"after {what}",
    )


async def _bounded(aw: Awaitable[T], seconds: float, what: str, key: str) -> T:
    __tracebackhide__ = True
    try:
        async with asyncio.timeout(seconds):
            return await aw
    except TimeoutError:
        fail(
            "the client must recover once the backend answers again",
            key=key,
            expected=f"{what} to complete within {seconds:g} s after the proxy resumed forwarding",
            observed="it did not (the client is stuck on the connection of the cancelled call?)",
        )


async def _through_proxy(
    target: Target, direction: Literal["request", "response"], scale: float
) -> None:
    __tracebackhide__ = True
    if not target.proxyable:
        import pytest

        pytest.skip(
            "the target does not accept an endpoint (no stall proxy): give its factory an "
            "'endpoint' keyword and set Target.upstream"
        )
    assert target.upstream is not None
    async with StallProxy(target.upstream) as proxy, target.open(endpoint=proxy.address) as storage:
        key = f"proxy/{direction}"
        old, new = b"o" * 4096, b"n" * 4096
        await _bounded(storage.put(key, old), 10, "the first put", key)
        await _bounded(storage.put("proxy/other", b"other"), 10, "a put", "proxy/other")
        proxy.stall(direction, partial=True)
        outcome = await _cancel(lambda: storage.put(key, new), 0, key, started=proxy.stalled)
        proxy.resume()
        _check_raised([outcome], f"put (the backend stopped answering mid-{direction})")
        try:
            got_other = await _bounded(
                storage.get("proxy/other"), 10, "get('proxy/other')", "proxy/other"
            )
            other: object = got_other.data
        except ConformanceFailure:
            raise
        except Exception as exc:  # a stale reply often cannot even be parsed as this call's
            other = exc
        if other != b"other":
            fail(
                "after a cancelled call, the next call must get its own answer",
                key="proxy/other",
                expected=f"get to return {describe(b'other')}",
                observed=f"it returned {describe(other)} (a reply meant for the cancelled put?)",
                detail=f"the put of {key!r} was cancelled while the backend stalled "
                f"mid-{direction}",
            )
        got = await _bounded(get_or_none(storage, key), 10, f"get({key!r})", key)
        observed = None if got is None else got.data
        if observed not in (old, new):
            fail(
                "a cancelled put must be whole or absent",
                key=key,
                expected="the whole old or the whole new value",
                observed=f"it holds {describe(observed, reference=[new, old])} "
                f"(stalled mid-{direction})",
            )
        outcome.observed = observed
        await _bounded(
            _watch(
                storage,
                [outcome],
                seconds=WATCH_SECONDS,
                interval=max(0.02, 0.05 / scale),
                what=f"put (stalled mid-{direction})",
            ),
            10,
            "watching the key",
            key,
        )
        await _bounded(
            _own_answer(storage, "proxy/next", f"a put cancelled mid-{direction}"),
            10,
            "a put and get",
            "proxy/next",
        )
