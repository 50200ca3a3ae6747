"""`checkpointkit.adapters._timeouts.SharedTimeout`: ``asyncio.timeout`` for every operation of
a storage, with one timer. What it must keep of ``asyncio.timeout``: an operation past its
timeout raises ``TimeoutError`` (and only that one), a cancel from the caller stays a
``CancelledError``, an operation that ends in time leaves nothing behind."""

from __future__ import annotations

import asyncio

import pytest
from checkpointkit.adapters._timeouts import SharedTimeout

LONG = 30.0
"""Seconds that no operation of these tests waits for (it is timed out or cancelled first)."""


async def test_an_operation_past_the_timeout_raises_timeout_error() -> None:
    timeouts = SharedTimeout(0.05)
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(TimeoutError, match=r"no answer within 0\.05 s"), timeouts():
        await asyncio.sleep(LONG)
    assert 0.05 <= loop.time() - start < 5.0
    assert not timeouts._ops


async def test_each_operation_times_out_at_its_own_deadline_and_only_it() -> None:
    """Operations that start 0.2 s apart, each with 0.6 s, time out 0.2 s apart (the timer is
    armed again for the earliest deadline left), and one that ends in time is not cut short."""
    timeouts = SharedTimeout(0.6)
    loop = asyncio.get_running_loop()
    started = {name: asyncio.Event() for name in ("first", "second", "third")}
    release_quick = asyncio.Event()
    ended: dict[str, float] = {}

    async def slow(name: str) -> None:
        with timeouts():
            started[name].set()
            await asyncio.sleep(LONG)

    async def quick() -> str:
        with timeouts():
            await release_quick.wait()
        return "done"

    start = loop.time()
    tasks: dict[str, asyncio.Task[None]] = {}
    for name in started:
        tasks[name] = asyncio.create_task(slow(name))
        tasks[name].add_done_callback(lambda _t, n=name: ended.setdefault(n, loop.time() - start))
        await started[name].wait()
        if name != "third":
            await asyncio.sleep(0.2)
    in_time = asyncio.create_task(quick())
    with pytest.raises(TimeoutError):
        await tasks["first"]
    release_quick.set()  # before its own deadline
    assert await in_time == "done"
    for name in ("second", "third"):
        with pytest.raises(TimeoutError):
            await tasks[name]
    assert 0.6 <= ended["first"] < ended["second"] < ended["third"]
    assert ended["second"] >= 0.8 and ended["third"] >= 1.0
    assert ended["third"] - ended["second"] >= 0.1, f"second and third ended together: {ended}"
    assert not timeouts._ops


async def test_a_cancel_from_the_caller_stays_a_cancellation() -> None:
    timeouts = SharedTimeout(LONG)
    entered = asyncio.Event()

    async def op() -> None:
        with timeouts():
            entered.set()
            await asyncio.sleep(LONG)

    task = asyncio.create_task(op())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
    assert not timeouts._ops


async def test_an_operation_in_time_leaves_no_pending_cancel() -> None:
    """The task goes on after the operation, also across many operations: nothing fires."""
    timeouts = SharedTimeout(0.05)
    for _ in range(100):
        with timeouts():
            await asyncio.sleep(0)
    await asyncio.sleep(0.1)  # past every operation's deadline: no cancel may reach us here
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    timeouts.close()
    assert timeouts._handle is None
