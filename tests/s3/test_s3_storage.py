"""The storage promises of DESIGN.md, kept by the S3 adapter against a real (moto) S3 server."""

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
    open_storage,
)
from checkpointkit.adapters.s3 import S3Storage
from checkpointkit.conformance.hygiene import hygiene
from checkpointkit.conformance.servers.s3 import storage_options

MiB = 1024 * 1024
BIG = 6 * MiB + 123  # above the tests' 1 MiB multipart threshold: two parts of 5 MiB and 1 MiB


def test_s3_storage_is_a_storage() -> None:
    storage: Storage = S3Storage("bucket")  # type-checked: the class satisfies the protocol
    assert isinstance(storage, Storage)


@pytest.mark.parametrize("size", [0, 1, 1000, MiB, BIG], ids=["0B", "1B", "1kB", "1MiB", "6MiB"])
async def test_round_trip_keeps_bytes_and_version(s3: S3Storage, size: int) -> None:
    data = os.urandom(size)
    version = await s3.put("runs/r1/data", data)
    got = await s3.get("runs/r1/data")
    assert got.data == data
    assert got.version == version


async def test_large_value_is_sent_as_multipart_upload(s3: S3Storage) -> None:
    version = await s3.put("big", os.urandom(BIG))
    assert version.strip('"').endswith("-2")  # S3's ETag of a two-part upload


async def test_get_missing_key_raises_not_found(s3: S3Storage) -> None:
    with pytest.raises(NotFound, match="'nope/x'"):
        await s3.get("nope/x")


@pytest.mark.parametrize("size", [10, BIG], ids=["single", "large"])
async def test_create_only_rejects_existing_key(s3: S3Storage, size: int) -> None:
    first = await s3.put("k", os.urandom(size), mode="create")
    with pytest.raises(PreconditionFailed, match="'k'"):
        await s3.put("k", os.urandom(size), mode="create")
    assert (await s3.get("k")).version == first


class _SmallConditionalPuts(S3Storage):
    conditional_put_max = MiB  # so that BIG takes the multipart path with its condition


async def test_a_large_conditional_put_is_one_put_object(s3: S3Storage) -> None:
    # a conditional CompleteMultipartUpload is not atomic on every server: see
    # S3Storage.conditional_put_max
    first = await s3.put("k", os.urandom(BIG), mode="create")
    second = await s3.put("k", os.urandom(BIG), mode=IfMatch(first))
    assert not first.strip('"').endswith("-2") and not second.strip('"').endswith("-2")


async def test_a_create_only_put_above_conditional_put_max_is_multipart_with_its_condition(
    make_s3: Callable[..., S3Storage],
) -> None:
    async with make_s3(_SmallConditionalPuts) as s3:
        first = await s3.put("k", os.urandom(BIG), mode="create")
        assert first.strip('"').endswith("-2")  # two parts
        with pytest.raises(PreconditionFailed, match="'k'"):
            await s3.put("k", os.urandom(BIG), mode="create")
        assert (await s3.get("k")).version == first


async def test_if_match_replaces_the_matching_version(s3: S3Storage) -> None:
    v1 = await s3.put("k", b"one")
    v2 = await s3.put("k", b"two", mode=IfMatch(v1))
    assert v2 != v1
    assert await s3.get("k") == (b"two", v2)


@pytest.mark.parametrize("size", [10, BIG], ids=["single", "large"])
async def test_if_match_rejects_another_version(s3: S3Storage, size: int) -> None:
    v1 = await s3.put("k", b"one")
    v2 = await s3.put("k", b"two")
    with pytest.raises(PreconditionFailed, match="'k'"):
        await s3.put("k", os.urandom(size), mode=IfMatch(v1))
    assert await s3.get("k") == (b"two", v2)


async def test_if_match_on_missing_key_fails(s3: S3Storage) -> None:
    v1 = await s3.put("k", b"one")
    with pytest.raises(PreconditionFailed, match="'other'"):
        await s3.put("other", b"x", mode=IfMatch(v1))
    with pytest.raises(NotFound):
        await s3.get("other")


