"""aclose() of an S3 storage: a call that waited for the client to open does not go on, and a
request through the closed client opens no new aiohttp session (which nothing would close)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

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
