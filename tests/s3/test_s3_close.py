"""aclose() of an S3 storage: a call that waited for the client to open does not go on, and a
request through the closed client opens no new aiohttp session (which nothing would close)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import ClientConnectionError
from botocore.exceptions import EndpointConnectionError
from checkpointkit.adapters.s3 import S3Storage
from checkpointkit.conformance.hygiene import hygiene
from checkpointkit.errors import StorageClosed


async def test_a_put_that_waited_for_the_client_to_open_ends_with_storage_closed(
    make_s3: Callable[..., S3Storage],
) -> None:
    reader = make_s3()
    async with hygiene(check=False) as report:
        storage = make_s3()
        put = asyncio.ensure_future(storage.put("k", b"late"))
        while not storage._open_lock.locked():  # the put is opening the client
            await asyncio.sleep(0)
        await storage.aclose()
        with pytest.raises(StorageClosed, match=r"^S3Storage is closed$"):  # no request began
            await put
    assert report.findings == []
    async with reader:
        assert [key async for key in reader.list()] == []  # nothing landed, later either


async def test_a_request_through_the_closed_client_opens_no_session(
    make_s3: Callable[..., S3Storage], s3_bucket: str, s3_prefix: str
) -> None:
    reader = make_s3()
    async with hygiene(check=False) as report:
        storage = make_s3()
        await storage.put("k", b"v")
        client = storage._client
        await storage.aclose()
        with pytest.raises(EndpointConnectionError) as raised:
            await client.put_object(Bucket=s3_bucket, Key=f"{s3_prefix}/late", Body=b"late")
    assert report.findings == []
    refused = raised.value.__context__  # botocore wraps the transport's error in its own
    assert isinstance(refused, ClientConnectionError)
    assert str(refused) == "the S3 client was closed"
    async with reader:
        assert [key async for key in reader.list()] == ["k"]


async def test_aclose_waits_for_a_large_put_up_to_its_own_deadline_not_timeout(
    make_s3: Callable[..., S3Storage], late_relay: Callable[[float], Any]
) -> None:
    # A request's deadline is `timeout` plus one second per MiB of its body: aclose() lets a
    # large put end within that, though it outlasts `timeout` (here the server holds it
    # 0.6 s, with `timeout` 0.25 s and a deadline of 0.25 + 0.9 s).
    new = secrets.token_bytes(900 * 1024)  # under the multipart threshold: one request
    async with hygiene(), late_relay(0.0) as relay, make_s3() as direct:
        await direct.put("k", b"old")
        storage = make_s3(endpoint=relay.address, timeout=0.25, read_timeout=10.0)
        await storage.put("opened", b"")  # the client opens (and its requests go) in time
        relay.delay = 0.6
        put = asyncio.ensure_future(storage.put("k", new))
        await relay.holding(new)  # the whole body has reached the server's side
        await storage.aclose()
        assert (await direct.get("k")).data == new  # landed before aclose() returned...
        assert relay.in_transit == 0  # ...and nothing of it is left to land later
        assert isinstance(put.result(), str)  # its own answer: the version
