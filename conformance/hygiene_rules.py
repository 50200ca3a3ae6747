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

__all__ = ["HygieneTests"]


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
