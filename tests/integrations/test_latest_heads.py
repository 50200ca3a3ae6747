"""The heads that keep the latest checkpoint two gets away, in both integrations.

Each integration keeps one small head record per thread and namespace
(LangGraph) or per workflow (agent-framework), moved forward by
compare-and-swap, on a storage whose listing is dear (no ``indexed_list``).
These tests check the promises: the latest checkpoint is the newest after
concurrent saves that race on the head; it falls back correctly when the
newest checkpoint is deleted, pruned, or its save failed half-way; and threads
or workflows written without a head still work. They test heads on every
backend: the wrappers they use (``Counting``, ``HeadRace``, ``FailingPuts``,
``Inline``) hide ``indexed_list``.

On SQLite and memory (``indexed_list``) no head is kept: the last tests check
that a save there writes no head, and that the latest is still right after
failed and concurrent saves, deletes, prunes and copies, and with heads left
by a saver that kept them.
"""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from checkpointkit import PreconditionFailed, PutMode, StorageUnavailable
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.conformance.styles import Inline, StorageWrapper
from checkpointkit.integrations.agent_framework import CheckpointkitCheckpointStorage
from checkpointkit.integrations.langgraph import CheckpointkitSaver
from langgraph.checkpoint.base import empty_checkpoint

from .conftest import Location, make_location
from .test_agent_framework import _checkpoint as af_checkpoint
from .test_langgraph_saver import Counting

pytestmark = pytest.mark.filterwarnings(
    "ignore::agent_framework._feature_stage.ExperimentalWarning"
)


class HeadRace(Counting):
    """Holds the first head writes until ``barrier.parties`` of them are waiting.

    Every save has then read the head before any of them writes it, so all
    but one compare-and-swap fail and must retry: the worst case for the head.
    The storages of one race share ``barrier`` and ``held`` (a one-item list).
    """

    def __init__(self, inner: Any, barrier: asyncio.Barrier, held: list[int], marker: str) -> None:
        super().__init__(inner)
        self.barrier = barrier
        self.held = held
        self.marker = marker
        self.lost = 0  # head writes that lost the race (PreconditionFailed)

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        if self.marker not in key:
            return await super().put(key, data, mode=mode)
        if self.held[0] < self.barrier.parties:
            self.held[0] += 1
            await self.barrier.wait()
        try:
            return await super().put(key, data, mode=mode)
        except PreconditionFailed:
            self.lost += 1
            raise


class FailingPuts(StorageWrapper):
    """Fails every put whose key holds ``marker`` (after the head was moved)."""

    def __init__(self, inner: Any, marker: str) -> None:
        super().__init__(inner)
        self.marker = marker

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        if self.marker in key:
            raise StorageUnavailable(f"injected failure writing {key!r}")
        return await super().put(key, data, mode=mode)


# -- LangGraph -----------------------------------------------------------------------------


def _lg_checkpoints(n: int) -> list[Any]:
    """``n`` checkpoints with ids in creation order (uuid6)."""
    return [empty_checkpoint() for _ in range(n)]


async def _lg_put(
    saver: CheckpointkitSaver, thread: str, checkpoint: Any, *, ns: str = "", run: str = "r"
) -> Any:
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
    return await saver.aput(config, checkpoint, {"run_id": run}, {})


async def _lg_latest_id(saver: CheckpointkitSaver, thread: str, ns: str = "") -> str | None:
    tup = await saver.aget_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ns}})
    return None if tup is None else str(tup.config["configurable"]["checkpoint_id"])


async def test_langgraph_latest_after_concurrent_puts_is_the_newest(location: Location) -> None:
    checkpoints = _lg_checkpoints(12)
    newest = max(cp["id"] for cp in checkpoints)
    random.Random(7).shuffle(checkpoints)
    barrier, held = asyncio.Barrier(len(checkpoints)), [0]
    async with (
        location.open() as one,
        location.open() as two,
        CheckpointkitSaver(HeadRace(one, barrier, held, "/h/")) as a,
        CheckpointkitSaver(HeadRace(two, barrier, held, "/h/")) as b,
    ):
        await asyncio.gather(*(_lg_put((a, b)[i % 2], "t", cp) for i, cp in enumerate(checkpoints)))
        assert isinstance(a.storage, HeadRace) and isinstance(b.storage, HeadRace)
        assert a.storage.lost + b.storage.lost >= len(checkpoints) - 1  # all raced
    async with location.open() as storage:
        counting = Counting(storage)
        async with CheckpointkitSaver(counting) as reader:
            assert await _lg_latest_id(reader, "t") == newest
    # The head named the newest: no listing of the checkpoints, only of its writes.
    assert counting.counts == {"put": 0, "get": 2, "delete": 0, "list": 1}


