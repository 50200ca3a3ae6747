"""Guarantee tests that close gaps found by breaking the runner and the store on purpose.

Each test here failed against a deliberately broken runner or store that the
tests in ``test_guarantees.py``, ``test_g8_owner.py`` and ``tests/core/test_store.py``
let through (the mutation is named in each docstring). Where a test must show
that the runner does *not* do something (cancel a save, end early), it gives
the runner a number of event-loop iterations to do the wrong thing: iterations,
not wall-clock time, so the result does not depend on the machine's speed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from checkpointkit import LeaseLost, RunBusy
from checkpointkit.conformance.styles import Gathering, PutGate, StorageWrapper
from checkpointkit.runner import Workflow, context, parallel, step
from checkpointkit.storage import GetResult, PutMode, Storage
from checkpointkit.store import CheckpointStore

PARALLEL = ["gather", "taskgroup", "parallel"]
SPINS = 50
"""Event-loop iterations given to a broken runner to show itself."""


class Boom(Exception):
    pass


async def spin(n: int = SPINS) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def join(how: str, *calls: Awaitable[Any]) -> list[Any]:
    if how == "gather":
        return list(await asyncio.gather(*calls))
    if how == "taskgroup":
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(c) for c in calls]  # type: ignore[arg-type]
        return [t.result() for t in tasks]
    return await parallel(*calls)


def is_step_record(name: str) -> Callable[[str], bool]:
    return lambda key: f"/s/{name}@" in key


@dataclass
class Gated:
    """What the runner writes to (``storage``) and the gate holding step ``a``'s record."""

    storage: Storage
    gate: PutGate


@pytest.fixture(params=["gate-outside-style", "gate-inside-style"])
async def gated(request: pytest.FixtureRequest, storage: Storage) -> AsyncIterator[Gated]:
    """A PutGate holding step ``a``'s record: around the save style, or inside it.

    Inside, the held put runs where the style runs it: in a task that the
    storage spawned, or in one branch of a gather.
    """
    if request.param == "gate-outside-style":
        gate = PutGate(storage, hold=is_step_record("a"))
        yield Gated(gate, gate)
        return
    assert isinstance(storage, StorageWrapper)
    gate = PutGate(storage.inner, hold=is_step_record("a"))
    restyled = type(storage)(gate)
    try:
        yield Gated(restyled, gate)
    finally:
        if isinstance(restyled, Gathering):
            await restyled.mirror.aclose()  # the inner storage is closed by its own fixture


# -- G3 ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("how", PARALLEL)
async def test_g3_save_still_held_when_sibling_fails_is_not_cancelled(
    gated: Gated, how: str
) -> None:
    """Mutation caught: the runner cancels the saves when a step fails.

    ``test_g3_sibling_failure_keeps_completed_saves`` releases the held save as
    soon as the running sibling is cancelled, so with inline saves on the memory
    adapter the save completed before a broken runner got round to cancelling it.
    Here the save stays held until the runner has settled everything else.
    """
    gate = gated.gate
    executed: list[str] = []
    c_cancelled = asyncio.Event()
    broken = True

    @step(name="a")
    async def a() -> str:
        executed.append("a")
        return "A"

    @step(name="b")
    async def b() -> str:
        executed.append("b")
        await gate.entered.wait()  # A completed; its save is held in flight
        if broken:
            raise Boom("B failed")
        return "B"

    @step(name="c")
    async def c() -> str:
        executed.append("c")
        if broken:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                c_cancelled.set()
                raise
        return "C"

    async def main(_: Any) -> list[str]:
        return await join(how, a(), b(), c())

    wf = Workflow(main, storage=gated.storage)
    run = asyncio.create_task(wf.run(run_id="r1"))
    await c_cancelled.wait()
    await spin()  # the runner settles the failure while A's save is still held
    assert not gate.cancelled, "a completed step's save was cancelled by a sibling's failure"
    assert not run.done(), "the run ended before a completed step's save"
    gate.release()
    with pytest.raises((Boom, ExceptionGroup)):
        await run
    assert gate.finished.is_set() and not gate.cancelled
    assert set(await wf.store.load_steps("r1")) == {"a@0"}
    broken = False
    executed.clear()
    resumed = await wf.resume("r1")
    assert resumed.output == ["A", "B", "C"]
    assert sorted(executed) == ["b", "c"]


# -- G4 ----------------------------------------------------------------------------------------
@step(name="quick")
async def quick(x: int) -> int:
    return x


