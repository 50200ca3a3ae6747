"""Group ``hygiene``: the hygiene checker works, and the storage leaves nothing behind.

Hygiene is checked around every test of the suite (an autouse fixture). This
group proves the checker itself, one rule per test, with a deliberately leaky
action, and then checks a storage's whole life (open, every operation, a
cancelled call, close) explicitly.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
from typing import ClassVar

import pytest

from ..storage import Storage
from . import descriptors
from .checks import fail
from .clauses import checks
from .fixtures import StorageFixtures
from .hygiene import HygieneReport, hygiene
from .target import Target

__all__ = ["ACLOSE_WAITS", "RELEASE_LAG", "HygieneTests"]

ACLOSE_WAITS = 22
"""The most moments at which a cancellation of ``aclose()`` is tried, one storage each."""

RELEASE_LAG = 0.1
"""Seconds within which what a storage held is released once its ``aclose()`` returned (an
asyncio transport closes its socket one loop iteration after ``close()``)."""

ACLOSE_YIELDS = 12
"""The first moments are after 1 to 12 yields to the event loop; the later ones add a pause
of 1 ms, doubling each time (to 0.5 s)."""


def _expect_finding(report: HygieneReport, needle: str, rule: str) -> None:
    __tracebackhide__ = True
    if not any(needle in finding for finding in report.findings):
        fail(
            f"the hygiene checker must catch {rule}",
            expected=f"a finding mentioning {needle!r}",
            observed=f"it found {report.findings or 'nothing'}",
        )


class _Unraisable:
    def __del__(self) -> None:
        raise RuntimeError("raised in __del__ on purpose")


class HygieneTests(StorageFixtures):
    """The checker catches each kind of leak; the storage leaks none."""

    conformance_group: ClassVar[str | None] = "hygiene"

    @checks("hygiene.never-awaited")
    async def test_hygiene_catches_never_awaited_coroutine(self, storage: Storage) -> None:
        async with hygiene(check=False) as report:
            storage.get("never")  # type: ignore[unused-coroutine]  # dropped on purpose
            gc.collect()
        _expect_finding(report, "never awaited", "a coroutine that is never awaited")

    @checks("hygiene.no-task-left")
    async def test_hygiene_catches_task_left_pending(self, storage: Storage) -> None:
        blocker = asyncio.Event()
        async with hygiene(check=False) as report:
            task = asyncio.ensure_future(blocker.wait())
        _expect_finding(report, "pending task", "a task left pending")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    @checks("hygiene.no-task-left")
    async def test_hygiene_catches_cancelled_task_that_never_ends(self, storage: Storage) -> None:
        release = asyncio.Event()

        async def ignores_cancellation() -> None:
            while not release.is_set():
                try:
                    await release.wait()
                except asyncio.CancelledError:
                    pass  # swallowed on purpose: it never ends while cancelled

        async with hygiene(check=False, unwind_grace=0.05) as report:
            task = asyncio.ensure_future(ignores_cancellation())
            await asyncio.sleep(0)
            task.cancel()
        _expect_finding(report, "still unwinding", "a cancelled task that never ends")
        release.set()
        await asyncio.gather(task, return_exceptions=True)

    @checks("hygiene.no-task-left")
    async def test_hygiene_lets_a_cancelled_task_finish_unwinding(self, storage: Storage) -> None:
        """A cancelled write that settles before it raises (a storage that declares
        ``settles_cancelled_writes``), or a cleanup that a runner abandoned at its bound,
        is still pending when the block ends: it is no leak if it ends within the grace."""
        settled = asyncio.Event()

        async def settles_then_raises() -> None:
            try:
                await asyncio.get_running_loop().create_future()
            except asyncio.CancelledError:
                await settled.wait()
                raise

        async with hygiene(check=False) as report:
            task = asyncio.ensure_future(settles_then_raises())
            await asyncio.sleep(0)
            task.cancel()
            # settled only after the block's own settling turns: the grace is what waits
            asyncio.get_running_loop().call_later(0.05, settled.set)
        if report.findings or not task.cancelled():
            fail(
                "the hygiene checker must let a cancelled task end within its grace",
                expected="no finding, and the task cancelled by the block's end",
                observed=f"findings {report.findings}, task done: {task.done()}",
            )

    @checks("hygiene.no-task-left")
    async def test_hygiene_catches_task_destroyed_while_pending(self, storage: Storage) -> None:
        async def wait_forever() -> None:
            await asyncio.get_running_loop().create_future()

        async with hygiene(check=False) as report:
            task = asyncio.ensure_future(wait_forever())
            await asyncio.sleep(0)
            del task
            gc.collect()
        _expect_finding(report, "destroyed but it is pending", "a task destroyed while pending")

    @checks("hygiene.no-unraisable")
    async def test_hygiene_catches_unraisable_exception(self, storage: Storage) -> None:
        async with hygiene(check=False) as report:
            _Unraisable()
            gc.collect()
        _expect_finding(report, "unraisable exception", "an unraisable exception")

    @checks("hygiene.no-unraisable")
    async def test_hygiene_catches_resource_warning(self, storage: Storage) -> None:
        async with hygiene(check=False) as report:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            del sock  # never closed, on purpose
            gc.collect()
        _expect_finding(report, "ResourceWarning", "an unclosed socket (ResourceWarning)")

    @checks("hygiene.no-thread-left")
    async def test_hygiene_catches_thread_left_running(self, storage: Storage) -> None:
        stop = threading.Event()
        async with hygiene(check=False, thread_grace=0.01) as report:
            thread = threading.Thread(target=stop.wait, name="ckc-leaky-thread")
            thread.start()
        stop.set()
        await asyncio.to_thread(thread.join, 5)
        _expect_finding(report, "ckc-leaky-thread", "a thread left running")

    @checks(
        "close.releases",
        "cancel.nothing-left",
        "hygiene.no-task-left",
        "hygiene.no-thread-left",
        "hygiene.never-awaited",
        "hygiene.no-unraisable",
    )
    async def test_storage_leaves_nothing_behind_after_close(self, target: Target) -> None:
        async with hygiene(check=False) as report:
            await _exercise(target)
        if report.findings:
            fail(
                "a storage must leave nothing behind once aclose() returns",
                expected="no unclosed session, socket or file, no never-awaited coroutine, "
                "no pending task, no thread",
                observed="the hygiene check found: " + "; ".join(report.findings),
                detail="the storage was opened from the factory, used for put, get, list, "
                "delete and a cancelled put, then closed",
            )

    @checks("hygiene.descriptors", "close.releases")
    async def test_storage_closes_every_descriptor_on_aclose(self, target: Target) -> None:
        if not descriptors.available():
            pytest.skip("this system does not list open descriptors in /proc/self/fd")
        await _exercise(target)  # a warm-up: what the process opens once is not a leak
        before = descriptors.snapshot()
        await _exercise(target)
        found = await descriptors.wait_for_no_leak(before, foreign=target.foreign_descriptors)
        if found:
            fail(
                "a storage must close every socket and file it opened once aclose() returns",
                expected="as many open descriptors as before the storage was opened",
                observed="the process still has " + descriptors.describe_leak(found),
                detail="the storage was opened from the factory, used for put, get, list, "
                "delete and a cancelled put, then closed (after a first such use as a "
                "warm-up); a descriptor kept referenced (a module-level pool, a cache) never "
                "warns at garbage collection. To fix it, close every connection, session and "
                "file handle in aclose(), also the idle ones of a pool",
            )

    @checks("close.releases", "hygiene.descriptors")
    async def test_aclose_cancelled_at_any_wait_still_releases_everything(
        self, target: Target
    ) -> None:
        """A storage used, then its ``aclose()`` cancelled at its first wait; another at its
        second; and so on until ``aclose()`` ends before the cancellation (at most
        `ACLOSE_WAITS`). A cancelled ``aclose()`` must still release what the storage
        holds (or the ``aclose()`` that leaving ``async with`` calls again must)."""
        if not descriptors.available():
            pytest.skip("this system does not list open descriptors in /proc/self/fd")
        await _exercise(target)  # a warm-up: what the process opens once is not a leak
        before = descriptors.snapshot()
        cancelled = 0
        async with hygiene(check=False) as report:
            while cancelled < ACLOSE_WAITS and await _cancel_aclose_at(target, cancelled + 1):
                cancelled += 1
            gc.collect()
        found = await descriptors.wait_for_no_leak(before, foreign=target.foreign_descriptors)
        if found or report.findings:
            fail(
                "a storage must release everything, also when its aclose() is cancelled",
                expected="as many open descriptors as before, and no unclosed session, "
                "pending task or thread",
                observed="; ".join(
                    (["the process still has " + descriptors.describe_leak(found)] if found else [])
                    + report.findings
                ),
                detail=f"aclose() was cancelled at each of its first {cancelled} waits, one "
                "storage each (each storage used for put, get and list first, and left "
                "through async with, which calls aclose() again). To fix it, release in a "
                "finally: block, or shield the release from the cancellation",
            )

    @checks("close.idempotent", "close.releases")
    async def test_two_aclose_calls_at_once_each_return_once_released(self, target: Target) -> None:
        """Two ``aclose()`` at once (a shutdown hook and the end of an ``async with``):
        whichever returns first, the storage's descriptors are released by then (give or
        take `RELEASE_LAG` for a transport that closes its socket on the next loop
        iteration), not only once the other has ended."""
        if not descriptors.available():
            pytest.skip("this system does not list open descriptors in /proc/self/fd")
        await _exercise(target)  # a warm-up: what the process opens once is not a leak
        before = descriptors.snapshot()
        found: list[descriptors.Descriptor] = []
        async with target.open() as storage:
            await storage.put("h/a", b"a")
            await storage.get("h/a")
            _ = [key async for key in storage.list("h/")]
            closing = [asyncio.ensure_future(storage.aclose()) for _ in range(2)]
            await asyncio.wait(closing, return_when=asyncio.FIRST_COMPLETED)
            found = await descriptors.wait_for_no_leak(
                before, grace=RELEASE_LAG, foreign=target.foreign_descriptors
            )
            await asyncio.gather(*closing)
        if found:
            fail(
                "each aclose() must return only once the storage has released everything, "
                "also when another aclose() is under way",
                expected=f"as many open descriptors as before, {RELEASE_LAG:g} s after the "
                "first of two aclose() calls made at once returned",
                observed="the process still had " + descriptors.describe_leak(found),
                detail="a second aclose() that returns at once because the storage is "
                "already closing lets its caller go on (or exit) while the first still "
                "releases. To fix it, let a later call wait for the first one to end "
                "(StorageBase.aclose does)",
            )


def _pauses(wait: int) -> list[float]:
    """The pauses before the ``wait``-th cancellation: ``wait`` yields to the event loop up
    to `ACLOSE_YIELDS`, then also a pause of 1 ms, 2 ms, 4 ms... (an ``aclose()`` that waits
    for a thread or a server is past many yields in one of its waits)."""
    yields = [0.0] * min(wait, ACLOSE_YIELDS)
    if wait > ACLOSE_YIELDS:
        yields.append(0.001 * 2 ** (wait - ACLOSE_YIELDS - 1))
    return yields


async def _cancel_aclose_at(target: Target, wait: int) -> bool:
    """Open a storage, use it and cancel its ``aclose()`` after `_pauses` of ``wait``;
    return whether ``aclose()`` was still running then."""
    async with target.open() as storage:
        await storage.put("h/a", b"a")
        await storage.get("h/a")
        _ = [key async for key in storage.list("h/")]
        closing = asyncio.ensure_future(storage.aclose())
        for pause in _pauses(wait):
            await asyncio.sleep(pause)
            if closing.done():
                break
        running = not closing.done()
        closing.cancel()
        await asyncio.gather(closing, return_exceptions=True)
    del storage
    return running


async def _exercise(target: Target) -> None:
    """One storage's whole life, in a frame of its own so nothing outlives it."""
    async with target.open() as storage:
        await storage.put("h/a", b"a")
        await storage.put("h/b", b"b")
        await storage.get("h/a")
        _ = [key async for key in storage.list("h/")]
        await storage.delete("h/b")
        task = asyncio.ensure_future(storage.put("h/c", b"c" * 65536))
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.gather(*(storage.put(f"h/{i}", b"x") for i in range(5)))
    await storage.aclose()
    del storage
    gc.collect()
