"""`StorageBase.aclose`: a second call made while the first is closing waits for it."""

from __future__ import annotations

import asyncio

from checkpointkit.storage import StorageBase


class _SlowClose(StorageBase):
    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.released = False
        self.closes = 0

    async def _aclose(self) -> None:
        self.closes += 1
        await self.release.wait()
        self.released = True


async def test_a_second_aclose_returns_only_when_the_first_has_released() -> None:
    storage = _SlowClose()
    first = asyncio.ensure_future(storage.aclose())
    second = asyncio.ensure_future(storage.aclose())
    done, _ = await asyncio.wait({first, second}, timeout=0.05)
    assert not done  # both wait for the release
    storage.release.set()
    await asyncio.gather(first, second)
    assert storage.released and storage.closes == 1
    await storage.aclose()  # and a later call returns at once
    assert storage.closes == 1


async def test_a_second_aclose_returns_when_the_first_was_cancelled() -> None:
    storage = _SlowClose()
    first = asyncio.ensure_future(storage.aclose())
    await asyncio.sleep(0)
    second = asyncio.ensure_future(storage.aclose())
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    await asyncio.wait_for(second, timeout=5)  # not left waiting for a close that ended
    assert not storage.released and storage.closes == 1