async def two_steps(_: Any) -> int:
    return await quick(1) + await quick(2)


async def test_g4_second_cancellation_ends_run_only_when_its_tasks_are_done(
    storage: Storage,
) -> None:
    """Mutations caught: a second cancellation during teardown leaves at once
    (``raise``), or is swallowed and teardown stops waiting (``break``).

    ``test_g4_second_cancellation_during_teardown_leaves_no_task`` lets the
    save's cleanup finish before awaiting the run, so a task left behind had
    ended by the time the hygiene check looked. Here the cleanup can only end
    by being cancelled again, and the check is made the moment the run ends.
    """
    entered = asyncio.Event()
    in_cleanup = asyncio.Event()
    cleanup_may_end = asyncio.Event()
    save_tasks: list[asyncio.Task[Any]] = []

    class SlowToCancel(StorageWrapper):
        async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
            if "/s/" in key:
                task = asyncio.current_task()
                assert task is not None
                save_tasks.append(task)
                entered.set()
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    in_cleanup.set()
                    await cleanup_may_end.wait()  # a cleanup that a second cancel interrupts
                    raise
            return await super().put(key, data, mode=mode)

    wf = Workflow(two_steps, storage=SlowToCancel(storage), cancel_timeout=5.0)
    run = asyncio.create_task(wf.run(run_id="r1"))
    try:
        await entered.wait()
        run.cancel()
        await in_cleanup.wait()
        run.cancel()  # a second cancellation while the runner tears down
        with pytest.raises(asyncio.CancelledError):
            await run
        left = [t for t in save_tasks if not t.done()]
        assert left == [], "the run ended while its save task was still running"
    finally:
        cleanup_may_end.set()
        await asyncio.gather(*save_tasks, return_exceptions=True)


async def test_g4_self_cancelled_step_does_not_cancel_a_held_save(gated: Gated) -> None:
    """Mutation caught: the runner treats any cancellation of the workflow as the caller's
    and cancels in-flight saves.

    ``test_g4_self_cancelled_sibling_is_not_a_caller_cancellation`` releases the
    save before the step cancels itself, so on the memory adapter the save was
    done before a broken runner could cancel it.
    """

    gate = gated.gate

    @step(name="a")
    async def a() -> str:
        return "A"

    @step(name="b")
    async def b() -> str:
        await gate.entered.wait()
        raise asyncio.CancelledError  # cancels itself: nobody cancelled the caller

    async def main(_: Any) -> list[str]:
        return list(await asyncio.gather(a(), b()))

    wf = Workflow(main, storage=gated.storage)
    run = asyncio.create_task(wf.run(run_id="r1"))
    await gate.entered.wait()
    await spin()
    assert not gate.cancelled, "a completed step's save was cancelled"
    assert not run.done()
    gate.release()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert gate.finished.is_set() and not gate.cancelled
    assert set(await wf.store.load_steps("r1")) == {"a@0"}


# -- G7 ----------------------------------------------------------------------------------------
async def test_g7_runs_of_one_workflow_never_share_state(storage: Storage) -> None:
    """Mutation caught: the committed state lives on the Workflow object, shared by its runs.

    Two runs of one Workflow interleave (A commits, then B looks; B commits, then
    A looks), then a third runs after both.
    """
    seen: dict[str, dict[str, Any]] = {}
    a_committed = asyncio.Event()
    b_looked = asyncio.Event()

    @step(name="write")
    async def write(who: str) -> None:
        context().state.set(f"by-{who}", who)

    @step(name="look")
    async def look(who: str) -> None:
        seen[who] = context().state.export()

    async def main(who: str) -> str:
        await write(who)
        if who == "A":
            a_committed.set()
            await b_looked.wait()
        elif who == "B":
            await a_committed.wait()
        await look(who)
        if who == "B":
            b_looked.set()
        return who

    wf = Workflow(main, storage=storage)
    await asyncio.gather(wf.run("A", run_id="A"), wf.run("B", run_id="B"))
    await wf.run("C", run_id="C")
    assert seen == {"A": {"by-A": "A"}, "B": {"by-B": "B"}, "C": {"by-C": "C"}}
    for who in "ABC":
        latest = await wf.store.latest(who)
        assert latest is not None and latest.state == {f"by-{who}": who}


