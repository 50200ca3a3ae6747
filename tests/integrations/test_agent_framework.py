"""agent-framework checkpoint storage: real workflows paused and resumed, and the protocol."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import warnings
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from agent_framework import (
    InMemoryCheckpointStorage,
    RunContext,
    WorkflowCheckpoint,
    WorkflowCheckpointException,
    step,
    workflow,
)
from agent_framework._feature_stage import ExperimentalWarning
from checkpointkit import reconcile
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.conformance.hygiene import hygiene
from checkpointkit.crypto import Encryption
from checkpointkit.integrations import agent_framework as agent_framework_integration
from checkpointkit.integrations.agent_framework import (
    FINISH_GRACE,
    CheckpointkitCheckpointStorage,
)
from checkpointkit.storage import PutMode

from .conftest import Location
from .test_langgraph_saver import Counting

pytestmark = pytest.mark.filterwarnings(
    "ignore::agent_framework._feature_stage.ExperimentalWarning"
)

CALLS: list[str] = []


@dataclasses.dataclass
class Order:
    """An application type: not in agent-framework's allow-list unless listed."""

    sku: str
    qty: int


with warnings.catch_warnings():  # functional workflows are experimental in agent-framework
    warnings.simplefilter("ignore", ExperimentalWarning)

    @step
    async def fetch(x: int) -> int:
        CALLS.append("fetch")
        return x * 2

    @step
    async def enrich(v: int) -> dict[str, Any]:
        CALLS.append("enrich")
        return {"value": v, "tags": ("a", "b"), "at": datetime(2024, 1, 2, tzinfo=UTC)}

    @step
    async def finish(d: dict[str, Any], ok: bool) -> str:
        CALLS.append("finish")
        return f"{d['value']}:{d['tags']}:{ok}"

    @workflow(name="pipeline")
    async def pipeline(x: int, ctx: RunContext) -> str:
        a = await fetch(x)
        b = await enrich(a)
        ok = await ctx.request_info({"value": b["value"]}, bool, request_id="approve")
        return await finish(b, ok)

    FAIL = [True]

    @step
    async def one(x: int) -> int:
        CALLS.append("one")
        return x + 1

    @step
    async def two(x: int) -> int:
        CALLS.append("two")
        return x * 10

    @step
    async def three(x: int) -> int:
        CALLS.append("three")
        if FAIL[0]:
            raise RuntimeError("power cut")
        return x + 5

    @workflow(name="crashy")
    async def crashy(x: int) -> int:
        return await three(await two(await one(x)))


async def test_workflow_paused_for_input_resumes_from_latest_in_a_new_process(
    location: Location,
) -> None:
    CALLS.clear()
    async with hygiene():
        async with CheckpointkitCheckpointStorage(location.open()) as storage:
            first = await pipeline.build().run(21, checkpoint_storage=storage)
            assert [e.request_id for e in first.get_request_info_events()] == ["approve"]
            assert first.get_outputs() == []
            ids = await storage.list_checkpoint_ids(workflow_name="pipeline")
            await storage.storage.aclose()
        assert CALLS == ["fetch", "enrich"]
        assert len(ids) >= 3  # one per completed step, and one at the pause

        # A second process: new storage object, new workflow instance.
        async with CheckpointkitCheckpointStorage(location.open()) as storage:
            latest = await storage.get_latest(workflow_name="pipeline")
            assert latest is not None and latest.checkpoint_id == ids[-1]
            assert "approve" in latest.pending_request_info_events
            resumed = await pipeline.build().run(
                checkpoint_id=latest.checkpoint_id,
                checkpoint_storage=storage,
                responses={"approve": True},
            )
            checkpoints = await storage.list_checkpoints(workflow_name="pipeline")
            await storage.storage.aclose()
    assert resumed.get_outputs() == ["42:('a', 'b'):True"]
    assert CALLS == ["fetch", "enrich", "finish"]  # completed steps were not run again
    assert [c.checkpoint_id for c in checkpoints][: len(ids)] == ids
    assert all(c.workflow_name == "pipeline" for c in checkpoints)


