"""``checkpointkit.reconcile.delete_as_read``: delete a key as it was read, never a newer write."""

from __future__ import annotations

from checkpointkit import reconcile
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.conformance.late import LateReply
from checkpointkit.conformance.styles import StorageWrapper
from checkpointkit.storage import GetResult


class RewriteAfterGet(StorageWrapper):
    """Overwrites the key right after each get answers: a writer that got in between."""

    async def get(self, key: str) -> GetResult:
        result = await super().get(key)
        await self.inner.put(key, b"newer")
        return result


async def test_delete_as_read_deletes_an_unchanged_key() -> None:
    async with MemoryStorage() as storage:
        await storage.put("k", b"old")
        await reconcile.delete_as_read(storage, "k")
        assert [key async for key in storage.list()] == []


async def test_delete_as_read_keeps_a_write_made_after_its_read() -> None:
    async with MemoryStorage() as storage:
        await storage.put("k", b"old")
        await reconcile.delete_as_read(RewriteAfterGet(storage), "k")
        assert (await storage.get("k")).data == b"newer"


async def test_delete_as_read_of_a_missing_key_writes_nothing() -> None:
    async with MemoryStorage() as storage:
        await reconcile.delete_as_read(storage, "absent")
        assert [key async for key in storage.list()] == []


async def test_delete_as_read_settles_a_delete_whose_reply_was_lost() -> None:
    async with MemoryStorage() as storage:
        await storage.put("k", b"old")
        lost_replies = LateReply(storage, unknown_rate=1.0, max_delay=0)
        await reconcile.delete_as_read(lost_replies, "k")
        assert [key async for key in storage.list()] == []