async def test_if_match_put_tells_a_missing_key_from_another_version(s3: S3Storage) -> None:
    # AWS answers 404 to an if-match put of a missing key, SeaweedFS 412: the same error,
    # and the HEAD that follows any failed condition says which it was
    v1 = await s3.put("k", b"one")
    await s3.put("k", b"two")
    with pytest.raises(PreconditionFailed, match="'gone' does not exist") as missing:
        await s3.put("gone", b"x", mode=IfMatch(v1))
    assert isinstance(missing.value.__cause__, PreconditionFailed | NotFound)
    with pytest.raises(PreconditionFailed, match="'k'") as stale:
        await s3.put("k", b"x", mode=IfMatch(v1))
    assert "does not exist" not in str(stale.value)


async def test_delete_if_match_of_a_missing_key_returns_false(s3: S3Storage) -> None:
    # AWS answers 404 to a conditional delete of a missing key, SeaweedFS 412: both "did not exist"
    version = await s3.put("k", b"one")
    assert await s3.delete("k", if_match=version) is True
    assert await s3.delete("k", if_match=version) is False
    assert await s3.delete("never", if_match=version) is False


async def test_if_match_above_threshold_replaces_the_matching_version(s3: S3Storage) -> None:
    v1 = await s3.put("k", b"small")
    data = os.urandom(BIG)
    v2 = await s3.put("k", data, mode=IfMatch(v1))
    assert await s3.get("k") == (data, v2)


async def test_version_changes_on_overwrite_and_on_recreate(s3: S3Storage) -> None:
    v1 = await s3.put("k", b"one")
    v2 = await s3.put("k", b"two")
    assert v2 != v1
    assert await s3.delete("k")
    v3 = await s3.put("k", b"three", mode="create")
    assert len({v1, v2, v3}) == 3


async def test_version_changes_even_for_identical_bytes(s3: S3Storage) -> None:
    v1 = await s3.put("k", b"same")
    v2 = await s3.put("k", b"same")
    assert await s3.delete("k")
    v3 = await s3.put("k", b"same")
    assert len({v1, v2, v3}) == 3
    with pytest.raises(PreconditionFailed):
        await s3.put("k", b"late", mode=IfMatch(v1))  # a stale version never matches again


async def test_object_holds_a_header_then_the_value(s3: S3Storage, s3_prefix: str) -> None:
    await s3.put("k", b"value")
    resp = await s3.client.get_object(Bucket=s3.bucket, Key=f"{s3_prefix}/k")
    raw = await resp["Body"].read()
    assert raw[:4] == b"ckv1"
    assert len(raw) == 16 + len(b"value")
    assert raw[16:] == b"value"


async def test_object_written_by_another_tool_is_read_as_it_is(
    s3: S3Storage, s3_prefix: str
) -> None:
    assert [k async for k in s3.list()] == []  # opens the client
    await s3.client.put_object(Bucket=s3.bucket, Key=f"{s3_prefix}/foreign", Body=b"plain")
    assert (await s3.get("foreign")).data == b"plain"


async def test_delete_reports_whether_the_key_existed(s3: S3Storage) -> None:
    await s3.put("k", b"x")
    assert await s3.delete("k") is True
    assert await s3.delete("k") is False
    with pytest.raises(NotFound):
        await s3.get("k")


async def test_delete_if_match(s3: S3Storage) -> None:
    v1 = await s3.put("k", b"one")
    v2 = await s3.put("k", b"two")
    with pytest.raises(PreconditionFailed, match="'k'"):
        await s3.delete("k", if_match=v1)
    assert (await s3.get("k")).version == v2
    assert await s3.delete("k", if_match=v2) is True
    assert await s3.delete("k", if_match=v2) is False


