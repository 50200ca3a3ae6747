"""The runner when a write's outcome is unknown: late replies, late landings, stale owners,
hung storages under cancellation, crashes between writes, dead owners.

Each test is named after the property it checks and reproduces one failure that
was measured from outside (issue "Correct when a write's outcome is unknown").
These run on the memory adapter only (they bring their own faults); the hygiene
check of ``conftest.py`` wraps each one (G5).
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from checkpointkit import CheckpointSaveError, LeaseLost, RunBusy
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.conformance.styles import PutGate, StorageWrapper
from checkpointkit.runner import Workflow, context, step
from checkpointkit.storage import GetResult, PutMode, Storage
from checkpointkit.store import CheckpointStore, StepRecord


class Boom(Exception):
    pass


async def spin(n: int = 50) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


class SlowHeadReplies(StorageWrapper):
    """Head writes land at once; their reply comes ``delay`` seconds later."""

    def __init__(self, inner: Storage, delay: float) -> None:
        super().__init__(inner)
        self.delay = delay
        self.landed_waiting = asyncio.Event()  # a head write landed and awaits its reply
        self.late_replies_cut = 0

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        version = await self.inner.put(key, data, mode=mode)
        if key.endswith("/head"):
            self.landed_waiting.set()
            try:
                await asyncio.sleep(self.delay)
            except asyncio.CancelledError:
                self.late_replies_cut += 1
                raise
        return version


async def test_renewal_that_landed_with_a_late_reply_does_not_fail_a_completed_run(
    storage: Storage,
) -> None:
    """A heartbeat renewal lands, its reply is late, the run ends and cancels it: the final
    checkpoint must re-read the head (owner and epoch are still ours), not report a takeover."""
    slow = SlowHeadReplies(storage, delay=0.4)
    renewing = asyncio.Event()

    @step(name="s")
    async def s() -> str:
        slow.landed_waiting.clear()
        await slow.landed_waiting.wait()  # a renewal has landed and waits for its reply
        renewing.set()
        return "done"

    async def main(_: Any) -> str:
        return await s()

    wf = Workflow(main, storage=slow, lease_ttl=0.9)
    result = await wf.run(run_id="r1")
    assert renewing.is_set() and slow.late_replies_cut >= 1  # the scenario happened
    assert result.status == "completed" and result.output == "done"
    latest = await wf.store.latest("r1")
    assert latest is not None and latest.status == "completed"


class PlantsOldRecord(StorageWrapper):
    """Before the first put of ``key``, stores ``planted`` there: an earlier owner's record
    that landed late, after the new owner had loaded the run's steps."""

    def __init__(self, inner: Storage, key: str, planted: bytes) -> None:
        super().__init__(inner)
        self.key = key
        self.planted: bytes | None = planted

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        if key == self.key and self.planted is not None:
            planted, self.planted = self.planted, None
            await self.inner.put(key, planted, mode="create")
        return await self.inner.put(key, data, mode=mode)


async def test_stale_owners_late_step_record_is_adopted_by_the_new_owner(
    storage: Storage,
) -> None:
    """A stale owner's record of a step lands after the new owner loaded the run: the new
    owner's own save of that step adopts it (steps run at least once) instead of failing."""
    store = CheckpointStore(storage)
    executed: list[str] = []

    @step(name="s")
    async def s() -> str:
        executed.append("new owner")
        return "from the new owner"

    async def main(_: Any) -> str:
        return await s()

    old = store.encode_step(
        StepRecord("s@0", "from the old owner", fingerprint="", seq=1, epoch=1), run_id="r1"
    )
    planting = PlantsOldRecord(storage, store.step_key("r1", "s@0"), old)
    result = await Workflow(main, storage=planting).run(run_id="r1")
    assert result.status == "completed" and executed == ["new owner"]
    # The first stored record is the one replayed from now on.
    again = await Workflow(main, storage=storage).resume("r1")
    assert again.output == "from the new owner"  # the completed run's output
    records = await store.load_steps("r1")
    assert records["s@0"].result == "from the old owner"


