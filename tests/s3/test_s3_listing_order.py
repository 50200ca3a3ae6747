"""Listings in ascending byte order, or an error: never a silently misordered listing.

SeaweedFS lists in directory-walk order (``a/-`` before ``a b``) and its
``StartAfter`` skips the keys below a "directory" that it names. The adapter
checks the order of every page it receives, so such a server raises an error
naming the behaviour; ``object_names="flat"`` keeps every object in one
directory, where such a server lists in byte order. Each check runs on both
servers (the real SeaweedFS is the broken server, moto the correct twin) and
against a tampered listing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from checkpointkit import StorageUnavailable
from checkpointkit.adapters.s3 import S3Storage
from hypothesis import given
from hypothesis import strategies as st

WALK_ORDER_KEYS = ["a/-", "a b", "a/b/c", "a/b-", "a.x", "ab"]
"""Keys whose byte order differs from a directory walk's: ``a b`` < ``a.x`` < ``a/-``."""


async def _put_all(storage: S3Storage, keys: list[str]) -> None:
    for key in keys:
        await storage.put(key, key.encode())


async def test_listing_out_of_byte_order_raises_naming_directory_walk_order(
    make_s3: Callable[..., S3Storage], s3_server_name: str
) -> None:
    async with make_s3() as storage:
        await _put_all(storage, WALK_ORDER_KEYS)
        if s3_server_name == "moto":  # the correct twin: lists in byte order, no error
            assert [k async for k in storage.list()] == sorted(WALK_ORDER_KEYS)
            return
        with pytest.raises(StorageUnavailable, match="directory-walk order") as info:
            [k async for k in storage.list()]
        assert "object_names='flat'" in str(info.value)
        with pytest.raises(StorageUnavailable, match="directory-walk order"):
            [k async for k in storage.list("a")]


async def test_flat_object_names_list_in_byte_order_on_every_server(
    make_s3: Callable[..., S3Storage],
) -> None:
    keys = [*WALK_ORDER_KEYS, "a", "a/.-", "a._", "runs/r1/c/00ff", "runs/r1-2/c/00fe", "é/中"]
    async with make_s3(object_names="flat", page_size=2) as storage:
        await _put_all(storage, keys)
        assert [k async for k in storage.list()] == sorted(keys)
        assert [k async for k in storage.list("a")] == sorted(k for k in keys if k[0] == "a")
        assert [k async for k in storage.list("a/")] == ["a/-", "a/.-", "a/b-", "a/b/c"]
        for key in keys:
            assert (await storage.get(key)).data == key.encode()


async def test_flat_start_after_naming_a_directory_keeps_the_keys_below_it(
    make_s3: Callable[..., S3Storage],
) -> None:
    keys = ["a", "a/b", "a/c/d", "b"]
    async with make_s3(object_names="flat") as storage:
        await _put_all(storage, keys)
        assert [k async for k in storage.list(start_after="a")] == ["a/b", "a/c/d", "b"]
        assert [k async for k in storage.list(start_after="a/c")] == ["a/c/d", "b"]


async def test_flat_object_names_keep_every_object_in_the_prefix_directory(
    make_s3: Callable[..., S3Storage], s3_prefix: str
) -> None:
    async with make_s3(object_names="flat") as storage:
        await _put_all(storage, ["runs/r1/c/1", "a.b/c"])
        resp = await storage.client.list_objects_v2(
            Bucket=storage.bucket, Prefix=f"{s3_prefix}/", Delimiter="/"
        )
        assert resp.get("CommonPrefixes", []) == []  # no "directory" below the prefix
        names = sorted(obj["Key"] for obj in resp["Contents"])
        assert names == [f"{s3_prefix}/a.-b._c", f"{s3_prefix}/runs._r1._c._1"]


async def test_keys_and_flat_object_names_do_not_see_each_other(
    make_s3: Callable[..., S3Storage],
) -> None:
    async with make_s3() as plain, make_s3(object_names="flat") as flat:
        await plain.put("d/k", b"plain")
        await flat.put("d/k", b"flat")
        assert (await plain.get("d/k")).data == b"plain"
        assert (await flat.get("d/k")).data == b"flat"


