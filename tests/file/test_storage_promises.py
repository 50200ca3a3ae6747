"""The storage protocol's promises, checked on the memory adapter and the file adapter."""

from __future__ import annotations

import asyncio
import contextlib
import random

import pytest
from checkpointkit import (
    IfMatch,
    InvalidKey,
    NotFound,
    PreconditionFailed,
    StorageClosed,
    validate_key,
    validate_prefix,
)
from checkpointkit.storage import StorageBase


async def keys_of(s: StorageBase, prefix: str = "", **kw: object) -> list[str]:
    return [k async for k in s.list(prefix, **kw)]  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [0, 1, 16 * 1024 * 1024])
async def test_put_get_round_trips_bytes(storage: StorageBase, size: int) -> None:
    data = random.Random(size).randbytes(size)
    version = await storage.put("runs/r1/blob", data)
    got = await storage.get("runs/r1/blob")
    assert got.data == data
    assert got.version == version


async def test_put_accepts_bytearray_and_memoryview(storage: StorageBase) -> None:
    await storage.put("a", bytearray(b"xy"))
    await storage.put("b", memoryview(b"zw"))
    assert (await storage.get("a")).data == b"xy"
    assert (await storage.get("b")).data == b"zw"


async def test_put_rejects_non_bytes_data(storage: StorageBase) -> None:
    with pytest.raises(TypeError, match="'k'"):
        await storage.put("k", "text")  # type: ignore[arg-type]
    with pytest.raises(NotFound):
        await storage.get("k")


async def test_create_only_rejects_existing_key(storage: StorageBase) -> None:
    v1 = await storage.put("k", b"first", mode="create")
    with pytest.raises(PreconditionFailed, match="'k'"):
        await storage.put("k", b"second", mode="create")
    assert await storage.get("k") == (b"first", v1)


async def test_if_match_replaces_the_matching_version(storage: StorageBase) -> None:
    v1 = await storage.put("k", b"one")
    v2 = await storage.put("k", b"two", mode=IfMatch(v1))
    assert v2 != v1
    assert await storage.get("k") == (b"two", v2)


async def test_if_match_rejects_another_version(storage: StorageBase) -> None:
    v1 = await storage.put("k", b"one")
    v2 = await storage.put("k", b"two")
    with pytest.raises(PreconditionFailed, match="'k'"):
        await storage.put("k", b"three", mode=IfMatch(v1))
    with pytest.raises(PreconditionFailed):
        await storage.put("k", b"three", mode=IfMatch("not-a-version"))
    assert await storage.get("k") == (b"two", v2)


async def test_if_match_rejects_a_missing_key(storage: StorageBase) -> None:
    v1 = await storage.put("k", b"one")
    await storage.delete("k")
    with pytest.raises(PreconditionFailed, match="'k'"):
        await storage.put("k", b"two", mode=IfMatch(v1))
    with pytest.raises(NotFound):
        await storage.get("k")


async def test_versions_change_on_every_write_including_recreate(storage: StorageBase) -> None:
    seen = [await storage.put("k", b"same")]
    seen.append(await storage.put("k", b"same"))
    seen.append(await storage.put("k", b"same", mode=IfMatch(seen[-1])))
    assert await storage.delete("k")
    seen.append(await storage.put("k", b"same", mode="create"))
    assert await storage.delete("k", if_match=seen[-1])
    seen.append(await storage.put("k", b"same"))
    assert len(set(seen)) == len(seen)
    assert (await storage.get("k")).version == seen[-1]


async def test_stale_version_never_matches_after_recreate(storage: StorageBase) -> None:
    old = await storage.put("k", b"v")
    await storage.delete("k")
    await storage.put("k", b"v", mode="create")
    with pytest.raises(PreconditionFailed):
        await storage.put("k", b"w", mode=IfMatch(old))
    with pytest.raises(PreconditionFailed):
        await storage.delete("k", if_match=old)


async def test_delete_returns_whether_the_key_existed(storage: StorageBase) -> None:
    await storage.put("a/b", b"x")
    assert await storage.delete("a/b") is True
    assert await storage.delete("a/b") is False
    assert await storage.delete("never/was") is False
    with pytest.raises(NotFound, match="'a/b'"):
        await storage.get("a/b")


async def test_delete_if_match(storage: StorageBase) -> None:
    v1 = await storage.put("k", b"one")
    v2 = await storage.put("k", b"two")
    with pytest.raises(PreconditionFailed, match="'k'"):
        await storage.delete("k", if_match=v1)
    assert await storage.get("k") == (b"two", v2)
    assert await storage.delete("k", if_match=v2) is True
    assert await storage.delete("k", if_match=v2) is False


