"""`StorageBase`'s default ``delete_many`` (one ``_delete`` a key), cut off part-way."""

from __future__ import annotations

import asyncio

import pytest
from checkpointkit.errors import NotFound, OutcomeUnknown, StorageClosed
from checkpointkit.storage import GetResult, ListPage, StorageBase


class _OneKeyAtATime(StorageBase):
    """Deletes one key a round trip; a delete that starts after ``aclose()`` refuses, as
    the SQLite example of the docs does. ``between`` is set once the first key is gone."""

    def __init__(self, keys: dict[str, bytes]) -> None:
        self.data = dict(keys)
        self.between = asyncio.Event()
        self.go_on = asyncio.Event()

    async def _delete(self, key: str, if_match: str | None) -> bool:
        if self._closed:
            raise StorageClosed(f"closed (delete {key!r})")
        existed = self.data.pop(key, None) is not None
        self.between.set()
        await self.go_on.wait()
        return existed

    async def _get(self, key: str) -> GetResult:
        raise NotFound(key)

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: object, limit: int
    ) -> ListPage:
        return ListPage([], None)


async def _cut_after_the_first_key(storage: _OneKeyAtATime, keys: list[str]) -> object:
    batch = asyncio.ensure_future(storage.delete_many(keys))
    await storage.between.wait()  # the first key's delete ran
    await storage.aclose()
    storage.go_on.set()
    try:
        return await batch
    except Exception as exc:
        return exc


async def test_a_batch_cut_off_after_deleting_a_key_raises_outcome_unknown() -> None:
    """The first key is deleted, then the storage closes: the batch happened in part,
    so ``StorageClosed`` (not done) would be untrue; it raises ``OutcomeUnknown``."""
    storage = _OneKeyAtATime({"a": b"1", "b": b"2"})
    outcome = await _cut_after_the_first_key(storage, ["a", "b"])
    assert isinstance(outcome, OutcomeUnknown), outcome
    assert isinstance(outcome.__cause__, StorageClosed)
    assert "deleted 1 of its 2 keys" in str(outcome)
    assert sorted(storage.data) == ["b"]


async def test_a_batch_cut_off_having_deleted_nothing_raises_storage_closed() -> None:
    """The first key was missing: nothing changed, and ``StorageClosed`` is true."""
    storage = _OneKeyAtATime({"b": b"2"})
    outcome = await _cut_after_the_first_key(storage, ["a", "b"])
    assert type(outcome) is StorageClosed, outcome
    assert sorted(storage.data) == ["b"]


async def test_a_whole_batch_counts_the_keys_that_existed() -> None:
    storage = _OneKeyAtATime({"a": b"1", "c": b"3"})
    storage.go_on.set()
    assert await storage.delete_many(["a", "b", "c"]) == 2
    with pytest.raises(StorageClosed):
        await storage.aclose() or await storage.delete_many(["a"])
