"""Cancellation and lost replies, through a stalling TCP proxy between the client and moto.

The proxy (:class:`checkpointkit.conformance.proxy.StallProxy`) holds the bytes
of one direction on command, so an operation is provably stuck mid-request or
mid-response when the test cancels it.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import pytest
from checkpointkit import IfMatch
from checkpointkit.adapters.s3 import S3Storage
from checkpointkit.conformance.hygiene import hygiene
from checkpointkit.conformance.proxy import StallProxy
from checkpointkit.conformance.servers.s3 import storage_options

MiB = 1024 * 1024
T = TypeVar("T")
PROMPT = 2.0
"""Generous bound, in seconds, for a cancelled operation to return."""


@pytest.fixture
async def proxy(s3_endpoint: str) -> AsyncIterator[StallProxy]:
    parts = urlsplit(s3_endpoint)
    assert parts.hostname is not None and parts.port is not None
    async with StallProxy((parts.hostname, parts.port)) as p:
        yield p


async def dropped(proxy: StallProxy) -> None:
    """Wait until the proxy has discarded held bytes: the cancelled request's connection is gone.

    Resuming before that would forward the bytes that the client had already
    handed to the network: a request in flight may land after its cancellation
    (as on any network); only a closed connection proves that it cannot.
    """
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
    make_s3: Callable[..., S3Storage], proxy: StallProxy
) -> None:
    a, b = os.urandom(512 * 1024), os.urandom(300 * 1024)
    async with hygiene(), make_s3(endpoint=proxy.address) as storage:
        await storage.put("a", a)
        await storage.put("b", b)
        proxy.stall("response", partial=True)
        task = asyncio.create_task(storage.get("a"))
        await cancel_when_stalled(proxy, task)
        proxy.resume()  # the held bytes of the cancelled reply must reach no one
        assert (await storage.get("b")).data == b  # its own answer, not the stale one
        assert (await storage.get("a")).data == a


async def test_cancelled_put_mid_request_is_absent_and_never_lands_later(
    make_s3: Callable[..., S3Storage], proxy: StallProxy
) -> None:
    async with hygiene(), make_s3(endpoint=proxy.address) as storage, make_s3() as direct:
        v1 = await storage.put("k", b"old")
        proxy.stall("request", partial=True)
        task = asyncio.create_task(storage.put("k", os.urandom(512 * 1024), mode=IfMatch(v1)))
        await cancel_when_stalled(proxy, task)
        await dropped(proxy)  # the client closed the connection: the server never sees the rest
        proxy.resume()
        # a full round trip through the same proxy, then the key: still the old value
        await storage.put("other", b"x")
        assert await storage.get("other") == await direct.get("other")
        assert await direct.get("k") == (b"old", v1)


async def test_cancelled_multipart_put_aborts_its_upload(
    make_s3: Callable[..., S3Storage], proxy: StallProxy, s3_prefix: str, s3_endpoint: str
) -> None:
    class StallOnFirstPart(S3Storage):
        async def _call(
            self, op: str, key: str | None, request: Callable[[], Awaitable[T]], **kw: Any
        ) -> T:
            if op.startswith("put (part 1 "):
                proxy.stall("request", partial=True)  # before the part's first byte is sent
            return await super()._call(op, key, request, **kw)

    async with make_s3() as direct:
        storage = StallOnFirstPart(
            direct.bucket,
            direct.prefix,
            **storage_options(s3_endpoint),
            endpoint=proxy.address,
            multipart_threshold=MiB,
            part_size=5 * MiB,
            max_concurrency=1,
        )
        async with hygiene(), storage:
            task = asyncio.create_task(storage.put("big", os.urandom(11 * MiB)))
            await cancel_when_stalled(proxy, task)
            await dropped(proxy)
            proxy.resume()
            # aclose() has waited for the abort that the cancellation left behind
        assert [k async for k in direct.list()] == []
        uploads = await direct.client.list_multipart_uploads(
            Bucket=direct.bucket, Prefix=f"{s3_prefix}/"
        )
        assert uploads.get("Uploads", []) == []


@pytest.mark.parametrize("mode", ["create", "if-match"])
async def test_conditional_put_whose_reply_was_lost_is_recognized_as_a_success(
    make_s3: Callable[..., S3Storage], proxy: StallProxy, mode: str, s3_endpoint: str
) -> None:
    recognized: list[str | None] = []

    class Spy(S3Storage):
        async def _own_write(self, *args: Any) -> str | None:
            recognized.append(await super()._own_write(*args))
            return recognized[-1]

    async with make_s3() as direct:
        storage = Spy(
            direct.bucket, direct.prefix, **storage_options(s3_endpoint), endpoint=proxy.address
        )
        async with hygiene(), storage:
            put_mode: Any = "create"
            if mode == "if-match":
                put_mode = IfMatch(await storage.put("k", b"old"))
            proxy.stall("response", partial=False)
            task = asyncio.create_task(storage.put("k", b"new", mode=put_mode))
            await asyncio.wait_for(proxy.stalled.wait(), 10)
            assert (await direct.get("k")).data == b"new"  # the server has written it...
            await proxy.drop()  # ...but the reply never arrives: the client retries, gets a 412
            proxy.resume()
            version = await asyncio.wait_for(task, 20)
        assert recognized == [version]  # the 412 was recognized as the put's own write
        assert await direct.get("k") == (b"new", version)
