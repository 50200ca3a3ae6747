"""``AzureBlobStorage.delete_many``: blob batch requests of 256, each key's own answer counted."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from checkpointkit import InvalidKey
from checkpointkit.adapters import azure as azure_module
from checkpointkit.adapters.azure import AzureBlobStorage
from checkpointkit.conformance.hygiene import hygiene

T = TypeVar("T")


class CountingRequests(AzureBlobStorage):
    """Records the operation name of every request (a read's with `` (read)``)."""

    ops: list[str]

    async def _call(
        self, op: str, key: str | None, request: Callable[[], Awaitable[T]], **kw: Any
    ) -> T:
        self.ops.append(op if kw.get("write") else f"{op} (read)")
        return await super()._call(op, key, request, **kw)


async def test_delete_many_deletes_every_key_and_counts_only_those_that_existed(
    az: AzureBlobStorage,
) -> None:
    for key in ("a", "b/c", "b/d", "b/e"):
        await az.put(key, b"v")
    existed = await az.delete_many(["a", "b/c", "missing", "b/e", "b/zz", "a"])
    assert existed == 3  # a, b/c, b/e; "a" twice counts once, like one delete after another
    assert [k async for k in az.list()] == ["b/d"]
    assert await az.delete_many(["a", "b/c"]) == 0  # gone now


async def test_delete_many_sends_one_batch_per_256_keys_and_no_per_key_requests(
    make_az: Callable[..., AzureBlobStorage],
    azurite: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(azure_module, "MAX_DELETE_BATCH", 3)  # the service's 256, scaled down
    keys = [f"runs/r1/cp-{i:02d}" for i in range(7)]
    async with hygiene(), make_az() as direct:
        storage = CountingRequests(direct.container, direct.prefix, connection_string=azurite)
        storage.ops = []
        async with storage:
            for key in keys:
                await direct.put(key, b"v")
            await direct.put("runs/r2/cp-00", b"kept")
            assert await storage.delete_many([*keys, "runs/r1/cp-99"]) == 7
            assert storage.ops == ["delete of 3 keys", "delete of 3 keys", "delete of 2 keys"]
        assert [k async for k in direct.list()] == ["runs/r2/cp-00"]


async def test_delete_many_falls_back_to_one_delete_per_key_when_batches_are_refused(
    make_az: Callable[..., AzureBlobStorage], azurite: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without the hook that gives the batch a plain boundary, Azurite refuses the whole
    # batch with a single answer: the adapter then deletes key by key, and counts right.
    monkeypatch.setattr(azure_module, "_plain_boundary", lambda request: None)
    async with hygiene(), make_az() as direct:
        storage = CountingRequests(direct.container, direct.prefix, connection_string=azurite)
        storage.ops = []
        async with storage:
            await direct.put("a", b"v")
            await direct.put("b", b"v")
            assert await storage.delete_many(["a", "b", "c"]) == 2
            # each key's committed ETag read, then the delete on it (c: missing, no delete)
            assert storage.ops == [
                "delete of 3 keys",
                "delete (read)",
                "delete",
                "delete (read)",
                "delete",
                "delete (read)",
            ]
        assert [k async for k in direct.list()] == []


async def test_delete_many_stays_inside_the_storage_prefix(
    make_az: Callable[..., AzureBlobStorage], az_prefix: str
) -> None:
    async with (
        make_az(prefix=f"{az_prefix}/one") as one,
        make_az(prefix=f"{az_prefix}/one-other") as other,
        make_az(prefix=az_prefix) as parent,
    ):
        for storage in (one, other):
            await storage.put("k", b"v")
            await storage.put("k2", b"v")
        assert await one.delete_many(["k", "k2"]) == 2
        assert [k async for k in other.list()] == ["k", "k2"]
        assert [k async for k in parent.list()] == ["one-other/k", "one-other/k2"]


async def test_delete_many_validates_every_key_before_deleting_any(az: AzureBlobStorage) -> None:
    await az.put("a", b"v")
    with pytest.raises(InvalidKey, match=r"\.\."):
        await az.delete_many(["a", "../escape"])
    assert (await az.get("a")).data == b"v"