async def test_langgraph_latest_after_deleting_the_newest_run_falls_back(
    local_location: Location,
) -> None:
    checkpoints = _lg_checkpoints(4)
    async with local_location.open() as storage, CheckpointkitSaver(Counting(storage)) as saver:
        counting = saver.storage
        assert isinstance(counting, Counting)
        for i, cp in enumerate(checkpoints):
            await _lg_put(saver, "t", cp, run=f"r{i}")
        await saver.adelete_for_runs(["r3"])
        counting.reset()
        assert await _lg_latest_id(saver, "t") == checkpoints[2]["id"]
        assert counting.counts["list"] == 1  # the head was mended: only the writes listed
        await saver.adelete_for_runs(["r0", "r1", "r2"])
        assert await _lg_latest_id(saver, "t") is None
        assert [k async for k in storage.list("langgraph/h/")] == []


async def test_langgraph_prune_and_delete_thread_keep_the_heads_right(
    local_location: Location,
) -> None:
    main, sub = _lg_checkpoints(3), _lg_checkpoints(2)
    async with local_location.open() as storage, CheckpointkitSaver(Counting(storage)) as saver:
        counting = saver.storage
        assert isinstance(counting, Counting)
        for cp in main:
            await _lg_put(saver, "t", cp)
        for cp in sub:
            await _lg_put(saver, "t", cp, ns="child")
        await saver.aprune(["t"])
        counting.reset()
        assert await _lg_latest_id(saver, "t") == main[-1]["id"]
        assert await _lg_latest_id(saver, "t", "child") == sub[-1]["id"]
        assert counting.counts["list"] == 2  # heads used: only the writes listed
        await saver.adelete_thread("t")
        assert await _lg_latest_id(saver, "t") is None
        assert [k async for k in storage.list("langgraph/h/")] == []
        again = empty_checkpoint()
        await _lg_put(saver, "t", again)
        assert await _lg_latest_id(saver, "t") == again["id"]


async def test_langgraph_copy_thread_moves_the_targets_head_forward(
    local_location: Location,
) -> None:
    old, new = _lg_checkpoints(2), _lg_checkpoints(2)
    async with local_location.open() as storage, CheckpointkitSaver(Counting(storage)) as saver:
        counting = saver.storage
        assert isinstance(counting, Counting)
        await _lg_put(saver, "target", old[0])
        for cp in new:
            await _lg_put(saver, "source", cp)
        await saver.acopy_thread("source", "target")
        counting.reset()
        assert await _lg_latest_id(saver, "target") == new[-1]["id"]
        assert counting.counts["list"] == 1


async def test_langgraph_a_put_that_fails_after_the_head_leaves_the_previous_latest() -> None:
    first, second = _lg_checkpoints(2)
    async with MemoryStorage() as storage:
        async with CheckpointkitSaver(Inline(storage)) as saver:
            await _lg_put(saver, "t", first)
        async with CheckpointkitSaver(FailingPuts(storage, "/c/")) as failing:
            with pytest.raises(StorageUnavailable):
                await _lg_put(failing, "t", second)
        async with CheckpointkitSaver(Inline(storage)) as saver:
            assert await _lg_latest_id(saver, "t") == first["id"]  # the head named a missing one
            third = empty_checkpoint()
            await _lg_put(saver, "t", third)
            assert await _lg_latest_id(saver, "t") == third["id"]


async def test_langgraph_a_thread_without_a_head_is_read_and_mended(
    local_location: Location,
) -> None:
    older, newer, newest = _lg_checkpoints(3)
    async with local_location.open() as storage:
        async with CheckpointkitSaver(Inline(storage)) as saver:
            await _lg_put(saver, "t", newer)
            await _lg_put(saver, "t", newest)
        assert await storage.delete("langgraph/h/_t/_") is True  # as before heads existed
        async with CheckpointkitSaver(Inline(storage)) as saver:
            assert await _lg_latest_id(saver, "t") == newest["id"]
            await _lg_put(saver, "t", older)  # an older id: the rebuilt head keeps the newest
        counting = Counting(storage)
        async with CheckpointkitSaver(counting) as saver:
            assert await _lg_latest_id(saver, "t") == newest["id"]
        assert counting.counts["list"] == 1


