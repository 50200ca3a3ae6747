"""``S3Storage.delete_many``: ``DeleteObjects`` per 1000 keys, an honest count of existing ones.

``DeleteObjects`` reports every key as deleted, whether it existed or not; the
adapter finds the existing ones, with their ETags, from a listing of each request's
range, and deletes each on the condition of its ETag: a key that someone else deletes
between the listing and the request is theirs to count. moto ignores the condition (the
differences table of the S3 page): the adapter finds that out once per storage and there
deletes each listed key on its own, as ``delete`` does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from xml.sax.saxutils import escape as xml_escape

import pytest
from checkpointkit import InvalidKey
from checkpointkit.adapters import s3 as s3_module
from checkpointkit.adapters.s3 import (
    MAX_DELETE_BATCH,
    MAX_DELETE_BODY,
    S3Storage,
    delete_batches,
)
from checkpointkit.conformance.hygiene import hygiene
from checkpointkit.errors import StorageClosed

T = TypeVar("T")

HONOURS_DELETE_CONDITIONS = {"moto": False, "seaweedfs": True}
"""Whether the server keeps an object of a ``DeleteObjects`` whose ``ETag`` condition fails
(the row "DeleteObjects of a key by an old ETag" of ``differences.py``): the adapter asks
once, and where the condition is ignored deletes each listed key on its own."""


class CountingRequests(S3Storage):
    """Records the operation name of every request."""

    ops: list[str]

    async def _call(
        self, op: str, key: str | None, request: Callable[[], Awaitable[T]], **kw: Any
    ) -> T:
        self.ops.append(op)
        return await super()._call(op, key, request, **kw)


def counting(direct: S3Storage, **options: Any) -> CountingRequests:
    access, secret, _ = direct._credentials
    storage = CountingRequests(
        direct.bucket,
        direct.prefix,
        endpoint_url=direct.endpoint_url,
        region=direct.region,
        access_key_id=access,
        secret_access_key=secret,
        **options,
    )
    storage.ops = []
    return storage


async def test_delete_many_deletes_every_key_and_counts_only_those_that_existed(
    s3: S3Storage,
) -> None:
    for key in ("a", "b/c", "b/d", "b/e"):
        await s3.put(key, b"v")
    existed = await s3.delete_many(["a", "b/c", "missing", "b/e", "b/zz", "a"])
    assert existed == 3  # a, b/c, b/e; "a" twice counts once, like one delete after another
    assert [k async for k in s3.list()] == ["b/d"]
    assert await s3.delete_many(["a", "b/c"]) == 0  # gone now


async def test_delete_many_sends_one_delete_objects_per_batch_where_conditions_hold(
    make_s3: Callable[..., S3Storage], monkeypatch: pytest.MonkeyPatch, s3_server_name: str
) -> None:
    monkeypatch.setattr(s3_module, "MAX_DELETE_BATCH", 3)  # S3's 1000, scaled down for moto
    keys = [f"runs/r1/cp-{i:02d}" for i in range(7)]
    async with hygiene(), make_s3() as direct, counting(direct, page_size=1000) as storage:
        for key in keys:
            await direct.put(key, b"v")
        await direct.put("runs/r2/cp-00", b"kept")
        storage.ops.clear()
        assert await storage.delete_many([*keys, "runs/r1/cp-99"]) == 7
        probe = "delete (a probe of conditional deletes)"
        deletes = [op for op in storage.ops if op.startswith("delete")]
        listings = [op for op in storage.ops if op.startswith("list")]
        assert len(listings) == 3  # one listing per batch, to find what exists
        if HONOURS_DELETE_CONDITIONS[s3_server_name]:
            # the probe once, then one DeleteObjects per batch: no request per key
            assert deletes == [probe, "delete of 3 keys", "delete of 3 keys", "delete of 2 keys"]
        else:
            # moto deletes on an old ETag: each listed key as delete does, exact (a
            # HeadObject and a conditional DeleteObject), and the missing one in a batch
            assert deletes[0] == probe
            assert sorted(deletes[1:]) == ["delete"] * 14 + ["delete of 1 keys"]  # 7 keys, 2 each
        assert [k async for k in direct.list()] == ["runs/r2/cp-00"]
        storage.ops.clear()
        await storage.delete_many(["runs/r2/cp-00"])
        assert probe not in storage.ops  # asked once per storage


async def test_delete_many_stays_inside_the_storage_prefix(
    make_s3: Callable[..., S3Storage], s3_prefix: str
) -> None:
    async with (
        make_s3(prefix=f"{s3_prefix}/one") as one,
        make_s3(prefix=f"{s3_prefix}/one-other") as other,
        make_s3(prefix=s3_prefix) as parent,
    ):
        for storage in (one, other):
            await storage.put("k", b"v")
            await storage.put("k2", b"v")
        assert await one.delete_many(["k", "k2"]) == 2
        assert [k async for k in other.list()] == ["k", "k2"]
        assert [k async for k in parent.list()] == ["one-other/k", "one-other/k2"]


async def test_delete_many_validates_every_key_before_deleting_any(s3: S3Storage) -> None:
    await s3.put("a", b"v")
    with pytest.raises(InvalidKey, match=r"\.\."):
        await s3.delete_many(["a", "../escape"])
    assert (await s3.get("a")).data == b"v"


def test_a_batch_of_long_names_is_cut_before_its_body_passes_the_limit() -> None:
    # 1,025 names of 1 KiB (as the conformance suite's megabyte of names): 1,000 of them
    # would make a DeleteObjects body over 1 MiB, which aiohttp warns about
    keys = [f"k{i:05d}".ljust(1024, "n") for i in range(1025)]
    names = {key: key for key in keys}
    batches = list(delete_batches(keys, names))
    assert [k for batch in batches for k in batch] == keys
    # each object as the request holds it, with the longest ETag condition (a multipart
    # upload of 10,000 parts), its quotes escaped
    etag = "&quot;" + "0" * 32 + "-10000&quot;"
    xml = len(f"<Object><Key></Key><ETag>{etag}</ETag></Object>")
    for batch in batches:
        body = sum(len(xml_escape(k).encode()) + xml for k in batch)
        assert len(batch) <= MAX_DELETE_BATCH and body <= MAX_DELETE_BODY
    assert len(batches) == 2 and len(batches[0]) == MAX_DELETE_BODY // (1024 + xml)
    # short names: the count is the limit
    short = [f"k{i:05d}" for i in range(2500)]
    assert [len(b) for b in delete_batches(short, {k: k for k in short})] == [1000, 1000, 500]
    # escaping counts: '&' is five bytes in the body
    amp = [f"k{i:05d}".ljust(1024, "&") for i in range(200)]
    assert all(len(b) < 200 for b in delete_batches(amp, {k: k for k in amp}))


class AfterListing(S3Storage):
    """Runs `after_listing` once, between a batch's listing and its ``DeleteObjects``."""

    after_listing: Callable[[], Awaitable[None]] | None = None

    async def _existing(self, chunk: list[str]) -> dict[str, str]:
        found = await super()._existing(chunk)
        hook, self.after_listing = self.after_listing, None
        if hook is not None:
            await hook()
        return found


