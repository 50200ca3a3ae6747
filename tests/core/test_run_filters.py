"""Runs listed by status, age and metadata, and checkpoints pruned by age.

Time is a fake clock installed in the store module: ages are set exactly, never waited for.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import checkpointkit.store as store_module
import pytest
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.storage import GetResult
from checkpointkit.store import CheckpointStore

DAY = 86400.0


class Clock:
    """Stands in for the ``time`` module inside checkpointkit.store: wall time is set by hand."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0
        self.monotonic = time.monotonic

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(store_module, "time", fake)
    return fake


class CountingStorage(MemoryStorage):
    """The memory adapter, counting gets and listings."""

    def __init__(self) -> None:
        super().__init__()
        self.gets = 0
        self.lists = 0

    async def get(self, key: str) -> GetResult:
        self.gets += 1
        return await super().get(key)

    def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> AsyncIterator[str]:
        self.lists += 1
        return super().list(prefix, start_after=start_after, limit=limit)


async def _run(store: CheckpointStore, run_id: str, status: str | None, **metadata: Any) -> None:
    """A run whose newest checkpoint has ``status`` (None: created, no checkpoint)."""
    await store.create_run(run_id, None)
    if status is not None:
        await store.save_checkpoint(run_id, status=status, metadata=metadata)


async def test_list_runs_filters_by_status_from_the_run_head(clock: Clock) -> None:
    async with MemoryStorage() as storage:
        store = CheckpointStore(storage)
        await _run(store, "a-done", "completed")
        await _run(store, "b-failed", "failed")
        await _run(store, "c-paused", "paused")
        await _run(store, "d-created", None)
        await _run(store, "e-running", None)
        await store.acquire("e-running", ttl=60)
        assert await store.list_runs(status="failed") == ["b-failed"]
        assert await store.list_runs(status={"completed", "paused"}) == ["a-done", "c-paused"]
        assert await store.list_runs(status="created") == ["d-created"]
        assert await store.list_runs(status=["running"]) == ["e-running"]
        assert await store.list_runs(status="failed", start_after="b-failed") == []
        assert len(await store.list_runs()) == 5  # no filter: every run


async def test_list_runs_older_than_uses_the_newest_checkpoint_time(clock: Clock) -> None:
    async with MemoryStorage() as storage:
        store = CheckpointStore(storage)
        await _run(store, "old", "completed")
        await _run(store, "renewed", "paused")
        clock.now += 10 * DAY
        await store.save_checkpoint("renewed", status="completed")  # its newest is recent
        await _run(store, "new", "completed")
        await _run(store, "no-checkpoint", None)  # no age: never older than anything
        clock.now += 1 * DAY
        assert await store.list_runs(older_than=7 * DAY) == ["old"]
        assert await store.list_runs(older_than=timedelta(hours=1)) == ["new", "old", "renewed"]
        assert await store.list_runs(older_than=20 * DAY) == []
        assert await store.list_runs(older_than=7 * DAY, status="failed") == []


async def test_list_runs_filters_by_the_newest_checkpoints_metadata(clock: Clock) -> None:
    async with MemoryStorage() as storage:
        store = CheckpointStore(storage)
        await _run(store, "a", "completed", team="search", tier=1)
        await _run(store, "b", "completed", team="search", tier=2)
        await _run(store, "c", "completed", team="ads")
        await _run(store, "d", None)
        await _run(store, "e", "paused", team="search")
        await store.save_checkpoint("e", status="completed")  # the newest has no metadata
        assert await store.list_runs(metadata={"team": "search"}) == ["a", "b"]
        assert await store.list_runs(metadata={"team": "search", "tier": 2}) == ["b"]
        assert await store.list_runs(metadata={"team": "search", "tier": "2"}) == []
        assert await store.list_runs(metadata={"owner": "x"}) == []


async def test_metadata_filter_reads_the_checkpoint_for_a_head_written_before_meta(
    clock: Clock,
) -> None:
    async with MemoryStorage() as storage:
        store = CheckpointStore(storage)
        await _run(store, "legacy", "completed", team="search")
        head, version = await store._read_head("legacy")  # as an older checkpointkit wrote it
        await store._write_head("legacy", {k: v for k, v in head.items() if k != "meta"}, version)
        assert await store.list_runs(metadata={"team": "search"}) == ["legacy"]