async def test_workflow_stopped_by_a_failure_resumes_without_repeating_steps(
    location: Location,
) -> None:
    CALLS.clear()
    FAIL[0] = True
    async with hygiene():
        async with CheckpointkitCheckpointStorage(location.open()) as storage:
            with pytest.raises(RuntimeError, match="power cut"):
                await crashy.build().run(1, checkpoint_storage=storage)
            await storage.storage.aclose()
        FAIL[0] = False
        async with CheckpointkitCheckpointStorage(location.open()) as storage:
            latest = await storage.get_latest(workflow_name="crashy")
            assert latest is not None
            result = await crashy.build().run(
                checkpoint_id=latest.checkpoint_id, checkpoint_storage=storage
            )
            await storage.storage.aclose()
    assert result.get_outputs() == [25]
    assert CALLS == ["one", "two", "three", "three"]


def _checkpoint(
    name: str = "wf", *, at: datetime | None = None, **state: Any
) -> WorkflowCheckpoint:
    cp = WorkflowCheckpoint(workflow_name=name, graph_signature_hash="h", state=dict(state))
    if at is not None:
        cp.timestamp = at.isoformat()
    return cp


async def test_protocol_behaves_like_agent_frameworks_in_memory_storage(
    local_location: Location,
) -> None:
    base = datetime(2025, 5, 1, tzinfo=UTC)
    checkpoints = [
        _checkpoint("a", at=base + timedelta(seconds=3), n=1),
        _checkpoint("a", at=base + timedelta(seconds=1), n=2),
        _checkpoint("b", at=base + timedelta(seconds=2), n=3),
        _checkpoint("a", at=base + timedelta(seconds=9), n=4, when=base, tup=(1, 2)),
    ]
    reference = InMemoryCheckpointStorage()
    async with CheckpointkitCheckpointStorage.from_url(
        local_location.url, storage_options=local_location.options
    ) as ours:
        for store in (reference, ours):
            for cp in checkpoints:
                assert await store.save(cp) == cp.checkpoint_id
        for name in ("a", "b", "missing"):
            ref_latest = await reference.get_latest(workflow_name=name)
            our_latest = await ours.get_latest(workflow_name=name)
            assert (our_latest and our_latest.to_dict()) == (ref_latest and ref_latest.to_dict())
            assert sorted(await ours.list_checkpoint_ids(workflow_name=name)) == sorted(
                await reference.list_checkpoint_ids(workflow_name=name)
            )
            ours_listed = await ours.list_checkpoints(workflow_name=name)
            assert sorted(c.checkpoint_id for c in ours_listed) == sorted(
                c.checkpoint_id for c in await reference.list_checkpoints(workflow_name=name)
            )
        loaded = await ours.load(checkpoints[3].checkpoint_id)
        assert loaded.to_dict() == checkpoints[3].to_dict()
        assert loaded.state["tup"] == (1, 2)
        assert await ours.delete(checkpoints[3].checkpoint_id) is True
        assert await ours.delete(checkpoints[3].checkpoint_id) is False
        latest = await ours.get_latest(workflow_name="a")
        assert latest is not None and latest.checkpoint_id == checkpoints[0].checkpoint_id
        with pytest.raises(WorkflowCheckpointException, match="No checkpoint found"):
            await ours.load(checkpoints[3].checkpoint_id)


async def test_lists_are_oldest_first() -> None:
    base = datetime(2025, 1, 1, tzinfo=UTC)
    async with MemoryStorage() as storage, CheckpointkitCheckpointStorage(storage) as ours:
        saved = [_checkpoint(at=base + timedelta(minutes=i)) for i in (5, 1, 3)]
        for cp in saved:
            await ours.save(cp)
        by_time = [cp.checkpoint_id for cp in sorted(saved, key=lambda c: c.timestamp)]
        assert await ours.list_checkpoint_ids(workflow_name="wf") == by_time
        assert [c.checkpoint_id for c in await ours.list_checkpoints(workflow_name="wf")] == by_time