# -- agent-framework ----------------------------------------------------------------------

BASE = datetime(2025, 3, 1, tzinfo=UTC)


def _shuffled_checkpoints(*, seed: int) -> tuple[list[Any], str]:
    """Twelve checkpoints a second apart, in a shuffled order, and the newest one's id."""
    seconds = list(range(12))
    random.Random(seed).shuffle(seconds)
    checkpoints = [af_checkpoint(at=BASE + timedelta(seconds=s), s=s) for s in seconds]
    return checkpoints, max(checkpoints, key=lambda cp: cp.timestamp).checkpoint_id


async def _af_latest_id(storage: CheckpointkitCheckpointStorage, name: str = "wf") -> str | None:
    latest = await storage.get_latest(workflow_name=name)
    return None if latest is None else latest.checkpoint_id


async def test_agent_framework_latest_after_concurrent_saves_is_the_newest(
    location: Location,
) -> None:
    checkpoints, newest = _shuffled_checkpoints(seed=3)
    barrier, held = asyncio.Barrier(len(checkpoints)), [0]
    async with (
        location.open() as one,
        location.open() as two,
        CheckpointkitCheckpointStorage(HeadRace(one, barrier, held, "/head/")) as a,
        CheckpointkitCheckpointStorage(HeadRace(two, barrier, held, "/head/")) as b,
    ):
        await asyncio.gather(*((a, b)[i % 2].save(cp) for i, cp in enumerate(checkpoints)))
        assert isinstance(a.storage, HeadRace) and isinstance(b.storage, HeadRace)
        assert a.storage.lost + b.storage.lost >= len(checkpoints) - 1  # all raced
    async with location.open() as storage:
        counting = Counting(storage)
        async with CheckpointkitCheckpointStorage(counting) as reader:
            assert await _af_latest_id(reader) == newest
    assert counting.counts == {"put": 0, "get": 2, "delete": 0, "list": 0}


async def test_agent_framework_latest_after_deleting_the_newest_falls_back(
    local_location: Location,
) -> None:
    saved = [af_checkpoint(at=BASE + timedelta(seconds=s), s=s) for s in range(4)]
    async with local_location.open() as storage:
        counting = Counting(storage)
        async with CheckpointkitCheckpointStorage(counting) as ours:
            for cp in saved:
                await ours.save(cp)
            assert await ours.delete(saved[-1].checkpoint_id) is True
            counting.reset()
            assert await _af_latest_id(ours) == saved[-2].checkpoint_id
            assert counting.counts == {"put": 0, "get": 2, "delete": 0, "list": 0}  # mended
            assert await ours.delete(saved[0].checkpoint_id) is True  # not the head's
            assert await _af_latest_id(ours) == saved[-2].checkpoint_id
            for cp in saved[1:3]:
                await ours.delete(cp.checkpoint_id)
            assert await _af_latest_id(ours) is None
        assert [k async for k in storage.list("agent-framework/head/")] == []


async def test_agent_framework_saving_the_newest_again_earlier_moves_the_head_back() -> None:
    async with MemoryStorage() as storage:
        counting = Counting(storage)
        async with CheckpointkitCheckpointStorage(counting) as ours:
            a = af_checkpoint(at=BASE + timedelta(seconds=1), v="a")
            b = af_checkpoint(at=BASE + timedelta(seconds=2), v="b")
            await ours.save(a)
            await ours.save(b)
            b.timestamp = BASE.isoformat()  # b is now the oldest
            await ours.save(b)
            counting.reset()
            assert await _af_latest_id(ours) == a.checkpoint_id
            assert counting.counts["list"] == 0


