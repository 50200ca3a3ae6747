"""`CallsUnderWay`: what an HTTP adapter's aclose() waits for before it closes its client."""

from __future__ import annotations

import asyncio
import time

from checkpointkit.adapters._inflight import CallsUnderWay


def _in(seconds: float) -> float:
    return asyncio.get_running_loop().time() + seconds


async def test_ended_returns_at_once_when_no_call_is_under_way() -> None:
    assert await CallsUnderWay().ended(0.0) is True


async def test_ended_waits_for_a_call_that_starts_as_another_ends() -> None:
    """An operation of two requests (read the version, then delete it) ends its first call
    and starts its second in the same turn of the event loop: not a moment with no call."""
    under_way = CallsUnderWay()
    first, second = asyncio.Event(), asyncio.Event()

    async def operation() -> None:
        with under_way.call(_in(60.0)):
            await first.wait()
        with under_way.call(_in(60.0)):
            await second.wait()

    task = asyncio.ensure_future(operation())
    await asyncio.sleep(0)
    ended = asyncio.ensure_future(under_way.ended())
    await asyncio.sleep(0)
    first.set()
    for _ in range(10):
        await asyncio.sleep(0)
    assert not ended.done()  # the second call is under way
    second.set()
    assert await ended is True
    await task


async def test_ended_waits_for_a_call_past_another_calls_deadline_until_its_own() -> None:
    """A large upload's deadline is later than a small request's: ended() waits by the
    latest deadline among the calls under way, not by the first one's."""
    under_way = CallsUnderWay()
    small_done, large_done = asyncio.Event(), asyncio.Event()

    async def request(deadline: float, done: asyncio.Event) -> None:
        with under_way.call(deadline):
            await done.wait()

    small = asyncio.ensure_future(request(_in(0.0), small_done))  # already past its deadline
    large = asyncio.ensure_future(request(_in(60.0), large_done))
    await asyncio.sleep(0)
    ended = asyncio.ensure_future(under_way.ended(0.0))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not ended.done()  # the large call is within its deadline
    small_done.set()
    large_done.set()
    assert await ended is True
    await asyncio.gather(small, large)


async def test_ended_gives_up_once_every_call_is_past_its_deadline_and_the_slack() -> None:
    under_way = CallsUnderWay()
    never = asyncio.Event()

    async def stuck() -> None:
        with under_way.call(_in(0.05)):
            await never.wait()

    task = asyncio.ensure_future(stuck())
    await asyncio.sleep(0)
    start = time.monotonic()
    assert await under_way.ended(0.05) is False
    assert time.monotonic() - start < 5.0  # a generous bound: it returned, it did not hang
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert await under_way.ended(0.0) is True  # a cancelled call is no longer under way