async def test_get_latest_costs_two_requests_however_many_checkpoints() -> None:
    storage = Counting(MemoryStorage())
    base = datetime(2025, 1, 1, tzinfo=UTC)
    async with CheckpointkitCheckpointStorage(storage) as ours:
        costs = []
        for n in (10, 400):
            name = f"wf{n}"
            for i in range(n):
                await ours.save(_checkpoint(name, at=base + timedelta(seconds=i), i=i))
            storage.reset()
            latest = await ours.get_latest(workflow_name=name)
            assert latest is not None and latest.state["i"] == n - 1
            costs.append(dict(storage.counts))
    # The head, then the checkpoint it names: no listing.
    assert costs[0] == costs[1] == {"put": 0, "get": 2, "delete": 0, "list": 0}


async def test_save_is_three_puts_and_load_one_get() -> None:
    storage = Counting(MemoryStorage())
    async with CheckpointkitCheckpointStorage(storage) as ours:
        await ours.save(_checkpoint(x=0))
        # The first save of a workflow reads its head and lists it once.
        assert storage.counts == {"put": 3, "get": 1, "delete": 0, "list": 1}
        storage.reset()
        cp = _checkpoint(x=1)
        await ours.save(cp)
        # The head's compare-and-swap (its version is remembered), the checkpoint, the marker.
        assert storage.counts == {"put": 3, "get": 0, "delete": 0, "list": 0}
        storage.reset()
        await ours.load(cp.checkpoint_id)
        assert storage.counts == {"put": 0, "get": 1, "delete": 0, "list": 0}


async def test_saving_an_id_again_moves_its_marker() -> None:
    base = datetime(2025, 1, 1, tzinfo=UTC)
    async with MemoryStorage() as storage, CheckpointkitCheckpointStorage(storage) as ours:
        cp = _checkpoint("a", at=base, v=1)
        other = _checkpoint("a", at=base + timedelta(seconds=5), v=2)
        await ours.save(cp)
        await ours.save(other)
        cp.timestamp = (base + timedelta(seconds=10)).isoformat()
        cp.state["v"] = 3
        await ours.save(cp)
        latest = await ours.get_latest(workflow_name="a")
        assert latest is not None and latest.state["v"] == 3
        assert await ours.list_checkpoint_ids(workflow_name="a") == [
            other.checkpoint_id,
            cp.checkpoint_id,
        ]
        cp.workflow_name = "b"
        await ours.save(cp)
        assert await ours.list_checkpoint_ids(workflow_name="a") == [other.checkpoint_id]
        assert await ours.list_checkpoint_ids(workflow_name="b") == [cp.checkpoint_id]


async def test_restricted_decoding_refuses_types_outside_the_allow_list() -> None:
    async with MemoryStorage() as storage, CheckpointkitCheckpointStorage(storage) as ours:
        with pytest.raises(WorkflowCheckpointException, match="refusing to save"):
            await ours.save(_checkpoint(order=Order("x", 1)))
        with pytest.raises(WorkflowCheckpointException, match="refusing to save"):
            await ours.save(_checkpoint(fn=lambda: 1))  # cannot even be pickled
        assert [k async for k in storage.list("")] == []


async def test_allowed_checkpoint_types_are_restored() -> None:
    allowed = [f"{Order.__module__}:{Order.__qualname__}"]
    async with MemoryStorage() as storage:
        async with CheckpointkitCheckpointStorage(
            storage, allowed_checkpoint_types=allowed
        ) as ours:
            cp = _checkpoint(order=Order("x", 2))
            await ours.save(cp)
            assert (await ours.load(cp.checkpoint_id)).state["order"] == Order("x", 2)
        # A reader without the allow-list entry refuses it, loudly.
        async with CheckpointkitCheckpointStorage(storage) as strict:
            with pytest.raises(WorkflowCheckpointException, match="blocked"):
                await strict.load(cp.checkpoint_id)
            assert await strict.list_checkpoints(workflow_name="wf") == []  # skipped, logged