async def test_get_missing_key_raises_not_found_naming_it(storage: StorageBase) -> None:
    with pytest.raises(NotFound, match="'runs/none'"):
        await storage.get("runs/none")
    await storage.put("runs/x/y", b"1")
    with pytest.raises(NotFound):
        await storage.get("runs/x")  # a "directory" is not a key
    with pytest.raises(NotFound):
        await storage.get("runs/x/y/z")


async def test_key_and_its_children_coexist(storage: StorageBase) -> None:
    await storage.put("a", b"1")
    await storage.put("a/b", b"2")
    await storage.put("a/b/c", b"3")
    assert [(await storage.get(k)).data for k in ("a", "a/b", "a/b/c")] == [b"1", b"2", b"3"]
    assert await storage.delete("a/b")
    assert (await storage.get("a/b/c")).data == b"3"
    assert await keys_of(storage) == ["a", "a/b/c"]


ORDER_KEYS = [
    "a",
    "a/b",
    "a/b-x",
    "a/b/c",
    "a/b/c/d",
    "a/b0",
    "a/b~",
    "a-",
    "a0",
    "b",
    "B",
    "x y",
    "x%y",
    "x#y",
    "x@y",
    "é",
    "é/x",
    "日本/語",
    "日本語",
    "z/" + "ü" * 30,
    "~",
    "L" * 90,  # 270 bytes encoded: the file adapter shortens the name
    "L" * 90 + "-",
    "L" * 90 + "/a",
    "é" * 130 + "/" + "L" * 90,
]


async def test_list_returns_keys_in_ascending_order(storage: StorageBase) -> None:
    for k in random.Random(1).sample(ORDER_KEYS, len(ORDER_KEYS)):
        await storage.put(k, k.encode())
    assert await keys_of(storage) == sorted(ORDER_KEYS)
    assert await keys_of(storage, "a/") == ["a/b", "a/b-x", "a/b/c", "a/b/c/d", "a/b0", "a/b~"]


@pytest.mark.parametrize("page_size", [1, 2, 3, 1000])
async def test_list_pages_across_pages(storage: StorageBase, page_size: int) -> None:
    storage.page_size = page_size  # type: ignore[misc]
    for k in ORDER_KEYS:
        await storage.put(k, b"")
    assert await keys_of(storage) == sorted(ORDER_KEYS)
    assert await keys_of(storage, "a/b") == ["a/b", "a/b-x", "a/b/c", "a/b/c/d", "a/b0", "a/b~"]
    assert await keys_of(storage, limit=5) == sorted(ORDER_KEYS)[:5]


async def test_list_start_after_and_limit(storage: StorageBase) -> None:
    storage.page_size = 2  # type: ignore[misc]
    for k in ORDER_KEYS:
        await storage.put(k, b"")
    ordered = sorted(ORDER_KEYS)
    assert await keys_of(storage, start_after="a/b/c") == ordered[ordered.index("a/b/c") + 1 :]
    assert await keys_of(storage, start_after="a/b/") == ordered[ordered.index("a/b/c") :]
    assert await keys_of(storage, start_after="a/b/c/d0") == ordered[ordered.index("a/b0") :]
    assert await keys_of(storage, start_after="") == ordered
    assert await keys_of(storage, start_after="~") == ordered[ordered.index("é") :]
    assert await keys_of(storage, start_after="\U0010ffff") == []
    assert await keys_of(storage, "a/", start_after="a/b-x", limit=2) == ["a/b/c", "a/b/c/d"]
    assert await keys_of(storage, "a/", start_after="0") == await keys_of(storage, "a/")
    assert await keys_of(storage, "a/", start_after="b") == []
    assert await keys_of(storage, limit=0) == []
    with pytest.raises(ValueError, match="limit"):
        storage.list(limit=-1)


async def test_list_never_leaves_the_prefix(storage: StorageBase) -> None:
    for k in ["runs/ab", "runs/ab/1", "runs/abc", "runs/abc/2", "runs/a", "runs/b", "run", "runsx"]:
        await storage.put(k, b"")
    assert await keys_of(storage, "runs/ab") == ["runs/ab", "runs/ab/1", "runs/abc", "runs/abc/2"]
    assert await keys_of(storage, "runs/ab/") == ["runs/ab/1"]
    assert await keys_of(storage, "runs") == [
        "runs/a", "runs/ab", "runs/ab/1", "runs/abc", "runs/abc/2", "runs/b", "runsx",
    ]  # fmt: skip
    assert await keys_of(storage, "runs/zz") == []
    assert await keys_of(storage, "nothing/here/") == []