async def test_filtered_listing_costs_one_listing_and_one_get_per_run(clock: Clock) -> None:
    async with CountingStorage() as storage:
        store = CheckpointStore(storage)
        for i in range(40):
            await _run(store, f"run-{i:02}", "failed" if i % 4 == 0 else "completed", n=i)
        clock.now += 1
        storage.gets = storage.lists = 0
        found = await store.list_runs(status="failed", older_than=0, metadata={"n": 8})
        assert found == ["run-08"]
        assert (storage.lists, storage.gets) == (1, 40)
        storage.gets = storage.lists = 0
        first = await store.list_runs(status="completed", limit=2, concurrency=4)
        assert first == ["run-01", "run-02"]
        assert storage.lists == 1 and storage.gets == 4  # stopped after the first batch


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({"status": []}, "at least one status"),
        ({"status": 3}, "status must be a str or a collection of str"),
        ({"older_than": -1}, "non-negative"),
        ({"older_than": "1h"}, "older_than must be seconds"),
        ({"older_than": True}, "older_than must be seconds"),
        ({"metadata": [("a", 1)]}, "metadata must be a mapping"),
        ({"status": "failed", "concurrency": 0}, "concurrency must be an int >= 1"),
    ],
)
async def test_bad_filters_are_refused_naming_what_was_wrong(
    filters: dict[str, Any], message: str
) -> None:
    async with MemoryStorage() as storage:
        store = CheckpointStore(storage)
        await _run(store, "a", "completed")
        with pytest.raises(ValueError, match=message):
            await store.list_runs(**filters)


async def _aged_run(store: CheckpointStore, clock: Clock, run_id: str, n: int) -> None:
    """A run with ``n`` checkpoints, one a day: checkpoint k is ``n - k`` days old."""
    await store.create_run(run_id, None)
    for k in range(1, n + 1):
        await store.save_checkpoint(run_id, status="completed" if k == n else "paused")
        clock.now += DAY


async def test_prune_older_than_deletes_only_checkpoints_saved_before_the_cutoff(
    clock: Clock,
) -> None:
    async with MemoryStorage() as storage:
        store = CheckpointStore(storage)
        await _aged_run(store, clock, "r", 10)  # ages 10, 9, ..., 1 days
        assert await store.checkpoints_older_than("r", 7.5 * DAY) == ["3", "2", "1"]
        assert await store.prune("r", older_than=timedelta(days=7.5)) == 3
        assert await store.list_checkpoints("r") == [str(k) for k in range(10, 3, -1)]
        assert await store.prune("r", older_than=7.5 * DAY) == 0  # nothing older left
        latest = await store.latest("r")
        assert latest is not None and latest.checkpoint_id == "10"


async def test_prune_older_than_everything_keeps_the_runs_identity_and_status(
    clock: Clock,
) -> None:
    async with MemoryStorage() as storage:
        store = CheckpointStore(storage)
        await _aged_run(store, clock, "r", 3)
        assert await store.prune("r", older_than=0.5 * DAY) == 3
        assert await store.list_checkpoints("r") == []
        assert await store.latest("r") is None
        info = await store.run_info("r")
        assert info is not None and (info.status, info.checkpoint) == ("completed", 3)
        assert await store.list_runs(status="completed") == ["r"]


async def test_finding_the_age_boundary_reads_few_checkpoints(clock: Clock) -> None:
    async with CountingStorage() as storage:
        store = CheckpointStore(storage)
        await _aged_run(store, clock, "r", 64)
        storage.gets = 0
        doomed = await store.checkpoints_older_than("r", 20.5 * DAY)
        assert doomed == [str(k) for k in range(44, 0, -1)]
        assert storage.gets <= 1 + 7  # the head, then a bisection of 64 checkpoints
        storage.gets = 0
        assert len(await store.checkpoints_older_than("r", 0)) == 64
        assert storage.gets == 1  # the head says the newest is old: no checkpoint read


async def test_prune_takes_exactly_one_of_keep_last_and_older_than() -> None:
    async with MemoryStorage() as storage:
        store = CheckpointStore(storage)
        await _run(store, "r", "completed")
        with pytest.raises(ValueError, match="one of keep_last or older_than"):
            await store.prune("r")
        with pytest.raises(ValueError, match="one of keep_last or older_than"):
            await store.prune("r", keep_last=1, older_than=1.0)
        with pytest.raises(ValueError, match="keep_last must be a non-negative int"):
            await store.prune("r", keep_last=-1)