async def test_integers_beyond_msgpack_round_trip() -> None:
    async with MemoryStorage() as storage, CheckpointkitCheckpointStorage(storage) as ours:
        cp = _checkpoint(huge=2**100, nan=float("inf"))
        await ours.save(cp)
        assert (await ours.load(cp.checkpoint_id)).state == {"huge": 2**100, "nan": float("inf")}


async def test_a_corrupted_checkpoint_raises_naming_its_key() -> None:
    async with MemoryStorage() as storage, CheckpointkitCheckpointStorage(storage) as ours:
        cp = _checkpoint(x=1)
        await ours.save(cp)
        key = f"agent-framework/cp/_{cp.checkpoint_id}"
        data = bytearray((await storage.get(key)).data)
        data[-1] ^= 0xFF
        await storage.put(key, bytes(data))
        with pytest.raises(WorkflowCheckpointException, match="agent-framework/cp/"):
            await ours.load(cp.checkpoint_id)
        with pytest.raises(WorkflowCheckpointException):
            await ours.get_latest(workflow_name="wf")  # not skipped for an older one


async def test_encrypted_checkpoints_are_opaque() -> None:
    encryption = Encryption({"k": os.urandom(32)}, active="k")
    async with MemoryStorage() as storage:
        async with CheckpointkitCheckpointStorage(storage, encryption=encryption) as ours:
            cp = _checkpoint(secret="open sesame")
            await ours.save(cp)
            assert (await ours.load(cp.checkpoint_id)).state["secret"] == "open sesame"
        for key in [k async for k in storage.list("")]:
            assert b"open sesame" not in (await storage.get(key)).data
        async with CheckpointkitCheckpointStorage(storage) as no_key:
            with pytest.raises(WorkflowCheckpointException, match="encrypted"):
                await no_key.load(cp.checkpoint_id)


async def test_bad_timestamps_and_ids_are_refused_with_a_clear_error() -> None:
    async with MemoryStorage() as storage, CheckpointkitCheckpointStorage(storage) as ours:
        cp = _checkpoint()
        cp.timestamp = "yesterday"
        with pytest.raises(WorkflowCheckpointException, match="ISO 8601"):
            await ours.save(cp)
        with pytest.raises(WorkflowCheckpointException, match="Invalid checkpoint ID"):
            await ours.load("")
        odd = _checkpoint()
        odd.checkpoint_id = "../../etc/passwd"
        await ours.save(odd)
        assert (await ours.load("../../etc/passwd")).checkpoint_id == "../../etc/passwd"


async def test_storage_from_url_is_closed_but_a_passed_storage_is_not(tmp_path: Any) -> None:
    async with CheckpointkitCheckpointStorage.from_url(f"file://{tmp_path}/s") as ours:
        opened = ours.storage
        await ours.save(_checkpoint())
    with pytest.raises(Exception, match="closed"):
        await opened.get("x")
    async with MemoryStorage() as storage:
        async with CheckpointkitCheckpointStorage(storage) as ours:
            await ours.save(_checkpoint())
        assert [k async for k in storage.list("")]


class _SlowMarkers(Counting):
    """Memory storage (mirrored capabilities: no heads) whose marker puts (empty values)
    wait for `release`, after telling `marker_sent`."""

    def __init__(self) -> None:
        super().__init__(MemoryStorage(), mirror=True)
        self.marker_sent = asyncio.Event()
        self.release = asyncio.Event()

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        if data == b"":
            self.marker_sent.set()
            await self.release.wait()
        return await super().put(key, data, mode=mode)