class Hang(StorageWrapper):
    """Stops answering (every operation waits forever, honouring cancellation) once armed."""

    def __init__(self, inner: Storage, *, unwind: asyncio.Event | None = None) -> None:
        super().__init__(inner)
        self.armed = False
        self.entered = asyncio.Event()
        self.unwind = unwind  # if set: a cancelled operation unwinds only once this is set
        self.unwound = asyncio.Event()

    async def _wait(self) -> None:
        self.entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            if self.unwind is not None:
                await asyncio.shield(self.unwind.wait())  # slow to honour the cancellation
                self.unwound.set()
            raise

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        if self.armed:
            await self._wait()
        version = await self.inner.put(key, data, mode=mode)
        if key.endswith("/head") and self.arm_after_head:
            self.armed = True
        return version

    arm_after_head = False

    async def get(self, key: str) -> GetResult:
        if self.armed:
            await self._wait()
        return await self.inner.get(key)

    def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> AsyncIterator[str]:
        inner = self.inner.list(prefix, start_after=start_after, limit=limit)
        hang = self

        class Listing:
            def __aiter__(self) -> Listing:
                return self

            async def __anext__(self) -> str:
                if hang.armed:
                    await hang._wait()
                return await inner.__anext__()

        return Listing()


async def paused_run(storage: Storage) -> Workflow:
    @step(name="ask")
    async def ask() -> Any:
        return await context().request_input("ok?")

    async def main(_: Any) -> Any:
        return await ask()

    wf = Workflow(main, storage=storage, cancel_timeout=0.3)
    assert (await wf.run(run_id="r1")).status == "paused"
    return wf


@pytest.mark.parametrize("cancels", [1, 2])
async def test_g4_cancelling_resume_returns_within_bound_when_storage_stops_answering(
    storage: Storage, cancels: int
) -> None:
    """resume() takes the lease, then the storage stops answering while it loads the run:
    the caller's cancel (once, or twice during teardown) returns within cancel_timeout
    plus 0.1 s, and leaves no task behind (the hygiene check)."""
    wf = await paused_run(storage)
    hang = Hang(storage)
    hang.arm_after_head = True  # answers until the lease is taken, then nothing
    hung = Workflow(wf.fn, storage=hang, cancel_timeout=0.3)
    task = asyncio.create_task(hung.resume("r1", {"ask@0:0": "yes"}))
    await hang.entered.wait()
    started = time.monotonic()
    task.cancel()
    if cancels == 2:
        await spin(3)
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    elapsed = time.monotonic() - started
    assert elapsed < 0.3 + 0.1 + 0.3, f"resume took {elapsed:.2f} s to honour the cancel"


async def test_g4_release_is_bounded_when_storage_is_slow_to_unwind_a_cancelled_write(
    storage: Storage,
) -> None:
    """A storage that takes long to unwind a cancelled write (here: until the test allows it)
    cannot hold the caller's cancel past cancel_timeout: the release is abandoned, tracked,
    and ends later without an unretrieved error."""
    wf = await paused_run(storage)
    unwind = asyncio.Event()
    hang = Hang(storage, unwind=unwind)
    hang.arm_after_head = True
    hung = Workflow(wf.fn, storage=hang, cancel_timeout=0.3)
    task = asyncio.create_task(hung.resume("r1", {"ask@0:0": "yes"}))
    try:
        await hang.entered.wait()
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        elapsed = time.monotonic() - started
        assert elapsed < 0.3 + 0.1 + 0.3, f"the cancel took {elapsed:.2f} s"
    finally:
        unwind.set()  # now the storage unwinds; the abandoned operations end
    await hang.unwound.wait()
    await spin()


@pytest.mark.parametrize("ending", ["failure", "pause"])
async def test_g5_caller_cancel_while_a_failure_or_pause_settles_retrieves_every_error(
    storage: Storage, ending: str
) -> None:
    """A step fails (or pauses) while a completed sibling's save is held; the caller cancels
    while the run waits for that save: the sibling's error is retrieved, not left to
    'Task exception was never retrieved', and the caller's cancellation propagates."""
    gate = PutGate(storage, hold=lambda key: "/s/a@" in key)

    @step(name="a")
    async def a() -> str:
        return "A"

    @step(name="b")
    async def b() -> str:
        await gate.entered.wait()
        if ending == "pause":
            return str(await context().request_input("?"))
        raise Boom("b failed")

    async def main(_: Any) -> list[str]:
        async with asyncio.TaskGroup() as tg:
            ta, tb = tg.create_task(a()), tg.create_task(b())
        return [ta.result(), tb.result()]

    wf = Workflow(main, storage=gate, cancel_timeout=0.3)
    task = asyncio.create_task(wf.run(run_id="r1"))
    await gate.entered.wait()
    await spin()  # b has ended; the run is settling, waiting for a's held save
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    del task
    gc.collect()
    await spin()