async def test_list_is_ordered_and_pages_across_requests(s3: S3Storage) -> None:
    keys = [f"runs/r/{i:03d}" for i in range(8)] + ["runs/r/a", "runs/r/é", "runs/r/中"]
    await asyncio.gather(*(s3.put(k, b"v") for k in reversed(keys)))
    listed = [k async for k in s3.list("runs/r/")]  # page_size is 3: four requests
    assert listed == sorted(keys)


async def test_list_start_after_and_limit(s3: S3Storage) -> None:
    keys = [f"p/{i}" for i in range(7)]
    await asyncio.gather(*(s3.put(k, b"v") for k in keys))
    assert [k async for k in s3.list("p/", start_after="p/2")] == keys[3:]
    assert [k async for k in s3.list("p/", start_after="p/2", limit=2)] == keys[3:5]
    assert [k async for k in s3.list("p/", limit=4)] == keys[:4]
    assert [k async for k in s3.list("p/", limit=0)] == []
    assert [k async for k in s3.list("p/", start_after="p/6")] == []
    assert [k async for k in s3.list("p/", start_after="a")] == keys


async def test_list_never_leaves_the_prefix(
    s3: S3Storage, make_s3: Callable[..., S3Storage], s3_prefix: str
) -> None:
    # one at a time: SeaweedFS loses "a" in about 2% of rounds where "a/b" is written at once
    # (docs/adapters/s3.md, "PutObject of k and of k/x at once"; object_names=flat avoids it)
    for k in ["a", "a/b", "a/c", "ab", "b/a"]:
        await s3.put(k, b"v")
    assert [k async for k in s3.list("a/")] == ["a/b", "a/c"]
    assert [k async for k in s3.list("a")] == ["a", "a/b", "a/c", "ab"]
    # a storage on a sibling prefix sees none of these keys
    async with make_s3(prefix=s3_prefix + "x") as sibling:
        await sibling.put("a/z", b"v")
        assert [k async for k in sibling.list()] == ["a/z"]
    assert [k async for k in s3.list()] == ["a", "a/b", "a/c", "ab", "b/a"]


async def test_keys_map_one_to_one_to_object_names(s3: S3Storage, s3_prefix: str) -> None:
    odd = ["sp ace", "q?m", "h#sh", "pct%41", "plus+", "amp&", "uni/é中😀", "dot.", "a/.hidden"]
    for k in odd:
        await s3.put(k, k.encode())
    for k in odd:
        assert (await s3.get(k)).data == k.encode()
    assert [k async for k in s3.list()] == sorted(odd)
    resp = await s3.client.list_objects_v2(Bucket=s3.bucket, Prefix=f"{s3_prefix}/")
    assert sorted(o["Key"] for o in resp["Contents"]) == sorted(f"{s3_prefix}/{k}" for k in odd)


async def test_a_key_longer_than_max_key_bytes_is_refused_before_any_request(
    make_s3: Callable[..., S3Storage],
) -> None:
    """SeaweedFS holds at most 255 bytes in a name segment: ``max_key_bytes=255`` says so,
    counted on the object name (``object_names="flat"`` writes ``/`` as two bytes)."""
    async with make_s3(object_names="flat", max_key_bytes=255) as s3:
        assert s3.holds_key("l" * 255) and not s3.holds_key("l" * 256)
        assert s3.holds_key("d/" * 84 + "d") and not s3.holds_key("d/" * 85 + "d")
        for key in ("l" * 256, "d/" * 85 + "d"):
            with pytest.raises(InvalidKey, match="max_key_bytes=255"):
                await s3.put(key, b"x")
            with pytest.raises(InvalidKey, match="max_key_bytes=255"):
                await s3.get(key)
        assert s3.client is None  # refused before the client was even opened
        await s3.put("l" * 255, b"fits")
        assert (await s3.get("l" * 255)).data == b"fits"


