"""The storage promises of DESIGN.md, kept by the Azure Blob adapter against Azurite."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

import pytest
from checkpointkit import (
    IfMatch,
    InvalidKey,
    NotFound,
    PreconditionFailed,
    Storage,
    StorageClosed,
    StorageUnavailable,
    open_storage,
)
from checkpointkit.adapters.azure import AzureBlobStorage
from checkpointkit.conformance.hygiene import hygiene

MiB = 1024 * 1024
BIG = 3 * MiB + 123  # above the tests' 1 MiB block threshold: seven blocks of 512 KiB


def test_azure_storage_is_a_storage(azurite: str) -> None:
    storage: Storage = AzureBlobStorage("ckk", connection_string=azurite)
    assert isinstance(storage, Storage)


@pytest.mark.parametrize("size", [0, 1, 1000, MiB, BIG], ids=["0B", "1B", "1kB", "1MiB", "3MiB"])
async def test_round_trip_keeps_bytes_and_version(az: AzureBlobStorage, size: int) -> None:
    data = os.urandom(size)
    version = await az.put("runs/r1/data", data)
    got = await az.get("runs/r1/data")
    assert got.data == data
    assert got.version == version


async def test_large_value_is_staged_as_blocks(az: AzureBlobStorage, az_prefix: str) -> None:
    await az.put("big", os.urandom(BIG))
    blob = az.client.get_blob_client(f"{az_prefix}/big")
    committed, uncommitted = await blob.get_block_list("all")
    assert len(committed) == 7
    assert uncommitted == []


async def test_get_missing_key_raises_not_found(az: AzureBlobStorage) -> None:
    with pytest.raises(NotFound, match="'nope/x'"):
        await az.get("nope/x")


@pytest.mark.parametrize("size", [10, BIG], ids=["single", "blocks"])
async def test_create_only_rejects_existing_key(az: AzureBlobStorage, size: int) -> None:
    first = await az.put("k", os.urandom(size), mode="create")
    with pytest.raises(PreconditionFailed, match="'k'"):
        await az.put("k", os.urandom(size), mode="create")
    assert (await az.get("k")).version == first


@pytest.mark.parametrize("size", [10, BIG], ids=["single", "blocks"])
async def test_if_match_replaces_the_matching_version(az: AzureBlobStorage, size: int) -> None:
    v1 = await az.put("k", b"one")
    data = os.urandom(size)
    v2 = await az.put("k", data, mode=IfMatch(v1))
    assert v2 != v1
    assert await az.get("k") == (data, v2)


@pytest.mark.parametrize("size", [10, BIG], ids=["single", "blocks"])
async def test_if_match_rejects_another_version(az: AzureBlobStorage, size: int) -> None:
    v1 = await az.put("k", b"one")
    v2 = await az.put("k", b"two")
    with pytest.raises(PreconditionFailed, match="'k'"):
        await az.put("k", os.urandom(size), mode=IfMatch(v1))
    assert await az.get("k") == (b"two", v2)


@pytest.mark.parametrize("size", [10, BIG], ids=["single", "blocks"])
async def test_if_match_on_missing_key_fails(az: AzureBlobStorage, size: int) -> None:
    v1 = await az.put("k", b"one")
    with pytest.raises(PreconditionFailed, match="'other'"):
        await az.put("other", os.urandom(size), mode=IfMatch(v1))
    with pytest.raises(NotFound):
        await az.get("other")


async def test_version_changes_on_every_write(az: AzureBlobStorage) -> None:
    v1 = await az.put("k", b"same")
    v2 = await az.put("k", b"same")  # Azure's ETag changes even when the bytes do not
    assert await az.delete("k")
    v3 = await az.put("k", b"same", mode="create")
    assert len({v1, v2, v3}) == 3


async def test_delete_reports_whether_the_key_existed(az: AzureBlobStorage) -> None:
    await az.put("k", b"x")
    assert await az.delete("k") is True
    assert await az.delete("k") is False
    with pytest.raises(NotFound):
        await az.get("k")


async def test_delete_if_match(az: AzureBlobStorage) -> None:
    v1 = await az.put("k", b"one")
    v2 = await az.put("k", b"two")
    with pytest.raises(PreconditionFailed, match="'k'"):
        await az.delete("k", if_match=v1)
    assert (await az.get("k")).version == v2
    assert await az.delete("k", if_match=v2) is True
    assert await az.delete("k", if_match=v2) is False


async def test_list_is_ordered_and_pages_across_requests(az: AzureBlobStorage) -> None:
    keys = [f"runs/r/{i:03d}" for i in range(8)] + ["runs/r/a", "runs/r/é", "runs/r/中"]
    await asyncio.gather(*(az.put(k, b"v") for k in reversed(keys)))
    listed = [k async for k in az.list("runs/r/")]  # page_size is 3: four requests
    assert listed == sorted(keys)


async def test_list_start_after_and_limit(az: AzureBlobStorage) -> None:
    keys = [f"p/{i}" for i in range(7)]
    await asyncio.gather(*(az.put(k, b"v") for k in keys))
    assert [k async for k in az.list("p/", start_after="p/2")] == keys[3:]
    assert [k async for k in az.list("p/", start_after="p/2", limit=2)] == keys[3:5]
    assert [k async for k in az.list("p/", limit=4)] == keys[:4]
    assert [k async for k in az.list("p/", limit=0)] == []
    assert [k async for k in az.list("p/", start_after="p/6")] == []
    assert [k async for k in az.list("p/", start_after="a")] == keys


async def test_list_never_leaves_the_prefix(
    az: AzureBlobStorage, make_az: Callable[..., AzureBlobStorage], az_prefix: str
) -> None:
    await asyncio.gather(*(az.put(k, b"v") for k in ["a", "a/b", "a/c", "ab", "b/a"]))
    assert [k async for k in az.list("a/")] == ["a/b", "a/c"]
    assert [k async for k in az.list("a")] == ["a", "a/b", "a/c", "ab"]
    async with make_az(prefix=az_prefix + "x") as sibling:
        await sibling.put("a/z", b"v")
        assert [k async for k in sibling.list()] == ["a/z"]
    assert [k async for k in az.list()] == ["a", "a/b", "a/c", "ab", "b/a"]


async def test_keys_map_one_to_one_to_blob_names(az: AzureBlobStorage, az_prefix: str) -> None:
    odd = ["sp ace", "q?m", "h#sh", "pct%41", "plus+", "amp&", "uni/é中", "dot.", "a/.hidden"]
    for k in odd:
        await az.put(k, k.encode())
    for k in odd:
        assert (await az.get(k)).data == k.encode()
    assert [k async for k in az.list()] == sorted(odd)
    names = [b.name async for b in az.client.list_blobs(name_starts_with=f"{az_prefix}/")]
    assert sorted(names) == sorted(f"{az_prefix}/{k}" for k in odd)


@pytest.mark.parametrize("key", ["", "../x", "a/../b", "a//b", "/a", "a/", "a\\b", "a\x00b"])
async def test_bad_keys_are_rejected(az: AzureBlobStorage, key: str) -> None:
    with pytest.raises(InvalidKey):
        await az.put(key, b"x")
    with pytest.raises(InvalidKey):
        await az.get(key)
    with pytest.raises(InvalidKey):
        await az.delete(key)


async def test_keys_that_xml_cannot_carry_are_invalid(az: AzureBlobStorage) -> None:
    for key in ["a\uffffb", "a\ufffe"]:
        with pytest.raises(InvalidKey, match="U\\+FFFF"):
            await az.put(key, b"x")
    assert [k async for k in az.list("a\uffff")] == []


async def test_use_after_close_raises_storage_closed(
    make_az: Callable[..., AzureBlobStorage],
) -> None:
    storage = make_az()
    async with storage:
        await storage.put("k", b"x")
    await storage.aclose()  # idempotent
    with pytest.raises(StorageClosed):
        await storage.get("k")
    with pytest.raises(StorageClosed):
        await storage.put("k", b"x")
    with pytest.raises(StorageClosed):
        storage.list()


async def test_close_leaves_no_session_socket_or_task(
    make_az: Callable[..., AzureBlobStorage],
) -> None:
    async with hygiene(), make_az() as storage:
        await storage.put("k", os.urandom(BIG))
        await storage.get("k")
        assert [k async for k in storage.list()] == ["k"]


async def test_large_bodies_are_streamed_without_warnings(
    make_az: Callable[..., AzureBlobStorage],
) -> None:
    # default thresholds: a 1 MiB single Put Blob, then 8 MiB blocks of a 10 MiB value
    single, staged = os.urandom(1 * MiB), os.urandom(10 * MiB)
    async with hygiene(), make_az(block_threshold=1 * MiB, block_size=8 * MiB) as storage:
        await storage.put("single", single)
        await storage.put("staged", staged, mode="create")
        assert (await storage.get("single")).data == single
        assert (await storage.get("staged")).data == staged


async def test_concurrent_create_only_has_exactly_one_winner(az: AzureBlobStorage) -> None:
    async def attempt(i: int) -> tuple[int, str] | None:
        try:
            return i, await az.put("lease", f"writer {i}".encode(), mode="create")
        except PreconditionFailed:
            return None

    results = await asyncio.gather(*(attempt(i) for i in range(16)))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    i, version = winners[0]
    assert await az.get("lease") == (f"writer {i}".encode(), version)


async def test_concurrent_block_creates_have_exactly_one_winner(az: AzureBlobStorage) -> None:
    values = [os.urandom(BIG) for _ in range(3)]

    async def attempt(i: int) -> int | None:
        try:
            await az.put("big", values[i], mode="create")
        except PreconditionFailed:
            return None
        return i

    winners = [i for i in await asyncio.gather(*(attempt(i) for i in range(3))) if i is not None]
    assert len(winners) == 1
    assert (await az.get("big")).data == values[winners[0]]


async def test_concurrent_block_overwrites_all_complete_whole(az: AzureBlobStorage) -> None:
    # a commit discards the other writers' staged blocks: the adapter stages them again
    values = [os.urandom(BIG) for _ in range(3)]
    await asyncio.gather(*(az.put("big", v) for v in values))
    assert (await az.get("big")).data in values


async def test_cas_counter_loses_no_increment(az: AzureBlobStorage) -> None:
    await az.put("counter", b"0")

    async def worker(n: int) -> None:
        for _ in range(n):
            while True:
                data, version = await az.get("counter")
                try:
                    await az.put("counter", str(int(data) + 1).encode(), mode=IfMatch(version))
                    break
                except PreconditionFailed:
                    pass

    await asyncio.gather(*(worker(5) for _ in range(4)))
    assert (await az.get("counter")).data == b"20"


async def test_open_storage_url_reaches_the_container(
    azurite: str, az_container: str, az_prefix: str
) -> None:
    async with open_storage(
        f"az://{az_container}/{az_prefix}?create=true", connection_string=azurite
    ) as storage:
        assert isinstance(storage, AzureBlobStorage)
        assert storage.prefix == az_prefix
        await storage.put("via/url", b"x")
        assert (await storage.get("via/url")).data == b"x"


async def test_connection_string_from_the_environment(
    azurite: str, az_container: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite)
    async with open_storage(f"azure://{az_container}/env?create=true") as storage:
        await storage.put("k", b"x")
        assert (await storage.get("k")).data == b"x"
        await storage.delete("k")


async def test_account_url_with_a_key_credential(
    azurite: str, az_container: str, az_prefix: str
) -> None:
    from checkpointkit.conformance.servers.azure import ACCOUNT_KEY

    account_url = azurite.split("BlobEndpoint=", 1)[1].rstrip(";")
    async with AzureBlobStorage(
        az_container, az_prefix, account_url=account_url, credential=ACCOUNT_KEY, create=True
    ) as storage:
        await storage.put("k", b"x")
        assert (await storage.get("k")).data == b"x"


async def test_sas_credential(
    azurite: str, az_container: str, az_prefix: str, az: AzureBlobStorage
) -> None:
    from datetime import UTC, datetime, timedelta

    from azure.storage.blob import ContainerSasPermissions, generate_container_sas
    from checkpointkit.conformance.servers.azure import ACCOUNT_KEY, ACCOUNT_NAME

    sas = generate_container_sas(
        ACCOUNT_NAME,
        az_container,
        account_key=ACCOUNT_KEY,
        permission=ContainerSasPermissions(read=True, write=True, delete=True, list=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )
    account_url = azurite.split("BlobEndpoint=", 1)[1].rstrip(";")
    async with AzureBlobStorage(
        az_container, az_prefix, account_url=account_url, credential=sas, create=True
    ) as storage:
        await storage.put("sas", b"x", mode="create")
        assert (await storage.get("sas")).data == b"x"
        assert [k async for k in storage.list("sas")] == ["sas"]
        assert sas not in repr(storage)


async def test_create_true_creates_a_missing_container(
    make_az: Callable[..., AzureBlobStorage],
) -> None:
    import secrets

    name = f"ckk-new-{secrets.token_hex(4)}"
    async with make_az(container=name, create=True) as storage:
        await storage.put("k", b"x")
    async with make_az(container=name, create=True) as again:  # exists: fine
        assert (await again.get("k")).data == b"x"


async def test_a_listing_out_of_code_point_order_is_sorted_in_a_page_and_refused_across_pages(
    az: AzureBlobStorage,
) -> None:
    """Azurite lists by UTF-16 code units: '😀' (U+1F600, D83D DE00) before '\ue000'. Within
    a page the adapter sorts; pages that cross out of order raise StorageUnavailable."""
    for key in ("u/\U0001f600", "u/\ue000"):
        await az.put(key, b"v")
    assert [k async for k in az.list("u/")] == ["u/\ue000", "u/\U0001f600"]
    az.page_size = 1  # type: ignore[misc]
    with pytest.raises(StorageUnavailable, match="code-point order"):
        [k async for k in az.list("u/")]


class _RewrittenAfterEachRead:
    """Between each Get Blob Properties of ``key`` and the delete on its ETag, a second
    client writes ``key`` again (for the first ``times`` reads): the delete's condition
    fails on Azurite itself, each time."""

    def __init__(self, other: AzureBlobStorage, key: str, times: int) -> None:
        self.other, self.key, self.times, self.reads = other, key, times, 0

    def patch(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from azure.storage.blob.aio import BlobClient

        real = BlobClient.get_blob_properties
        hook = self

        async def read_then_rewrite(blob: BlobClient, **kwargs: object) -> object:
            props = await real(blob, **kwargs)
            if blob.blob_name.endswith("/" + hook.key):
                hook.reads += 1
                if hook.reads <= hook.times:
                    await hook.other.put(hook.key, f"write {hook.reads}".encode())
            return props

        monkeypatch.setattr(BlobClient, "get_blob_properties", read_then_rewrite)


async def test_a_delete_of_a_key_written_again_after_each_read_of_its_etag_gives_up_and_keeps_it(
    az: AzureBlobStorage, make_az: Callable[..., AzureBlobStorage], monkeypatch: pytest.MonkeyPatch
) -> None:
    from checkpointkit.adapters.azure import DELETE_ROUNDS

    await az.put("k", b"first")
    async with make_az() as other:
        rewrites = _RewrittenAfterEachRead(other, "k", times=10 * DELETE_ROUNDS)
        rewrites.patch(monkeypatch)
        with pytest.raises(StorageUnavailable, match=r"'k'.*written again.*nothing was deleted"):
            await az.delete("k")
        assert rewrites.reads == DELETE_ROUNDS  # a bound, not a loop without end
        monkeypatch.undo()
        assert (await az.get("k")).data == f"write {DELETE_ROUNDS}".encode()


async def test_a_delete_of_a_key_written_again_after_its_first_reads_deletes_it(
    az: AzureBlobStorage, make_az: Callable[..., AzureBlobStorage], monkeypatch: pytest.MonkeyPatch
) -> None:
    await az.put("k", b"first")
    async with make_az() as other:
        rewrites = _RewrittenAfterEachRead(other, "k", times=2)
        rewrites.patch(monkeypatch)
        assert await az.delete("k") is True
        assert rewrites.reads == 3
        monkeypatch.undo()
        with pytest.raises(NotFound):
            await az.get("k")