async def test_agent_framework_a_save_that_fails_after_the_head_leaves_the_previous_latest() -> (
    None
):
    async with MemoryStorage() as storage:
        first = af_checkpoint(at=BASE, n=1)
        async with CheckpointkitCheckpointStorage(Inline(storage)) as ours:
            await ours.save(first)
        async with CheckpointkitCheckpointStorage(FailingPuts(storage, "/cp/")) as failing:
            with pytest.raises(StorageUnavailable):
                await failing.save(af_checkpoint(at=BASE + timedelta(seconds=1), n=2))
        async with CheckpointkitCheckpointStorage(Inline(storage)) as ours:
            assert await _af_latest_id(ours) == first.checkpoint_id
            third = af_checkpoint(at=BASE + timedelta(seconds=2), n=3)
            await ours.save(third)
            assert await _af_latest_id(ours) == third.checkpoint_id


async def test_agent_framework_a_workflow_without_a_head_is_read_and_mended(
    local_location: Location,
) -> None:
    older, newer = (af_checkpoint(at=BASE + timedelta(seconds=s)) for s in (1, 2))
    async with local_location.open() as storage:
        async with CheckpointkitCheckpointStorage(Inline(storage)) as ours:
            await ours.save(newer)
        assert await storage.delete("agent-framework/head/_wf") is True  # as before heads
        async with CheckpointkitCheckpointStorage(Inline(storage)) as ours:
            assert await _af_latest_id(ours) == newer.checkpoint_id
            await ours.save(older)  # older: the rebuilt head keeps the newer one
        counting = Counting(storage)
        async with CheckpointkitCheckpointStorage(counting) as ours:
            assert await _af_latest_id(ours) == newer.checkpoint_id
        assert counting.counts == {"put": 0, "get": 2, "delete": 0, "list": 0}


# -- no heads on a storage with an indexed listing (SQLite, memory) -------------------------

W = TypeVar("W", bound=StorageWrapper)


