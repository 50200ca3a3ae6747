"""``delete_many`` on Redis: one pipeline, one script per run (per 500 keys), and the
listing indexes kept right, on standalone and on the 3-node cluster."""

from __future__ import annotations

import asyncio

import pytest
from checkpointkit import InvalidKey, NotFound
from checkpointkit.adapters.redis import DELETE_CHUNK, RedisStorage
from checkpointkit.conformance.hygiene import hygiene
from checkpointkit.storage import delete_many


async def _top_members(storage: RedisStorage) -> list[bytes]:
    return list(await storage.client.zrange(storage._top, 0, -1))


async def test_delete_many_deletes_the_keys_and_counts_those_that_existed(
    storage: RedisStorage,
) -> None:
    async with hygiene():
        await storage.put("runs/a/k1", b"1")
        await storage.put("runs/a/k2", b"2")
        await storage.put("runs/a/keep", b"kept")
        existed = await storage.delete_many(["runs/a/k1", "runs/a/k2", "runs/a/never", "runs/a/k1"])
        assert existed == 2  # a missing key is not counted, a key given twice once
        for key in ("runs/a/k1", "runs/a/k2"):
            with pytest.raises(NotFound):
                await storage.get(key)
        assert (await storage.get("runs/a/keep")).data == b"kept"
        assert [k async for k in storage.list("runs/")] == ["runs/a/keep"]
        assert await storage.delete_many([]) == 0


async def test_delete_many_over_many_runs_and_chunks_empties_every_index(
    storage: RedisStorage,
) -> None:
    """Keys of several runs (several slots, nodes on the cluster), one run with more keys
    than one script takes, big values: all gone, and no run is listed any more."""
    many = [f"runs/big/c/{i:05d}" for i in range(DELETE_CHUNK * 2 + 7)]
    small = [f"runs/r{i}/s/0" for i in range(20)] + ["index/r1", "index/r2"]
    bigs = ["runs/r3/blob", "runs/big/blob"]
    await asyncio.gather(*(storage.put(k, b"v") for k in many + small))
    await asyncio.gather(*(storage.put(k, bytes(200_000)) for k in bigs))  # above inline_max
    assert len(await _top_members(storage)) == 22  # big, r0..r19, index
    everything = many + small + bigs
    assert await delete_many(storage, reversed(everything)) == len(everything)
    assert [k async for k in storage.list()] == []
    assert await _top_members(storage) == []  # every run's registration retired
    client = storage.client
    for key in bigs:  # a big value's own keys went with it
        names = storage._names(storage._scope(key))
        assert await client.exists(names.x + key.encode(), names.v + key.encode()) == 0
    # the runs can be written again (a fresh registration)
    await storage.put("runs/big/c/00000", b"again")
    assert [k async for k in storage.list("runs/")] == ["runs/big/c/00000"]


async def test_delete_many_checks_every_key_before_deleting_any(storage: RedisStorage) -> None:
    await storage.put("runs/a/k", b"v")
    with pytest.raises(InvalidKey):
        await storage.delete_many(["runs/a/k", "runs/../x"])
    assert (await storage.get("runs/a/k")).data == b"v"


async def test_delete_many_keeps_the_ttl_of_what_is_left(redis_url: str, prefix: str) -> None:
    async with RedisStorage.from_url(redis_url, prefix=prefix, ttl=30) as s:
        await s.put("runs/t/a", b"a")
        await s.put("runs/t/b", b"b")
        names = s._names("runs/t")
        await s.client.pexpire(names.h, 5000)  # as if written long ago
        assert await s.delete_many(["runs/t/a"]) == 1
        assert await s.client.pttl(names.h) > 20_000  # refreshed by the delete, like a write
        assert [k async for k in s.list("runs/t/")] == ["runs/t/b"]
