"""Cancellation and lost replies, through a stalling TCP proxy between the client and Azurite.

The proxy (:class:`checkpointkit.conformance.proxy.StallProxy`) holds the bytes
of one direction on command, so an operation is provably stuck mid-request or
mid-response when the test cancels it.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest
from checkpointkit import IfMatch
from checkpointkit.adapters.azure import AzureBlobStorage
from checkpointkit.conformance.hygiene import hygiene
from checkpointkit.conformance.proxy import StallProxy

MiB = 1024 * 1024
T = TypeVar("T")
PROMPT = 2.0
"""Generous bound, in seconds, for a cancelled operation to return."""


@pytest.fixture
async def proxy(azurite: str) -> AsyncIterator[StallProxy]:
    match = re.search(r"BlobEndpoint=https?://([^:/]+):(\d+)/", azurite)
    assert match is not None
    async with StallProxy((match[1], int(match[2]))) as p:
        yield p


async def dropped(proxy: StallProxy) -> None:
    """Wait until the proxy has discarded held bytes: the cancelled request's connection is gone."""
    async with asyncio.timeout(PROMPT):
        while proxy.dropped_bytes == 0:
            await asyncio.sleep(0.005)


async def cancel_when_stalled(proxy: StallProxy, task: asyncio.Task[Any]) -> None:
    """Wait until the proxy holds the operation's bytes, cancel it, check it ends promptly."""
    await asyncio.wait_for(proxy.stalled.wait(), 10)
    assert not task.done()
    task.cancel()
    started = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < PROMPT


async def test_cancelled_get_mid_response_leaves_the_client_healthy(
    make_az: Callable[..., AzureBlobStorage], proxy: StallProxy
) -> None:
    a, b = os.urandom(512 * 1024), os.urandom(300 * 1024)
    async with hygiene(), make_az(endpoint=proxy.address) as storage:
        await storage.put("a", a)
        await storage.put("b", b)
        proxy.stall("response", partial=True)
        task = asyncio.create_task(storage.get("a"))
        await cancel_when_stalled(proxy, task)
        proxy.resume()  # the held bytes of the cancelled reply must reach no one
        assert (await storage.get("b")).data == b  # its own answer, not the stale one
        assert (await storage.get("a")).data == a


async def test_cancelled_put_mid_request_is_absent_and_never_lands_later(
    make_az: Callable[..., AzureBlobStorage], proxy: StallProxy
) -> None:
    async with hygiene(), make_az(endpoint=proxy.address) as storage, make_az() as direct:
        v1 = await storage.put("k", b"old")
        proxy.stall("request", partial=True)
        task = asyncio.create_task(storage.put("k", os.urandom(512 * 1024), mode=IfMatch(v1)))
        await cancel_when_stalled(proxy, task)
        await dropped(proxy)  # the client closed the connection: the server never sees the rest
        proxy.resume()
        await storage.put("other", b"x")
        assert await storage.get("other") == await direct.get("other")
        assert await direct.get("k") == (b"old", v1)


async def test_cancelled_block_upload_commits_nothing(
    make_az: Callable[..., AzureBlobStorage], proxy: StallProxy, az_prefix: str
) -> None:
    class StallOnSecondBlock(AzureBlobStorage):
        async def _call(
            self, op: str, key: str | None, request: Callable[[], Awaitable[T]], **kw: Any
        ) -> T:
            if op.startswith("put (block 2 "):
                proxy.stall("request", partial=True)  # before the block's first byte is sent
            return await super()._call(op, key, request, **kw)

    async with make_az() as direct:
        await direct.put("big", b"old")
        storage = make_az(endpoint=proxy.address, max_concurrency=1)
        storage.__class__ = StallOnSecondBlock  # the fixture's settings, instrumented
        async with hygiene(), storage:
            task = asyncio.create_task(storage.put("big", os.urandom(3 * MiB)))
            await cancel_when_stalled(proxy, task)
            await dropped(proxy)
            proxy.resume()
        assert (await direct.get("big")).data == b"old"
        blob = direct.client.get_blob_client(f"{az_prefix}/big")
        committed, _uncommitted = await blob.get_block_list("all")
        assert committed == []  # the old value was one Put Blob; no block list was committed


@pytest.mark.parametrize("mode", ["create", "if-match"])
async def test_conditional_put_whose_reply_was_lost_is_recognized_as_a_success(
    make_az: Callable[..., AzureBlobStorage], proxy: StallProxy, mode: str
) -> None:
    recognized: list[str | None] = []

    class Spy(AzureBlobStorage):
        async def _own_write(self, *args: Any) -> str | None:
            recognized.append(await super()._own_write(*args))
            return recognized[-1]

    async with make_az() as direct:
        storage = make_az(endpoint=proxy.address)
        storage.__class__ = Spy
        async with hygiene(), storage:
            put_mode: Any = "create"
            await storage.put("warm", b"")  # the container's creation is done before the stall
            if mode == "if-match":
                put_mode = IfMatch(await storage.put("k", b"old"))
            proxy.stall("response", partial=False)
            task = asyncio.create_task(storage.put("k", b"new", mode=put_mode))
            await asyncio.wait_for(proxy.stalled.wait(), 10)
            assert (await direct.get("k")).data == b"new"  # the server has written it...
            await proxy.drop()  # ...but the reply never arrives: the put is sent again
            proxy.resume()
            version = await asyncio.wait_for(task, 20)
        assert recognized == [version]  # the failed condition was recognized as its own write
        assert await direct.get("k") == (b"new", version)