_KEY_CHARS = st.sampled_from(["a", "b", "-", ".", "/", " ", "_", "~", "0", "é", "\x7f", "中"])


@given(st.text(_KEY_CHARS, min_size=1), st.text(_KEY_CHARS, min_size=1))
def test_flat_object_names_keep_the_order_of_keys_one_to_one(a: str, b: str) -> None:
    storage = S3Storage("bucket", object_names="flat")
    ea, eb = storage._encode(a), storage._encode(b)
    assert "/" not in ea
    assert (ea < eb) == (a < b)
    assert (ea == eb) == (a == b)
    assert storage._decode(ea) == a
    assert eb.startswith(ea) == b.startswith(a)  # a prefix listing stays a prefix listing


# -- a tampered listing: the check itself, on either server -----------------------------------


class Tampered(S3Storage):
    """A storage whose ``ListObjectsV2`` answers pass through ``tamper`` (a broken server)."""

    tamper: Callable[[dict[str, Any], int], dict[str, Any]] = staticmethod(lambda r, n: r)
    pages = 0

    async def _call(self, op: str, key: str | None, request: Any, **kw: Any) -> Any:
        resp = await super()._call(op, key, request, **kw)
        if op.startswith("list"):
            self.pages += 1
            resp = self.tamper(resp, self.pages)
        return resp


def _swap_first_two(resp: dict[str, Any], page: int) -> dict[str, Any]:
    contents = resp["Contents"]
    contents[0], contents[1] = contents[1], contents[0]
    return resp


def _prepend(name: str, on_page: int = 1) -> Callable[[dict[str, Any], int], dict[str, Any]]:
    """Insert the object ``name`` at the head of listing page ``on_page``."""

    def tamper(resp: dict[str, Any], page: int) -> dict[str, Any]:
        if page == on_page:
            resp["Contents"].insert(0, {"Key": name})
        return resp

    return tamper


async def test_page_out_of_order_raises(make_s3: Callable[..., S3Storage]) -> None:
    storage = make_s3(Tampered)
    assert isinstance(storage, Tampered)
    storage.tamper = _swap_first_two
    async with storage:
        await _put_all(storage, ["k1", "k2", "k3"])
        with pytest.raises(StorageUnavailable, match=r"'k2' after 'k1'|'k1' after 'k2'"):
            [k async for k in storage.list()]


async def test_key_not_after_start_after_raises(
    make_s3: Callable[..., S3Storage], s3_prefix: str
) -> None:
    storage = make_s3(Tampered)
    assert isinstance(storage, Tampered)
    storage.tamper = _prepend(f"{s3_prefix}/a")  # as if the server ignored StartAfter
    async with storage:
        await _put_all(storage, ["a", "b", "c"])
        with pytest.raises(StorageUnavailable, match="does not come after start_after 'a'"):
            [k async for k in storage.list(start_after="a")]


async def test_page_before_the_previous_pages_last_key_raises(
    make_s3: Callable[..., S3Storage], s3_prefix: str
) -> None:
    storage = make_s3(Tampered, page_size=2)
    assert isinstance(storage, Tampered)
    storage.tamper = _prepend(f"{s3_prefix}/k0", on_page=2)  # the second page starts over
    async with storage:
        await _put_all(storage, ["k1", "k2", "k3", "k4"])
        with pytest.raises(StorageUnavailable, match="does not come after the last key 'k2'"):
            [k async for k in storage.list()]


async def test_key_outside_the_prefix_raises(
    make_s3: Callable[..., S3Storage], s3_prefix: str
) -> None:
    storage = make_s3(Tampered)
    assert isinstance(storage, Tampered)
    storage.tamper = _prepend(f"{s3_prefix}/b/a")
    async with storage:
        await _put_all(storage, ["a/1"])
        with pytest.raises(StorageUnavailable, match="outside the prefix"):
            [k async for k in storage.list("a/")]