async def test_a_prefix_takes_its_bytes_from_the_longest_key(
    make_s3: Callable[..., S3Storage],
) -> None:
    async with make_s3() as s3:
        room = 1024 - len(f"{s3.prefix}/".encode())
        assert s3.holds_key("l" * room) and not s3.holds_key("l" * (room + 1))
        with pytest.raises(InvalidKey, match="too long for S3"):
            await s3.put("l" * (room + 1), b"x")


@pytest.mark.parametrize("key", ["", "../x", "a/../b", "a//b", "/a", "a/", "a\\b", "a\x00b"])
async def test_bad_keys_are_rejected_before_any_request(s3: S3Storage, key: str) -> None:
    with pytest.raises(InvalidKey):
        await s3.put(key, b"x")
    with pytest.raises(InvalidKey):
        await s3.get(key)
    with pytest.raises(InvalidKey):
        await s3.delete(key)
    assert s3.client is None  # rejected before the client was even opened


async def test_too_long_object_name_is_an_invalid_key(make_s3: Callable[..., S3Storage]) -> None:
    async with make_s3(prefix="p" * 100) as storage:
        with pytest.raises(InvalidKey, match="too long"):
            await storage.put("k" * 1000, b"x")


async def test_use_after_close_raises_storage_closed(make_s3: Callable[..., S3Storage]) -> None:
    storage = make_s3()
    async with storage:
        await storage.put("k", b"x")
    await storage.aclose()  # idempotent
    with pytest.raises(StorageClosed):
        await storage.get("k")
    with pytest.raises(StorageClosed):
        await storage.put("k", b"x")
    with pytest.raises(StorageClosed):
        storage.list()


async def test_close_leaves_no_session_socket_or_task(make_s3: Callable[..., S3Storage]) -> None:
    async with hygiene(), make_s3() as storage:
        await storage.put("k", os.urandom(BIG))
        await storage.get("k")
        assert [k async for k in storage.list()] == ["k"]


async def test_concurrent_create_only_has_exactly_one_winner(s3: S3Storage) -> None:
    async def attempt(i: int) -> tuple[int, str] | None:
        try:
            return i, await s3.put("lease", f"writer {i}".encode(), mode="create")
        except PreconditionFailed:
            return None

    results = await asyncio.gather(*(attempt(i) for i in range(12)))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    i, version = winners[0]
    assert await s3.get("lease") == (f"writer {i}".encode(), version)


async def test_cas_counter_loses_no_increment(s3: S3Storage) -> None:
    await s3.put("counter", b"0")

    async def worker(n: int) -> int:
        conflicts = 0
        for _ in range(n):
            while True:
                data, version = await s3.get("counter")
                try:
                    await s3.put("counter", str(int(data) + 1).encode(), mode=IfMatch(version))
                    break
                except PreconditionFailed:
                    conflicts += 1
        return conflicts

    await asyncio.gather(*(worker(4) for _ in range(3)))
    assert (await s3.get("counter")).data == b"12"


async def test_open_storage_url_reaches_the_bucket(
    s3_endpoint: str, s3_bucket: str, s3_prefix: str
) -> None:
    opts = storage_options(s3_endpoint)
    url = f"s3://{s3_bucket}/{s3_prefix}?endpoint_url={s3_endpoint}&region={opts['region']}"
    async with open_storage(
        url,
        access_key_id=opts["access_key_id"],
        secret_access_key=opts["secret_access_key"],
    ) as storage:
        assert isinstance(storage, S3Storage)
        assert storage.prefix == s3_prefix
        await storage.put("via/url", b"x")
        assert (await storage.get("via/url")).data == b"x"


async def test_create_true_creates_a_missing_bucket(
    s3_endpoint: str, make_s3: Callable[..., S3Storage]
) -> None:
    from checkpointkit.conformance.servers.s3 import unique_bucket_name

    async with make_s3(bucket=unique_bucket_name("ckk-new"), create=True) as storage:
        await storage.put("k", b"x")
        assert (await storage.get("k")).data == b"x"
    async with make_s3(bucket=storage.bucket, create=True) as again:  # exists: fine
        assert (await again.get("k")).data == b"x"