async def test_g7_failed_step_writes_are_discarded(storage: Storage) -> None:
    """Mutation caught: a failed step's staged writes are committed instead of discarded.

    (``test_g6_pause_and_resume_with_responses`` catches this for a paused step;
    no G7 test did for a failed one.)
    """
    fail = True
    seen: list[dict[str, Any]] = []

    @step(name="keep")
    async def keep() -> None:
        context().state.set("k", "kept")

    @step(name="bad")
    async def bad() -> None:
        state = context().state
        seen.append(state.export())
        state.set("bad", "written by a step that failed")
        state.delete("k")
        if fail:
            raise Boom("bad failed")

    async def main(_: Any) -> None:
        await keep()
        await bad()

    wf = Workflow(main, storage=storage)
    with pytest.raises(Boom):
        await wf.run(run_id="r1")
    failed = await wf.store.latest("r1")
    assert failed is not None and failed.status == "failed"
    assert failed.state == {"k": "kept"}
    fail = False
    await wf.resume("r1")
    assert seen == [{"k": "kept"}, {"k": "kept"}]
    final = await wf.store.latest("r1")
    assert final is not None and final.state == {"bad": "written by a step that failed"}


# -- G8 ----------------------------------------------------------------------------------------
class HeadRace(StorageWrapper):
    """Holds every write of a run's head until ``readers`` workers have read it."""

    def __init__(self, inner: Storage, readers: int) -> None:
        super().__init__(inner)
        self.readers = readers
        self.reads = 0
        self.all_read = asyncio.Event()

    async def get(self, key: str) -> GetResult:
        result = await super().get(key)
        if key.endswith("/head"):
            self.reads += 1
            if self.reads >= self.readers:
                self.all_read.set()
        return result

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        if key.endswith("/head"):
            await self.all_read.wait()
        return await super().put(key, data, mode=mode)


async def test_g8_takeover_race_of_an_expired_lease_has_one_winner(storage: Storage) -> None:
    """Mutation caught (directly): the head is written without its compare-and-swap.

    Two workers find the same released lease and both try to take the run; the
    head's if-match write lets exactly one win. (Without the CAS both got a
    lease; only the clock-lying case of ``test_stale_owner_writes_are_rejected``
    noticed, and the two-process test passed by timing.)
    """
    setup = CheckpointStore(storage)
    await setup.release(await setup.acquire("r", owner="w0"))  # a head with an expired lease
    race = HeadRace(storage, readers=2)
    store = CheckpointStore(race)
    outcomes = await asyncio.gather(
        store.acquire("r", owner="w1"), store.acquire("r", owner="w2"), return_exceptions=True
    )
    winners = [o for o in outcomes if not isinstance(o, BaseException)]
    losers = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(winners) == 1, outcomes
    assert len(losers) == 1 and isinstance(losers[0], RunBusy), outcomes
    assert winners[0].epoch == 2
    with pytest.raises(RunBusy, match=winners[0].owner):
        await CheckpointStore(storage).acquire("r", owner="w3")


async def test_g8_second_worker_resuming_a_held_run_gets_run_busy(storage: Storage) -> None:
    """Mutation caught in the runner: ``acquire`` ignores the current owner's unexpired lease.

    Worker 1 resumes the run and holds it inside a step; worker 2 (its own
    Workflow object, as another process would have) resumes the same run and must get
    RunBusy without executing anything; worker 1 then finishes and its
    lease fences nobody.
    """
    executions: list[str] = []
    fail = True
    holding = asyncio.Event()
    may_finish = asyncio.Event()

    @step(name="first")
    async def first() -> str:
        executions.append("first")
        return "first"

    @step(name="hold")
    async def hold() -> str:
        executions.append("hold")
        if fail:
            raise Boom("first attempt")
        holding.set()
        await may_finish.wait()
        return "held"

    async def main(_: Any) -> list[str]:
        return [await first(), await hold()]

    worker1 = Workflow(main, storage=storage)
    with pytest.raises(Boom):
        await worker1.run(run_id="r1")
    fail = False
    executions.clear()
    resumed = asyncio.create_task(worker1.resume("r1"))
    await holding.wait()
    worker2 = Workflow(main, storage=storage)
    with pytest.raises(RunBusy) as info:  # at once; a bound only so a broken store cannot hang
        await asyncio.wait_for(worker2.resume("r1"), 10)
    assert not isinstance(info.value, LeaseLost)
    assert executions == ["hold"]  # worker 2 executed nothing, replayed nothing
    may_finish.set()
    result = await resumed
    assert result.output == ["first", "held"]
    assert result.replayed == ("first@0",)