@pytest.mark.parametrize("finishing", [True, False])
async def test_a_cancelled_save_whose_writes_are_in_flight_is_listed_whenever_it_loads(
    finishing: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save is cancelled after its checkpoint is written and while its marker's put is
    in flight; the put answers right after the cancel. The save lets it finish (within
    FINISH_GRACE) before it raises CancelledError: the checkpoint loads and is listed.
    Without that (the broken twin: the writes awaited as they are, as before) the marker's
    put is cancelled with the save, and the checkpoint loads by its id but is listed
    nowhere."""
    assert FINISH_GRACE > 0
    if not finishing:
        monkeypatch.setattr(agent_framework_integration, "_finishing", lambda coro: coro)
    storage = _SlowMarkers()
    async with CheckpointkitCheckpointStorage(storage) as ours:
        cp = _checkpoint(x=1)
        task = asyncio.ensure_future(ours.save(cp))
        await storage.marker_sent.wait()
        while storage.counts["put"] < 1:  # the checkpoint's own put has ended
            await asyncio.sleep(0)
        task.cancel()
        asyncio.get_running_loop().call_soon(storage.release.set)
        with pytest.raises(asyncio.CancelledError):
            await task
        loaded = (await ours.load(cp.checkpoint_id)).checkpoint_id
        listed = await ours.list_checkpoint_ids(workflow_name="wf")
    assert loaded == cp.checkpoint_id
    if finishing:
        assert listed == [cp.checkpoint_id]
    else:
        assert listed == [], "the broken twin should leave the checkpoint unlisted"


class _SecondDeleteHangs(Counting):
    """Memory storage (no heads) whose second delete after `arm` never answers, after
    telling `hanging`: a delete of a checkpoint is cancelled between its two deletes."""

    def __init__(self) -> None:
        super().__init__(MemoryStorage(), mirror=True)
        self.hanging = asyncio.Event()
        self.armed = False

    async def delete(self, key: str, *, if_match: str | None = None) -> bool:
        if self.armed and self.counts["delete"] == 1:
            self.hanging.set()
            await asyncio.Event().wait()
        return await super().delete(key, if_match=if_match)


class _CheckpointFirstDelete(CheckpointkitCheckpointStorage):
    """The broken twin: deletes the checkpoint first, its marker last."""

    async def delete(self, checkpoint_id: str) -> bool:
        key = self._checkpoint_key(checkpoint_id)
        encoded = await self._read(key)
        if encoded is None:
            return False
        existed = await reconcile.delete(self.storage, key)
        marker = self._marker_of(encoded, checkpoint_id)
        if marker is not None:
            await reconcile.delete(self.storage, marker)
        return existed


@pytest.mark.parametrize("storage_class", [CheckpointkitCheckpointStorage, _CheckpointFirstDelete])
async def test_a_delete_cancelled_between_its_deletes_never_lists_what_does_not_load(
    storage_class: type[CheckpointkitCheckpointStorage],
) -> None:
    """A delete cancelled after its first delete, the second never answering: no id is
    listed that load does not find (the marker goes first). The broken twin, the
    checkpoint first, leaves its id listed by list_checkpoint_ids and not loadable."""
    storage = _SecondDeleteHangs()
    async with storage_class(storage) as ours:
        cp = _checkpoint(x=1)
        await ours.save(cp)
        storage.reset()
        storage.armed = True
        task = asyncio.ensure_future(ours.delete(cp.checkpoint_id))
        await storage.hanging.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        storage.armed = False
        listed = await ours.list_checkpoint_ids(workflow_name="wf")
        try:
            loads = (await ours.load(cp.checkpoint_id)).checkpoint_id == cp.checkpoint_id
        except WorkflowCheckpointException:
            loads = False
    if storage_class is CheckpointkitCheckpointStorage:
        assert listed == [] and loads, (listed, loads)
    else:
        assert listed == [cp.checkpoint_id] and not loads, "the broken twin should list it"


async def test_a_save_cancelled_twice_in_its_grace_ends_and_leaves_no_task() -> None:
    """A save whose marker's put never answers, cancelled, then cancelled again during
    its grace: it raises CancelledError within FINISH_GRACE (and a generous slack), and
    no task of it is left running."""
    storage = _SlowMarkers()  # `release` is never set: the marker's put never answers
    async with CheckpointkitCheckpointStorage(storage) as ours:
        before = asyncio.all_tasks()
        task = asyncio.ensure_future(ours.save(_checkpoint(x=1)))
        await storage.marker_sent.wait()
        loop = asyncio.get_running_loop()
        start = loop.time()
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert loop.time() - start < FINISH_GRACE + 2.0
        left = [t for t in asyncio.all_tasks() - before if not t.done()]
        assert left == [], left