@pytest.mark.parametrize("object_names", ["keys", "flat"])
async def test_a_key_deleted_by_another_client_after_the_listing_is_counted_once(
    make_s3: Callable[..., S3Storage], object_names: str
) -> None:
    # "b/x.y": with object_names=flat its object name is escaped, and the key of the
    # answer's error entry must be read back as the key
    keys = ["a", "b/x.y", "c"]
    async with (
        make_s3(object_names=object_names) as other,
        make_s3(cls=AfterListing, object_names=object_names) as storage,
    ):
        assert isinstance(storage, AfterListing)
        for key in keys:
            await other.put(key, b"v")
        found_by_other: list[bool] = []

        async def delete_b() -> None:
            found_by_other.append(await other.delete("b/x.y"))

        storage.after_listing = delete_b
        existed = await storage.delete_many(keys)
        assert found_by_other == [True]
        # "b/x.y" was the other delete's to count, not both: by its failed condition where
        # the server honours it, else by the adapter's delete of each listed key (moto)
        assert existed == 2
        assert [k async for k in other.list()] == []


async def test_a_key_written_again_after_the_listing_is_deleted_and_counted(
    make_s3: Callable[..., S3Storage],
) -> None:
    async with make_s3() as other, make_s3(cls=AfterListing) as storage:
        assert isinstance(storage, AfterListing)
        for key in ("a", "b"):
            await other.put(key, b"v")

        async def write_b_again() -> None:
            await other.put("b", b"again")

        storage.after_listing = write_b_again
        assert await storage.delete_many(["a", "b"]) == 2
        assert [k async for k in other.list()] == []


async def test_a_key_created_after_the_listing_is_deleted_and_not_counted(
    make_s3: Callable[..., S3Storage],
) -> None:
    async with make_s3() as other, make_s3(cls=AfterListing) as storage:
        assert isinstance(storage, AfterListing)
        await other.put("a", b"v")

        async def create_b() -> None:
            await other.put("b", b"new")

        storage.after_listing = create_b
        # "b" is deleted (delete_many deletes every key it is given) and counted as the
        # listing saw it: missing
        assert await storage.delete_many(["a", "b"]) == 1
        assert [k async for k in other.list()] == []


async def test_a_batch_whose_key_by_key_deletes_aclose_refused_ends_with_storage_closed(
    make_s3: Callable[..., S3Storage],
) -> None:
    # Where the server ignores delete conditions (moto), each listed key is deleted alone.
    # aclose() begun between the listing and those deletes refuses them before any
    # request: nothing was deleted, and StorageClosed says so (OutcomeUnknown, found by
    # the conformance suite's aclose-while-opening sweep, said they may have happened).
    async with make_s3() as other:
        await other.put("a", b"v")
        storage = make_s3(cls=AfterListing)
        assert isinstance(storage, AfterListing)
        storage._delete_conditions = False  # the path of a server that ignores them
        closing: list[asyncio.Future[None]] = []

        async def begin_aclose() -> None:
            closing.append(asyncio.ensure_future(storage.aclose()))
            while not storage._closed:
                await asyncio.sleep(0)

        storage.after_listing = begin_aclose
        with pytest.raises(StorageClosed, match=r"^AfterListing is closed$"):  # no request
            await storage.delete_many(["a"])
        await closing[0]
        assert [k async for k in other.list()] == ["a"]
