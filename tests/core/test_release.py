"""`adapters._release.unbroken`: a release that a cancellation cannot cut halfway."""

from __future__ import annotations

import asyncio

import pytest
from checkpointkit.adapters._release import unbroken


async def _release(started: asyncio.Event, go: asyncio.Event, fail: bool = False) -> str:
    started.set()
    await go.wait()
    if fail:
        raise ConnectionError("the goodbye failed")
    return "released"


async def test_a_cancelled_caller_waits_for_the_release_then_is_cancelled() -> None:
    started, go = asyncio.Event(), asyncio.Event()
    work = _release(started, go)
    caller = asyncio.ensure_future(unbroken(work))
    await started.wait()
    caller.cancel()
    await asyncio.sleep(0)
    caller.cancel()  # cancelled twice: still waits
    done, _ = await asyncio.wait({caller}, timeout=0.05)
    assert not done  # the release still runs, and the caller with it
    go.set()
    with pytest.raises(asyncio.CancelledError):
        await caller


async def test_a_release_that_fails_after_the_cancel_still_raises_cancelled_error() -> None:
    started, go = asyncio.Event(), asyncio.Event()
    caller = asyncio.ensure_future(unbroken(_release(started, go, fail=True)))
    await started.wait()
    caller.cancel()
    await asyncio.sleep(0)
    go.set()
    with pytest.raises(asyncio.CancelledError) as raised:
        await caller
    assert isinstance(raised.value.__cause__, ConnectionError)


async def test_without_a_cancel_the_release_answers_as_it_would() -> None:
    started, go = asyncio.Event(), asyncio.Event()
    go.set()
    assert await unbroken(_release(started, go)) == "released"
    with pytest.raises(ConnectionError):
        await unbroken(_release(started, go, fail=True))
