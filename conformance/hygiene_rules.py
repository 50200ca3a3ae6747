"""Group ``hygiene``: the hygiene checker works, and the storage leaves nothing behind.

Hygiene is checked around every test of the suite (an autouse fixture). This
group proves the checker itself, one rule per test, with a deliberately leaky
action, and then checks a storage's whole life (open, every operation, a
cancelled call, close) explicitly.
"""

from __future__ import annotations

import asyncio
import concurrent.futures.thread
import gc
import socket
import sys
import threading
from dataclasses import dataclass
from types import FrameType
from typing import ClassVar

import pytest

from ..storage import Storage
from . import descriptors
from .cancelling import point_text
from .checks import fail
from .clauses import checks
from .fixtures import StorageFixtures
from .hygiene import HygieneReport, hygiene
from .target import Target

__all__ = ["ACLOSE_WAITS", "JOB_POINT", "JOB_WAIT", "RELEASE_LAG", "HygieneTests"]

ACLOSE_WAITS = 22
"""The most waits of ``aclose()`` at which its cancellation is tried (after 0 to 22 of
them), one storage each; `JOB_POINT` is tried before them."""

RELEASE_LAG = 0.1
"""Seconds within which what a storage held is released once its ``aclose()`` returned (an
asyncio transport closes its socket one loop iteration after ``close()``)."""

JOB_POINT = "job"
"""The moment at which a job of ``aclose()`` runs in a worker thread (its statement, a
connection's close): the first cancellation of ``aclose()`` is tried there."""

JOB_WAIT = 0.5
"""Seconds `JOB_POINT` waits to see a job of ``aclose()`` in a worker thread (its
cancellation comes then, seen or not)."""

_EXECUTOR_FILE = concurrent.futures.thread.__file__
"""Where a ``ThreadPoolExecutor``'s worker runs a job (``_WorkItem.run``)."""

ACLOSE_YIELDS = 12
"""The first moments are after 0 to 12 yields to the event loop; the later ones add a pause
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

    @checks(
        "close.releases",
        "hygiene.descriptors",
        "hygiene.no-thread-left",
        "hygiene.no-task-left",
        "hygiene.no-unraisable",
    )
    async def test_aclose_cancelled_at_any_wait_still_releases_everything(
        self, target: Target
    ) -> None:
        """A storage used, then its ``aclose()`` cancelled while a job of it runs in a
        worker thread (where one is seen: `JOB_POINT`); another cancelled before it
        starts; another at its first wait; and so on until ``aclose()`` ends before the
        cancellation (at most `ACLOSE_WAITS`). Each time ``aclose()`` is called again, as
        leaving ``async with`` does: once it has returned, and while the storage is still
        referenced (what only its garbage collection would release is left until the
        caller drops it), no thread, descriptor or pending task of the storage may be left,
        give or take `RELEASE_LAG`; and once the storage is dropped, no unclosed session
        may warn."""
        if not descriptors.available():
            pytest.skip("this system does not list open descriptors in /proc/self/fd")
        await _exercise(target)  # a warm-up: what the process opens once is not a leak
        before = descriptors.snapshot()
        cancelled: list[str] = []
        async with hygiene(check=False) as report:
            for point in (JOB_POINT, *range(ACLOSE_WAITS + 1)):
                moment = await _cancel_aclose_at(target, point, before)
                if moment.left:
                    fail(
                        "a storage must release everything once aclose() returns, also after "
                        "a cancelled aclose()",
                        key="h/a",
                        expected="no thread, descriptor or pending task of the storage left "
                        f"{RELEASE_LAG:g} s after the second aclose() returned",
                        observed="; ".join(moment.left),
                        detail=f"aclose() was {moment.when}, then called again (it returned); "
                        "the storage was still referenced, so nothing had been released by its "
                        "garbage collection. A second aclose() that returns at once because the "
                        "storage is marked closed leaves what the first one did not reach. To "
                        "fix it, release in a finally: block (shut an executor down, join a "
                        "thread, close a connection there), or shield the release from the "
                        "cancellation",
                    )
                if moment.running:
                    cancelled.append(moment.when)
                elif point != JOB_POINT and point > 0:
                    break  # aclose() ended before this cancellation: later ones change nothing
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
                detail=f"aclose() was cancelled at {len(cancelled)} moments, one storage each "
                "(each storage used for put, get and list first, closed again after the "
                "cancellation, then dropped). To fix it, release in a finally: block, or "
                "shield the release from the cancellation",
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


@dataclass
class _Moment:
    """What one cancellation of ``aclose()`` left.

    Attributes:
        when: the moment, in words ("cancelled 2 event-loop iterations after it started").
        running: ``aclose()`` was still running when it was cancelled.
        left: what of the storage was left once ``aclose()`` had been called again and had
            returned, each in words (a thread's name, descriptors, a pending task).
    """

    when: str
    running: bool
    left: list[str]


def _job_running() -> bool:
    """Whether a thread other than this one runs a job of a ``ThreadPoolExecutor`` (what
    ``run_in_executor`` and ``asyncio.to_thread`` give one) right now."""
    me = threading.get_ident()
    for ident, frame in sys._current_frames().items():
        f: FrameType | None = frame
        while ident != me and f is not None:
            if f.f_code.co_name == "run" and f.f_code.co_filename == _EXECUTOR_FILE:
                return True
            f = f.f_back
    return False


async def _reach(point: int | str, closing: asyncio.Future[None]) -> str:
    """Wait until ``point`` of a running ``aclose()``; return the moment in words."""
    if point == JOB_POINT:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + JOB_WAIT
        while not closing.done() and loop.time() < deadline:
            if _job_running():
                return "cancelled while a job of it ran in a worker thread"
            await asyncio.sleep(0)
        return f"cancelled {JOB_WAIT:g} s after it started (no job of it was seen in a thread)"
    assert isinstance(point, int)
    for pause in _pauses(point):
        await asyncio.sleep(pause)
        if closing.done():
            break
    return point_text(point if point <= ACLOSE_YIELDS else sum(_pauses(point)))


async def _cancel_aclose_at(target: Target, point: int | str, before: dict[int, str]) -> _Moment:
    """Open a storage, use it and cancel its ``aclose()`` at ``point`` (`JOB_POINT`, or the
    `_pauses` of a number of waits); call ``aclose()`` again and, the storage still
    referenced, see what of it is left (descriptors against ``before``, threads and tasks
    through `hygiene`)."""
    async with hygiene(check=False, thread_grace=RELEASE_LAG) as report:
        async with target.open() as storage:
            await storage.put("h/a", b"a")
            await storage.get("h/a")
            _ = [key async for key in storage.list("h/")]
            closing = asyncio.ensure_future(storage.aclose())
            when = await _reach(point, closing)
            running = not closing.done()
            closing.cancel()
            await asyncio.gather(closing, return_exceptions=True)
            await storage.aclose()  # must return only once everything is released
        found = await descriptors.wait_for_no_leak(
            before, grace=RELEASE_LAG, foreign=target.foreign_descriptors
        )
    left = ["the process still has " + descriptors.describe_leak(found)] if found else []
    del storage  # only now: what its garbage collection releases did not count above
    gc.collect()  # an unclosed session warns now, in the caller's hygiene block
    return _Moment(when, running, left + report.findings)


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