class FailsInput(StorageWrapper):
    """The process 'dies' when it writes the run's input (after the index entry)."""

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        if key.endswith("/input"):
            raise Boom("killed between the index entry and the input")
        return await self.inner.put(key, data, mode=mode)


@step(name="one")
async def one() -> int:
    return 1


async def run_one(_: Any) -> int:
    return await one()


async def test_run_interrupted_between_its_index_entry_and_input_is_completed_by_a_later_run(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed inside create_run: the run is listed (the index entry comes first); a later
    run() of the id takes the interrupted creation over once it is stale, and completes it."""
    from checkpointkit import RunExists
    from checkpointkit import store as store_module

    with pytest.raises(Boom):
        await Workflow(run_one, storage=FailsInput(storage)).run(run_id="r1")
    wf = Workflow(run_one, storage=storage)
    assert await wf.store.list_runs() == ["r1"]
    with pytest.raises(RunExists):  # young: another caller may be creating it right now
        await wf.run(run_id="r1")
    monkeypatch.setattr(store_module, "_CREATION_STALE", 0.0)
    assert (await wf.run(run_id="r1")).output == 1
    assert await wf.store.list_runs() == ["r1"]


async def test_run_created_before_its_index_entry_is_listed_once_resumed(
    storage: Storage,
) -> None:
    """Runs created with the earlier order (input first, index second) and killed between
    the two are put back in the index by resume."""
    wf = Workflow(run_one, storage=storage)
    assert await wf.store.create_run("r1", None)
    await storage.delete("index/r1")  # as the earlier order left it
    assert await wf.store.list_runs() == []
    assert (await wf.resume("r1")).output == 1
    assert await wf.store.list_runs() == ["r1"]


async def test_resume_wait_takes_over_once_a_dead_owners_lease_expires(storage: Storage) -> None:
    @step(name="s")
    async def s() -> int:
        return 1

    async def main(_: Any) -> int:
        return await s()

    wf = Workflow(main, storage=storage)
    assert await wf.store.create_run("r1", None)
    await wf.store.acquire("r1", owner="dead worker", ttl=0.3)  # killed: never released
    with pytest.raises(RunBusy) as busy:
        await wf.resume("r1")
    assert busy.value.retry_after is not None and 0 < busy.value.retry_after <= 0.3
    started = time.monotonic()
    result = await wf.resume("r1", wait=5)
    assert result.output == 1
    assert time.monotonic() - started < 5


async def test_abandoned_runs_lists_runs_whose_owner_is_gone(storage: Storage) -> None:
    store = CheckpointStore(storage)
    for run_id in ("completed", "paused", "dead", "live", "never-started"):
        assert await store.create_run(run_id, None)
    lease = await store.acquire("completed")
    await store.save_checkpoint("completed", status="completed", lease=lease)
    lease = await store.acquire("paused")
    await store.save_checkpoint("paused", status="paused", lease=lease)
    await store.acquire("dead", owner="killed", ttl=0.001)
    await store.acquire("live", owner="alive", ttl=60)
    deadline = time.time() + 0.001
    while time.time() <= deadline:  # the dead owner's lease is past its expiry
        await asyncio.sleep(0)
    assert await store.abandoned_runs() == ["dead"]
    info = await store.run_info("dead")
    assert info is not None and info.status == "running" and not info.live
    created = await store.run_info("never-started")
    assert created is not None and created.status == "created"


async def test_lost_lease_at_the_final_checkpoint_raises_lease_lost(storage: Storage) -> None:
    """Another worker takes the run while its last step runs: the final checkpoint reports
    LeaseLost (the one 'another owner took this run' error), not CheckpointSaveError."""
    store = CheckpointStore(storage)

    @step(name="s")
    async def s() -> int:
        head_key = f"{store.run_prefix('r1')}head"
        data, version = await storage.get(head_key)
        head = store.codec.decode(data)
        taken = {**head, "owner": "w2", "epoch": head["epoch"] + 1}
        await storage.put(head_key, store.codec.encode(taken), mode=_if_match(version))
        return 1

    async def main(_: Any) -> int:
        return await s()

    with pytest.raises(LeaseLost) as info:
        await Workflow(main, storage=storage).run(run_id="r1")
    assert not isinstance(info.value, CheckpointSaveError)


def _if_match(version: str) -> PutMode:
    from checkpointkit.storage import IfMatch

    return IfMatch(version)


@pytest.fixture
def make_storage() -> Callable[[], Storage]:
    """These tests bring their own faults: plain memory underneath."""
    made: list[Storage] = []

    def factory() -> Storage:
        if not made:
            made.append(MemoryStorage())
        return made[0]

    return factory


@pytest.mark.parametrize("unknown", [False, True])
async def test_run_of_an_existing_run_id_with_the_same_input_never_executes_it_again(
    storage: Storage, unknown: bool
) -> None:
    """Two callers run the same run id with the same input (at once, then once more after it
    completed): exactly one drives it; the others get RunExists, also when every first
    attempt of a write has an unknown outcome (equal inputs cannot tell creators apart; the
    index entry's token does)."""
    from checkpointkit import RunExists
    from checkpointkit.conformance.late import LateReply

    executed: list[str] = []

    @step(name="s")
    async def s(x: int) -> int:
        executed.append("s")
        return x

    async def main(x: int) -> int:
        return await s(x)

    target = LateReply(storage, seed=3, max_delay=0.0, unknown_rate=1.0) if unknown else storage
    wf = Workflow(main, storage=target)
    results = await asyncio.gather(
        wf.run(5, run_id="r1"), wf.run(5, run_id="r1"), return_exceptions=True
    )
    assert sorted(type(r).__name__ for r in results) == ["RunExists", "RunResult"]
    with pytest.raises(RunExists):
        await wf.run(5, run_id="r1")
    assert executed == ["s"]


async def test_resume_waiting_for_a_run_completed_meanwhile_does_not_drive_it_again(
    storage: Storage,
) -> None:
    executed: list[str] = []

    @step(name="s")
    async def s() -> int:
        executed.append("s")
        return 1

    async def main(_: Any) -> int:
        return await s()

    wf = Workflow(main, storage=storage)
    store = wf.store
    assert await store.create_run("r1", None)
    lease = await store.acquire("r1", owner="other worker", ttl=30)
    waiting = asyncio.create_task(wf.resume("r1", wait=10))
    await spin()
    assert not waiting.done()  # it waits for the other worker's lease
    _, lease2 = await store.save_checkpoint("r1", status="completed", output=7, lease=lease)
    assert lease2 is not None
    await store.release(lease2)  # the other worker finished the run
    result = await waiting
    assert result.status == "completed" and result.output == 7
    assert executed == []
    assert await store.list_checkpoints("r1") == ["1"]  # not driven again
    info = await store.run_info("r1")
    assert info is not None and info.status == "completed" and info.epoch == 1


class DiesBeforeCheckpoint(StorageWrapper):
    """The process 'dies' after moving the head for a checkpoint, before writing it."""

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        if "/c/" in key:
            raise Boom("killed between the head and the checkpoint")
        return await self.inner.put(key, data, mode=mode)


async def test_resume_of_a_run_whose_completed_checkpoint_never_landed_writes_it(
    storage: Storage,
) -> None:
    """The writer died after moving the head, before the completed checkpoint landed: the
    head still says running (never completed with no output), the run is abandoned, and
    resume drives it again (every step replays, none executes) and writes it."""
    executed: list[str] = []

    @step(name="s")
    async def s() -> int:
        executed.append("s")
        return 1

    async def main(_: Any) -> int:
        return await s()

    with pytest.raises(CheckpointSaveError):
        await Workflow(main, storage=DiesBeforeCheckpoint(storage)).run(run_id="r1")
    wf = Workflow(main, storage=storage)
    info = await wf.store.run_info("r1")
    assert info is not None and info.status == "running" and info.checkpoint == 1
    assert await wf.store.latest("r1") is None  # its checkpoint did not land
    assert await wf.store.abandoned_runs() == ["r1"]  # a pool takes it over
    result = await wf.resume("r1", wait=5)
    assert result.status == "completed" and result.output == 1
    assert executed == ["s"]  # executed once, in the first call; replayed since
    latest = await wf.store.latest("r1")
    assert latest is not None and latest.status == "completed" and latest.output == 1
