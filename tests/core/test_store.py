"""The checkpoint store: layout, bounded latest, prune, runs, leases and fencing."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from checkpointkit import InvalidKey, LeaseLost, NotFound, RunBusy
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.conformance.styles import StorageWrapper
from checkpointkit.storage import GetResult, PutMode
from checkpointkit.store import CheckpointStore, InputRequest, StepRecord


class Counting(StorageWrapper):
    """Counts backend requests (a listing counts one per page)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.requests = 0

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        self.requests += 1
        return await super().put(key, data, mode=mode)

    async def get(self, key: str) -> GetResult:
        self.requests += 1
        return await super().get(key)

    def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> AsyncIterator[str]:
        self.requests += 1
        return super().list(prefix, start_after=start_after, limit=limit)


@pytest.fixture
async def store() -> AsyncIterator[CheckpointStore]:
    async with MemoryStorage() as storage:
        yield CheckpointStore(storage, namespace="app")


async def test_step_records_are_write_once(store: CheckpointStore) -> None:
    data = store.encode_step(StepRecord("s@0", {"v": 1}, fingerprint="f", seq=1), run_id="r")
    await store.save_step("r", "s@0", data)
    from checkpointkit import PreconditionFailed

    with pytest.raises(PreconditionFailed):
        await store.save_step("r", "s@0", store.encode_step(StepRecord("s@0", 2), run_id="r"))
    records = await store.load_steps("r")
    assert records["s@0"].result == {"v": 1}


async def test_latest_costs_the_same_requests_with_10_or_1000_checkpoints() -> None:
    costs = []
    for n in (10, 1000):
        counting = Counting(MemoryStorage())
        store = CheckpointStore(counting)
        lease = await store.acquire("r")
        for i in range(n):
            _, lease = await store.save_checkpoint(
                "r", status="paused", state={"i": i}, lease=lease
            )
        counting.requests = 0
        latest = await store.latest("r")
        assert latest is not None and latest.state == {"i": n - 1}
        assert latest.checkpoint_id == str(n)
        costs.append(counting.requests)
    assert costs == [2, 2]


async def test_checkpoints_list_newest_first_and_prune_keeps_last(store: CheckpointStore) -> None:
    for i in range(5):
        await store.save_checkpoint("r", status="paused", state={"i": i})
    assert await store.list_checkpoints("r") == ["5", "4", "3", "2", "1"]
    assert await store.prune("r", keep_last=2) == 3
    assert await store.list_checkpoints("r") == ["5", "4"]
    cp = await store.load_checkpoint("r", "4")
    assert cp.state == {"i": 3} and cp.parent_id == "3"
    with pytest.raises(NotFound, match="checkpoint 1 of run 'r'"):
        await store.load_checkpoint("r", "1")
    with pytest.raises(ValueError, match="checkpoint ids are numbers"):
        await store.load_checkpoint("r", "latest")


async def test_checkpoint_round_trips_pending_requests(store: CheckpointStore) -> None:
    pending = (InputRequest("s@0:0", "s@0", {"q": "ok?"}),)
    await store.save_checkpoint("r", status="paused", pending=pending, metadata={"by": "me"})
    latest = await store.latest("r")
    assert latest is not None
    assert latest.pending == pending and latest.metadata == {"by": "me"}


async def test_runs_are_listed_from_the_index_and_deleted_whole(store: CheckpointStore) -> None:
    for run in ("b", "a", "c"):
        assert await store.create_run(run, {"input": run})
    assert not await store.create_run("a", None)
    assert await store.list_runs() == ["a", "b", "c"]
    assert await store.list_runs(start_after="a", limit=1) == ["b"]
    await store.save_checkpoint("b", status="completed")
    assert await store.delete_run("b") >= 3
    assert await store.list_runs() == ["a", "c"]
    assert await store.latest("b") is None
    assert await store.load_input("a") == {"input": "a"}


@pytest.mark.parametrize("bad", ["", "a/b", "..", "x\x00", "a\\b", "r" * 201])
async def test_bad_run_ids_are_rejected(store: CheckpointStore, bad: str) -> None:
    with pytest.raises(InvalidKey, match="invalid run id"):
        await store.create_run(bad, None)


async def test_second_owner_gets_run_busy(store: CheckpointStore) -> None:
    lease = await store.acquire("r", owner="w1")
    with pytest.raises(RunBusy, match="owned by w1"):
        await store.acquire("r", owner="w2")
    await store.release(lease)
    lease2 = await store.acquire("r", owner="w2")
    assert lease2.epoch == lease.epoch + 1


async def test_stale_owner_writes_are_rejected(store: CheckpointStore) -> None:
    stale = await store.acquire("r", owner="w1", ttl=0.05)
    deadline = time.monotonic() + 5
    while time.time() < stale.created_at + 0.06 and time.monotonic() < deadline:
        await _tick()
    fresh = await store.acquire("r", owner="w2", ttl=30)  # the old lease has expired
    assert fresh.epoch == stale.epoch + 1
    with pytest.raises(LeaseLost):  # the local deadline fences step records
        await store.save_step("r", "s@0", b"x", lease=stale)
    # even a stale owner whose clock lies is fenced by the head's compare-and-swap
    lying = type(stale)(**{**_fields(stale), "deadline": time.monotonic() + 60})
    with pytest.raises(LeaseLost):
        await store.save_checkpoint("r", status="paused", lease=lying)
    _, fresh = await store.save_checkpoint("r", status="paused", state={"ok": 1}, lease=fresh)
    latest = await store.latest("r")
    assert latest is not None and latest.state == {"ok": 1}


def _fields(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in obj.__slots__}


async def _tick() -> None:
    import asyncio

    await asyncio.sleep(0.01)
