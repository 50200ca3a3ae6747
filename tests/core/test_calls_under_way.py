"""`CallsUnderWay`: what an HTTP adapter's aclose() waits for before it closes its client."""

from __future__ import annotations

import asyncio
import time

from checkpointkit.adapters._inflight import CallsUnderWay


async def test_ended_returns_at_once_when_no_call_is_under_way() -> None:
    assert await CallsUnderWay().ended(0.0) is True


async def test_ended_waits_for_a_call_that_starts_as_another_ends() -> None:
    """An operation of two requests (read the version, then delete it) ends its first call
    and starts its second in the same turn of the event loop: not a moment with no call."""
    under_way = CallsUnderWay()
    first, second = asyncio.Event(), asyncio.Event()

    async def operation() -> None:
        with under_way.call():
            await first.wait()
        with under_way.call():
            await second.wait()

    task = asyncio.ensure_future(operation())
    await asyncio.sleep(0)
    ended = asyncio.ensure_future(under_way.ended(10.0))
    await asyncio.sleep(0)
    first.set()
    for _ in range(10):
        await asyncio.sleep(0)
    assert not ended.done()  # the second call is under way
    second.set()
    assert await ended is True
    await task


async def test_ended_gives_up_after_its_timeout() -> None:
    under_way = CallsUnderWay()
    never = asyncio.Event()

    async def stuck() -> None:
        with under_way.call():
            await never.wait()

    task = asyncio.ensure_future(stuck())
    await asyncio.sleep(0)
    start = time.monotonic()
    assert await under_way.ended(0.05) is False
    assert time.monotonic() - start < 5.0  # a generous bound: it returned, it did not hang
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert await under_way.ended(0.0) is True  # a cancelled call is no longer under way