async def test_list_matches_a_sorted_model_for_random_keys(storage: StorageBase) -> None:
    rng = random.Random(7)
    alphabet = ["a", "b", "-", "0", "é", "~", "%", "#", "@", " ", "/"]
    keys: set[str] = set()
    while len(keys) < 40:
        k = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6)))
        with contextlib.suppress(InvalidKey):
            keys.add(validate_key(k))
    for k in keys:
        await storage.put(k, b"")
    storage.page_size = 3  # type: ignore[misc]
    ordered = sorted(keys)
    probes = sorted({k[:i] for k in keys for i in range(len(k) + 1)})
    for _ in range(80):
        prefix = rng.choice(probes)
        after = rng.choice([None, rng.choice(probes), rng.choice(ordered)])
        limit = rng.choice([None, 1, 2, 5])
        want = [k for k in ordered if k.startswith(prefix) and (after is None or k > after)]
        if limit is not None:
            want = want[:limit]
        try:
            validate_prefix(prefix)
        except InvalidKey:
            continue  # a prefix such as "a//" is refused before any listing
        got = await keys_of(storage, prefix, start_after=after, limit=limit)
        assert got == want, (prefix, after, limit)


BAD_KEYS = [
    "",
    "/abs",
    "trailing/",
    "a//b",
    "..",
    "../escape",
    "a/../../escape",
    "a/./b",
    ".",
    "nul\x00byte",
    "back\\slash",
    "new\nline",
    "x" * 2048,
]


@pytest.mark.parametrize("key", BAD_KEYS)
async def test_bad_keys_are_rejected_and_nothing_is_lost(storage: StorageBase, key: str) -> None:
    v = await storage.put("keep/me", b"safe")
    shown = repr(key)[:40]
    for call in (
        storage.put(key, b"x"),
        storage.put(key, b"x", mode="create"),
        storage.get(key),
        storage.delete(key),
    ):
        with pytest.raises(InvalidKey) as info:
            await call
        assert shown[1:-1][:30] in str(info.value)
    assert await storage.get("keep/me") == (b"safe", v)
    assert await keys_of(storage) == ["keep/me"]


async def test_bad_prefix_is_rejected(storage: StorageBase) -> None:
    with pytest.raises(InvalidKey, match="prefix"):
        storage.list("a//")
    with pytest.raises(InvalidKey):
        storage.list("../")


async def test_use_after_close_raises_storage_closed(storage: StorageBase) -> None:
    await storage.put("k", b"v")
    await storage.aclose()
    await storage.aclose()  # idempotent
    with pytest.raises(StorageClosed):
        await storage.put("k", b"w")
    with pytest.raises(StorageClosed):
        await storage.get("k")
    with pytest.raises(StorageClosed):
        await storage.delete("k")
    with pytest.raises(StorageClosed):
        storage.list()


async def test_listing_started_before_close_stops_with_storage_closed(
    storage: StorageBase,
) -> None:
    storage.page_size = 1  # type: ignore[misc]
    for k in "abc":
        await storage.put(k, b"")
    it = storage.list()
    assert await it.__anext__() == "a"
    await storage.aclose()
    with pytest.raises(StorageClosed):
        await it.__anext__()


async def test_cas_counter_in_concurrent_tasks_is_exact(storage: StorageBase) -> None:
    await storage.put("counter", b"0")

    async def bump(times: int) -> None:
        for _ in range(times):
            while True:
                cur = await storage.get("counter")
                try:
                    await storage.put(
                        "counter", str(int(cur.data) + 1).encode(), mode=IfMatch(cur.version)
                    )
                    break
                except PreconditionFailed:
                    continue

    await asyncio.gather(*(bump(10) for _ in range(6)))
    assert (await storage.get("counter")).data == b"60"


async def test_concurrent_create_has_exactly_one_winner(storage: StorageBase) -> None:
    results = await asyncio.gather(
        *(storage.put("lock", str(i).encode(), mode="create") for i in range(20)),
        return_exceptions=True,
    )
    wins = [(i, r) for i, r in enumerate(results) if isinstance(r, str)]
    assert len(wins) == 1
    assert all(isinstance(r, PreconditionFailed) for r in results if not isinstance(r, str))
    winner, version = wins[0]
    assert await storage.get("lock") == (str(winner).encode(), version)