@pytest.fixture(params=["memory", "sqlite"])
def indexed_location(request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    """A fresh location on a backend that declares ``indexed_list``."""
    return make_location(str(request.param), request, tmp_path)


def mirrored(wrapper: W) -> W:
    """``wrapper`` with its inner storage's capabilities (a StorageWrapper hides them)."""
    wrapper.__dict__["capabilities"] = wrapper.inner.capabilities
    return wrapper


class FailsOnceOtherLanded(StorageWrapper):
    """Fails the put whose key holds ``fail`` once a put whose key holds ``landed`` has
    landed: a save of two concurrent writes that fails half-way, every time."""

    def __init__(self, inner: Any, fail: str, landed: str) -> None:
        super().__init__(inner)
        self.__dict__["capabilities"] = inner.capabilities
        self.fail, self.landed = fail, landed
        self.other_landed = asyncio.Event()

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        if self.fail in key:
            await self.other_landed.wait()
            raise StorageUnavailable(f"injected failure writing {key!r}")
        version = await super().put(key, data, mode=mode)
        if self.landed in key:
            self.other_landed.set()
        return version


class SeesValues(Counting):
    """Counts (with the inner storage's capabilities) and notes, at each checkpoint
    record's put, the large values already stored."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner, mirror=True)
        self.values_at_record: list[list[str]] = []

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        if "/c/" in key:
            self.values_at_record.append(await _keys(self.inner, "langgraph/b/"))
        return await super().put(key, data, mode=mode)


async def _keys(storage: Any, prefix: str) -> list[str]:
    return [key async for key in storage.list(prefix)]


async def test_langgraph_put_on_an_indexed_storage_is_one_write_and_no_head(
    indexed_location: Location,
) -> None:
    checkpoints = _lg_checkpoints(3)
    async with indexed_location.open() as storage:
        assert storage.capabilities.indexed_list
        counting = Counting(storage, mirror=True)
        async with CheckpointkitSaver(counting) as saver:
            await _lg_put(saver, "t", checkpoints[0])
            # The record; the first put of a thread also looks for a head left by a saver
            # that kept heads (one get).
            assert counting.counts == {"put": 1, "get": 1, "delete": 0, "list": 0}
            counting.reset()
            for cp in checkpoints[1:]:
                await _lg_put(saver, "t", cp)
            assert counting.counts == {"put": 2, "get": 0, "delete": 0, "list": 0}
            counting.reset()
            assert await _lg_latest_id(saver, "t") == checkpoints[-1]["id"]
            # list(limit=1) of the thread, then the record and the listing of its writes.
            assert counting.counts == {"put": 0, "get": 1, "delete": 0, "list": 2}
        assert await _keys(storage, "langgraph/h/") == []


async def test_langgraph_large_value_on_an_indexed_storage_is_written_before_its_record(
    indexed_location: Location,
) -> None:
    cp = empty_checkpoint()
    cp["channel_values"] = {"big": "x" * 4096}
    cp["channel_versions"] = {"big": 1}
    async with indexed_location.open() as storage:
        seeing = SeesValues(storage)
        async with CheckpointkitSaver(seeing, inline_limit=1024) as saver:
            config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            await saver.aput(config, cp, {}, {"big": 1})
            tup = await saver.aget_tuple(config)
        values = await _keys(storage, "langgraph/b/")
        assert len(values) == 1 and seeing.values_at_record == [values]
        assert seeing.counts["put"] == 2  # the value, then the record: no head
        assert tup is not None and tup.checkpoint["channel_values"] == {"big": "x" * 4096}
        assert await _keys(storage, "langgraph/h/") == []


async def test_langgraph_latest_after_a_half_failed_put_with_heads_off_is_the_previous(
    indexed_location: Location,
) -> None:
    first, second, third = _lg_checkpoints(3)
    second["channel_values"] = {"big": "y" * 4096}
    second["channel_versions"] = {"big": 1}
    async with indexed_location.open() as storage:
        async with CheckpointkitSaver(storage) as saver:
            await _lg_put(saver, "t", first)
        failing = mirrored(FailingPuts(storage, "/c/"))
        async with CheckpointkitSaver(failing, inline_limit=1024) as broken:
            with pytest.raises(StorageUnavailable):
                await _lg_put(broken, "t", second)
        assert len(await _keys(storage, "langgraph/b/")) == 1  # its value landed, not its record
        async with CheckpointkitSaver(storage) as saver:
            assert await _lg_latest_id(saver, "t") == first["id"]
            await _lg_put(saver, "t", third)
            assert await _lg_latest_id(saver, "t") == third["id"]
        assert await _keys(storage, "langgraph/h/") == []


async def test_langgraph_latest_after_concurrent_puts_with_heads_off_is_the_newest(
    indexed_location: Location,
) -> None:
    checkpoints = _lg_checkpoints(12)
    newest = max(cp["id"] for cp in checkpoints)
    random.Random(5).shuffle(checkpoints)
    async with (
        indexed_location.open() as one,
        indexed_location.open() as two,
        CheckpointkitSaver(one) as a,
        CheckpointkitSaver(two) as b,
    ):
        await asyncio.gather(*(_lg_put((a, b)[i % 2], "t", cp) for i, cp in enumerate(checkpoints)))
    async with indexed_location.open() as storage:
        counting = Counting(storage, mirror=True)
        async with CheckpointkitSaver(counting) as reader:
            assert await _lg_latest_id(reader, "t") == newest
        assert counting.counts == {"put": 0, "get": 1, "delete": 0, "list": 2}
        assert await _keys(storage, "langgraph/h/") == []


async def test_langgraph_deletes_prune_and_copy_with_heads_off_keep_the_latest_right(
    indexed_location: Location,
) -> None:
    old, main, sub = _lg_checkpoints(1), _lg_checkpoints(3), _lg_checkpoints(2)
    async with indexed_location.open() as storage, CheckpointkitSaver(storage) as saver:
        await _lg_put(saver, "target", old[0])
        for i, cp in enumerate(main):
            await _lg_put(saver, "t", cp, run=f"r{i}")
        for cp in sub:
            await _lg_put(saver, "t", cp, ns="child", run="s")
        await saver.adelete_for_runs(["r2"])
        assert await _lg_latest_id(saver, "t") == main[1]["id"]
        await saver.aprune(["t"])
        assert len(await _keys(storage, "langgraph/c/_t/")) == 2
        assert await _lg_latest_id(saver, "t") == main[1]["id"]
        assert await _lg_latest_id(saver, "t", "child") == sub[-1]["id"]
        await saver.acopy_thread("t", "target")
        assert await _lg_latest_id(saver, "target") == main[1]["id"]
        assert await _lg_latest_id(saver, "target", "child") == sub[-1]["id"]
        await saver.adelete_thread("t")
        assert await _lg_latest_id(saver, "t") is None
        assert await _lg_latest_id(saver, "target") == main[1]["id"]
        assert await _keys(storage, "langgraph/h/") == []


async def test_langgraph_a_head_left_by_a_saver_that_kept_heads_is_ignored_then_dropped(
    indexed_location: Location,
) -> None:
    a, b, c, d = _lg_checkpoints(4)
    async with indexed_location.open() as storage:
        async with (
            CheckpointkitSaver(storage) as saver,
            CheckpointkitSaver(Inline(storage)) as keeper,
        ):
            await _lg_put(saver, "t", a)
            await _lg_put(keeper, "t", b)  # a head naming b
            await _lg_put(saver, "t", c)  # heads off: it does not move the head
            assert await _keys(storage, "langgraph/h/") == ["langgraph/h/_t/_"]
            assert await _lg_latest_id(saver, "t") == c["id"]  # the stale head is ignored
            await _lg_put(keeper, "u", a)
        async with CheckpointkitSaver(storage) as fresh:
            await _lg_put(fresh, "t", d)  # its first put of the thread drops the head
            assert await _keys(storage, "langgraph/h/") == ["langgraph/h/_u/_"]
            await fresh.aprune(["u"])
        assert await _keys(storage, "langgraph/h/") == []
        async with CheckpointkitSaver(Inline(storage)) as keeper:
            assert await _lg_latest_id(keeper, "t") == d["id"]  # no stale head to mislead it


async def test_langgraph_first_put_after_reading_no_latest_looks_for_no_head(
    indexed_location: Location,
) -> None:
    first, second = _lg_checkpoints(2)
    async with indexed_location.open() as storage:
        counting = Counting(storage, mirror=True)
        async with CheckpointkitSaver(counting) as saver:
            assert await _lg_latest_id(saver, "t") is None  # as LangGraph does before a run
            assert counting.counts == {"put": 0, "get": 0, "delete": 0, "list": 1}
            counting.reset()
            await _lg_put(saver, "t", first)
            assert counting.counts == {"put": 1, "get": 0, "delete": 0, "list": 0}
            counting.reset()
            await _lg_put(saver, "u", second)  # not read first: the put looks for a head
            assert counting.counts == {"put": 1, "get": 1, "delete": 0, "list": 0}
            assert await _lg_latest_id(saver, "t") == first["id"]


async def test_langgraph_a_head_naming_a_missing_record_misleads_no_reader(
    indexed_location: Location,
) -> None:
    """A head left on a thread without checkpoints (a head-keeping saver's put that failed
    after moving its head) is not dropped by the first put after an empty latest: each
    reader, heads kept or not, still finds the newest checkpoint."""
    lost, a, b = _lg_checkpoints(3)
    async with indexed_location.open() as storage:
        async with CheckpointkitSaver(FailingPuts(Inline(storage), "/c/")) as failing:
            with pytest.raises(StorageUnavailable):
                await _lg_put(failing, "t", lost)
        assert await _keys(storage, "langgraph/h/") == ["langgraph/h/_t/_"]
        async with CheckpointkitSaver(storage) as saver:
            assert await _lg_latest_id(saver, "t") is None
            await _lg_put(saver, "t", a)
            assert await _keys(storage, "langgraph/h/") == ["langgraph/h/_t/_"]  # not looked for
            assert await _lg_latest_id(saver, "t") == a["id"]
        async with CheckpointkitSaver(Inline(storage)) as keeper:
            assert await _lg_latest_id(keeper, "t") == a["id"]  # passes over the missing record
            await _lg_put(keeper, "t", b)
        async with CheckpointkitSaver(storage) as saver:
            assert await _lg_latest_id(saver, "t") == b["id"]


async def test_agent_framework_save_on_an_indexed_storage_writes_no_head(
    indexed_location: Location,
) -> None:
    saved = [af_checkpoint(at=BASE + timedelta(seconds=s), s=s) for s in range(3)]
    async with indexed_location.open() as storage:
        counting = Counting(storage, mirror=True)
        async with CheckpointkitCheckpointStorage(counting) as ours:
            await ours.save(saved[0])
            # The checkpoint and its marker; the first save of a workflow also looks for a
            # head left by an object that kept heads (one get).
            assert counting.counts == {"put": 2, "get": 1, "delete": 0, "list": 0}
            counting.reset()
            for cp in saved[1:]:
                await ours.save(cp)
            assert counting.counts == {"put": 4, "get": 0, "delete": 0, "list": 0}
            counting.reset()
            assert await _af_latest_id(ours) == saved[-1].checkpoint_id
            assert counting.counts == {"put": 0, "get": 1, "delete": 0, "list": 1}
        assert await _keys(storage, "agent-framework/head/") == []


@pytest.mark.parametrize("landed", ["marker", "checkpoint"])
async def test_agent_framework_latest_after_a_half_failed_save_with_heads_off_is_the_previous(
    indexed_location: Location, landed: str
) -> None:
    first, second, third = (af_checkpoint(at=BASE + timedelta(seconds=s), n=s) for s in range(3))
    fail, other = ("/cp/", "/wf/") if landed == "marker" else ("/wf/", "/cp/")
    async with indexed_location.open() as storage:
        async with CheckpointkitCheckpointStorage(storage) as ours:
            await ours.save(first)
        failing = FailsOnceOtherLanded(storage, fail, other)
        async with CheckpointkitCheckpointStorage(failing) as broken:
            with pytest.raises(StorageUnavailable):
                await broken.save(second)
        assert len(await _keys(storage, "agent-framework/wf/")) == (2 if landed == "marker" else 1)
        assert len(await _keys(storage, "agent-framework/cp/")) == (1 if landed == "marker" else 2)
        async with CheckpointkitCheckpointStorage(storage) as ours:
            assert await _af_latest_id(ours) == first.checkpoint_id
            await ours.save(third)
            assert await _af_latest_id(ours) == third.checkpoint_id
        assert await _keys(storage, "agent-framework/head/") == []


async def test_agent_framework_latest_after_concurrent_saves_with_heads_off_is_the_newest(
    indexed_location: Location,
) -> None:
    checkpoints, newest = _shuffled_checkpoints(seed=9)
    async with (
        indexed_location.open() as one,
        indexed_location.open() as two,
        CheckpointkitCheckpointStorage(one) as a,
        CheckpointkitCheckpointStorage(two) as b,
    ):
        await asyncio.gather(*((a, b)[i % 2].save(cp) for i, cp in enumerate(checkpoints)))
    async with indexed_location.open() as storage:
        counting = Counting(storage, mirror=True)
        async with CheckpointkitCheckpointStorage(counting) as reader:
            assert await _af_latest_id(reader) == newest
        assert counting.counts == {"put": 0, "get": 1, "delete": 0, "list": 1}
        assert await _keys(storage, "agent-framework/head/") == []


async def test_agent_framework_latest_after_deleting_the_newest_with_heads_off_falls_back(
    indexed_location: Location,
) -> None:
    saved = [af_checkpoint(at=BASE + timedelta(seconds=s), s=s) for s in range(3)]
    async with indexed_location.open() as storage, CheckpointkitCheckpointStorage(storage) as ours:
        for cp in saved:
            await ours.save(cp)
        assert await ours.delete(saved[-1].checkpoint_id) is True
        assert await _af_latest_id(ours) == saved[1].checkpoint_id
        for cp in saved[:2]:
            await ours.delete(cp.checkpoint_id)
        assert await _af_latest_id(ours) is None
        assert await _keys(storage, "agent-framework/") == []


async def test_agent_framework_a_head_left_by_an_object_that_kept_heads_is_ignored_then_dropped(
    indexed_location: Location,
) -> None:
    a, b, c, d = (af_checkpoint(at=BASE + timedelta(seconds=s), n=s) for s in range(4))
    async with indexed_location.open() as storage:
        async with (
            CheckpointkitCheckpointStorage(storage) as ours,
            CheckpointkitCheckpointStorage(Inline(storage)) as keeper,
        ):
            await ours.save(a)
            await keeper.save(b)  # a head naming b
            await ours.save(c)  # heads off: it does not move the head
            assert await _keys(storage, "agent-framework/head/") == ["agent-framework/head/_wf"]
            assert await _af_latest_id(ours) == c.checkpoint_id  # the stale head is ignored
        async with CheckpointkitCheckpointStorage(storage) as fresh:
            await fresh.save(d)  # its first save of the workflow drops the head
        assert await _keys(storage, "agent-framework/head/") == []
        async with CheckpointkitCheckpointStorage(Inline(storage)) as keeper:
            assert await _af_latest_id(keeper) == d.checkpoint_id  # no stale head to mislead it
