"""The checkpoint store when writes' outcomes are unknown, and its rollback detection.

Over :class:`LateLanding` and :class:`LateReply` with ``unknown_rate=1``, the
first attempt of *every* write raises ``OutcomeUnknown`` (having landed, landing
later, or never landing): the store must reconcile each one by reading back,
and end with exactly what a clean run stores.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable

import pytest
from checkpointkit import CheckpointCorrupted, PreconditionFailed
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.conformance.late import LateLanding, LateReply
from checkpointkit.conformance.styles import StorageWrapper
from checkpointkit.storage import PutMode, Storage
from checkpointkit.store import CheckpointStore, StepRecord

KINDS = ["late-landing", "late-reply"]


def unknown(kind: str, inner: Storage, seed: int = 7) -> Storage:
    if kind == "late-landing":
        return LateLanding(inner, seed=seed, max_delay=0.02, unknown_rate=1.0)
    return LateReply(inner, seed=seed, max_delay=0.0, unknown_rate=1.0)


@pytest.fixture(params=KINDS)
async def store(request: pytest.FixtureRequest) -> AsyncIterator[CheckpointStore]:
    async with unknown(request.param, MemoryStorage()) as storage:
        yield CheckpointStore(storage, namespace="app")


async def test_every_write_reconciles_when_every_first_attempt_is_unknown(
    store: CheckpointStore,
) -> None:
    assert await store.create_run("r", {"x": 1})
    lease = await store.acquire("r", owner="w1")
    data = store.encode_step(
        StepRecord("s@0", "S", fingerprint="f", seq=1, epoch=lease.epoch), run_id="r"
    )
    assert await store.save_step("r", "s@0", data, lease=lease)
    assert await store.save_response("r", "q", "yes")
    for i in range(3):
        _, renewed = await store.save_checkpoint("r", status="paused", state={"i": i}, lease=lease)
        assert renewed is not None
        lease = renewed
    lease = await store.renew(lease)
    await store.release(lease)
    await store.storage.settle()  # type: ignore[attr-defined]
    latest = await store.latest("r")
    assert latest is not None and latest.checkpoint_id == "3" and latest.state == {"i": 2}
    assert await store.list_checkpoints("r") == ["3", "2", "1"]
    assert (await store.load_steps("r"))["s@0"].result == "S"
    assert await store.load_responses("r") == {"q": "yes"}
    assert await store.list_runs() == ["r"]
    info = await store.run_info("r")
    assert info is not None and info.status == "paused" and not info.live
    assert not await store.create_run("r", {"x": 2})  # a different input: the run exists


async def test_create_only_conflict_with_other_content_is_not_adopted() -> None:
    async with MemoryStorage() as storage:
        store = CheckpointStore(storage)
        mine = store.encode_step(StepRecord("s@0", 1, fingerprint="f", seq=1), run_id="r")
        other_args = store.encode_step(StepRecord("s@0", 1, fingerprint="g", seq=1), run_id="r")
        same_args = store.encode_step(
            StepRecord("s@0", 2, fingerprint="f", seq=3, epoch=2), run_id="r"
        )
        assert await store.save_step("r", "s@0", mine)
        assert not await store.save_step("r", "s@0", same_args)  # adopted: an earlier owner's
        with pytest.raises(PreconditionFailed, match="other arguments"):
            await store.save_step("r", "s@0", other_args)
        assert (await store.load_steps("r"))["s@0"].result == 1  # nothing was overwritten


async def two_checkpoints(storage: Storage) -> CheckpointStore:
    store = CheckpointStore(storage)
    await store.create_run("r", None)
    lease = await store.acquire("r")
    _, lease2 = await store.save_checkpoint("r", status="paused", state={"v": 1}, lease=lease)
    assert lease2 is not None
    await store.save_checkpoint("r", status="completed", state={"v": 2}, lease=lease2)
    return store


async def test_latest_refuses_a_checkpoint_rolled_back_to_older_bytes() -> None:
    async with MemoryStorage() as storage:
        store = await two_checkpoints(storage)
        newest, older = [f"runs/r/c/{k}" async for k in _checkpoint_suffixes(storage)]
        old_bytes, _ = await storage.get(older)
        await storage.put(newest, old_bytes)  # an attacker with write access rolls it back
        # Refused by the key binding (the older bytes were written for another key).
        with pytest.raises(CheckpointCorrupted, match=r"rolled back|does not belong"):
            await store.latest("r")


async def _checkpoint_suffixes(storage: Storage) -> AsyncIterator[str]:
    async for key in storage.list("runs/r/c/"):
        yield key.rsplit("/", 1)[1]


class HoldCheckpoint(StorageWrapper):
    """Holds the put of checkpoint records until released: the head has moved, the record
    is not there yet."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.held = asyncio.Event()
        self.go = asyncio.Event()

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        if "/c/" in key and self.armed:
            self.held.set()
            await self.go.wait()
        return await self.inner.put(key, data, mode=mode)

    armed = False


async def test_latest_between_head_move_and_record_returns_the_verified_previous() -> None:
    async with MemoryStorage() as storage:
        hold = HoldCheckpoint(storage)
        store = CheckpointStore(hold)
        await store.create_run("r", None)
        lease = await store.acquire("r")
        _, lease = await store.save_checkpoint("r", status="paused", state={"v": 1}, lease=lease)
        assert lease is not None
        hold.armed = True
        saving = asyncio.create_task(
            store.save_checkpoint("r", status="completed", state={"v": 2}, lease=lease)
        )
        await hold.held.wait()
        during = await CheckpointStore(storage).latest("r")
        assert during is not None and during.checkpoint_id == "1"  # verified by the head
        hold.go.set()
        await saving
        after = await CheckpointStore(storage).latest("r")
        assert after is not None and after.checkpoint_id == "2"


async def test_prune_to_zero_keeps_the_runs_status_readable() -> None:
    async with MemoryStorage() as storage:
        store = await two_checkpoints(storage)
        assert await store.prune("r", keep_last=0) == 2
        assert await store.latest("r") is None
        info = await store.run_info("r")
        assert info is not None and info.status == "completed" and info.checkpoint == 2
        assert await store.list_runs() == ["r"]


class CountsBatches(StorageWrapper):
    def __init__(self, inner: MemoryStorage) -> None:
        super().__init__(inner)
        self.batches: list[int] = []
        self.single_deletes = 0

    async def delete(self, key: str, *, if_match: str | None = None) -> bool:
        self.single_deletes += 1
        return await super().delete(key, if_match=if_match)

    async def delete_many(self, keys: Iterable[str]) -> int:
        batch = list(keys)
        self.batches.append(len(batch))
        return await self.inner.delete_many(batch)  # type: ignore[attr-defined, no-any-return]


async def test_prune_and_delete_run_delete_in_batches() -> None:
    counting = CountsBatches(MemoryStorage())
    store = CheckpointStore(counting)
    await store.create_run("r", None)
    for _ in range(5):
        await store.save_checkpoint("r", status="paused")
    assert await store.prune("r", keep_last=2) == 3
    assert counting.batches == [3] and counting.single_deletes == 0
    assert await store.list_checkpoints("r") == ["5", "4"]
    deleted = await store.delete_run("r")
    assert deleted == 5  # one batch: input, head, two checkpoints; then the index entry
    assert counting.batches == [3, 4] and counting.single_deletes == 1
