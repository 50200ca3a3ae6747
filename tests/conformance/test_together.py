"""`together`: the first call to fail ends the others before the error is raised."""

from __future__ import annotations

import asyncio

import pytest
from checkpointkit.conformance.together import together


async def test_results_come_in_the_order_of_the_calls() -> None:
    async def after(turns: int, value: str) -> str:
        for _ in range(turns):
            await asyncio.sleep(0)
        return value

    assert await together(after(3, "a"), after(0, "b"), after(1, "c")) == ["a", "b", "c"]


async def test_a_failing_call_ends_the_others_before_its_error_is_raised() -> None:
    """A reader that fails while its writer writes on: the writer is cancelled and has
    ended (its ``finally:`` ran) when `together` raises; with ``asyncio.gather`` it would
    still be running, and the hygiene check after the test would blame the storage."""
    failed = asyncio.Event()
    writer_ended = asyncio.Event()

    async def writer() -> None:
        try:
            await asyncio.Event().wait()  # writes until it is stopped
        finally:
            writer_ended.set()

    async def reader() -> None:
        await asyncio.sleep(0)
        failed.set()
        raise AssertionError("a torn read")

    with pytest.raises(AssertionError, match="a torn read"):
        await together(writer(), reader())
    assert failed.is_set() and writer_ended.is_set()
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


async def test_a_cancelled_caller_cancels_every_call() -> None:
    started = asyncio.Event()
    ended: list[str] = []

    async def call(name: str) -> None:
        try:
            started.set()
            await asyncio.Event().wait()
        finally:
            ended.append(name)

    task = asyncio.ensure_future(together(call("a"), call("b")))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(ended) == ["a", "b"]
