"""The runner's guarantees G1 to G7 and G9, each test named after the one it proves.

Every test runs over inline, task-spawning and gather-based saves on the memory
adapter, and on the file adapter, inside the hygiene checker (G5, conftest.py).
Saves are held in flight with events (PutGate), never with sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from checkpointkit import (
    CheckpointSaveError,
    NondeterminismError,
    StateClosed,
    StorageUnavailable,
)
from checkpointkit.conformance.styles import PutGate, StorageWrapper
from checkpointkit.events import RunCompleted, RunFailed, SaveFailed, StepStarted
from checkpointkit.runner import StepState, Workflow, context, parallel, step
from checkpointkit.storage import PutMode, Storage
from checkpointkit.store import CheckpointStore


def is_step_record(name: str) -> Callable[[str], bool]:
    return lambda key: f"/s/{name}@" in key


class Boom(Exception):
    pass


async def join(how: str, *calls: Awaitable[Any]) -> list[Any]:
    """Run step calls in parallel the way a user would: gather, TaskGroup or parallel()."""
    if how == "gather":
        return list(await asyncio.gather(*calls))
    if how == "taskgroup":
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(c) for c in calls]  # type: ignore[arg-type]
        return [t.result() for t in tasks]
    return await parallel(*calls)


PARALLEL = ["gather", "taskgroup", "parallel"]


# -- G1 ----------------------------------------------------------------------------------------
async def test_g1_snapshot_at_completion(storage: Storage) -> None:
    gate = PutGate(storage, hold=is_step_record("make"))

    @step(name="make")
    async def make() -> dict[str, Any]:
        return {"items": [1, 2]}

    async def main(_: Any) -> str:
        value = await make()
        assert gate.keys == []  # the save has not even reached the storage yet...
        value["items"].append(3)  # ...and the workflow mutates the returned object
        value["new"] = True
        return "done"

    wf = Workflow(main, storage=gate)
    task = asyncio.create_task(wf.run(run_id="r1"))
    await gate.entered.wait()
    gate.release()
    result = await task
    assert result.status == "completed"
    records = await CheckpointStore(storage).load_steps("r1")
    assert records["make@0"].result == {"items": [1, 2]}


async def test_g1_save_is_scheduled_only_after_snapshot(storage: Storage) -> None:
    seen: list[Any] = []
    store = CheckpointStore(storage)

    class Snooping(StorageWrapper):
        async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
            if "/s/" in key:
                seen.append(store.decode_step(data).result)
            return await super().put(key, data, mode=mode)

    @step(name="s")
    async def s() -> list[int]:
        return [1]

    async def main(_: Any) -> None:
        value = await s()
        value.append(2)

    await Workflow(main, storage=Snooping(storage)).run(run_id="r1")
    assert seen and all(v == [1] for v in seen)  # retries of an unknown outcome repeat it


# -- G2 ----------------------------------------------------------------------------------------
async def test_g2_resume_replays_completed_steps_without_executing(storage: Storage) -> None:
    executions: dict[str, int] = {"one": 0, "two": 0, "three": 0}
    crash = True

    @step(name="one")
    async def one(x: int) -> int:
        executions["one"] += 1
        return x + 1

    @step(name="two")
    async def two(x: int) -> int:
        executions["two"] += 1
        return x * 10

    @step(name="three")
    async def three(x: int) -> int:
        executions["three"] += 1
        if crash:
            raise Boom("crash in three")
        return x + 3

    async def main(x: int) -> int:
        return await three(await two(await one(x)))

    wf = Workflow(main, storage=storage)
    with pytest.raises(Boom):
        await wf.run(1, run_id="r1")
    crash = False
    result = await wf.resume("r1")
    assert result.output == 23
    assert executions == {"one": 1, "two": 1, "three": 2}
    assert result.replayed == ("one@0", "two@0")
    assert result.executed == ("three@0",)


@pytest.mark.parametrize("how", PARALLEL)
async def test_g2_concurrent_calls_of_one_step_keep_their_own_results(
    storage: Storage, how: str
) -> None:
    second_done = asyncio.Event()
    fail = True

    @step(name="double")
    async def double(x: int) -> int:
        if x == 1:
            await second_done.wait()  # the first call completes last
        else:
            second_done.set()
        return 2 * x

    @step(name="after")
    async def after() -> None:
        if fail:
            raise Boom("after")

    async def main(_: Any) -> list[int]:
        values = await join(how, double(1), double(2))
        await after()
        return values

    wf = Workflow(main, storage=storage)
    with pytest.raises((Boom, ExceptionGroup)):
        await wf.run(run_id="r1")
    fail = False
    result = await wf.resume("r1")
    assert result.output == [2, 4]
    assert set(result.replayed) == {"double@0", "double@1"}


async def test_g2_changed_argument_on_replay_raises_nondeterminism(storage: Storage) -> None:
    arg = 1

    @step(name="s")
    async def s(x: int) -> int:
        return x

    @step(name="fail")
    async def fail() -> None:
        raise Boom

    async def main(_: Any) -> None:
        await s(arg)
        await fail()

    wf = Workflow(main, storage=storage)
    with pytest.raises(Boom):
        await wf.run(run_id="r1")
    arg = 2
    with pytest.raises(NondeterminismError, match="s@0"):
        await wf.resume("r1")


# -- G3 ----------------------------------------------------------------------------------------
class Scenario:
    """Three parallel steps: A completes (its save held), B fails or pauses, C runs on."""

    def __init__(self, storage: Storage, how: str, *, pause: bool) -> None:
        self.gate = PutGate(storage, hold=is_step_record("a"))
        self.executions: list[str] = []
        self.c_running = asyncio.Event()
        self.c_cancelled = asyncio.Event()
        self.broken = True
        self.pause = pause
        self.how = how

        @step(name="a")
        async def a() -> str:
            self.executions.append("a")
            return "A"

        @step(name="b")
        async def b() -> str:
            self.executions.append("b")
            await self.gate.entered.wait()  # A has completed and its save is in flight
            await self.c_running.wait()
            if self.pause:  # pauses on the first run; on resume returns the response
                return str(await context().request_input("approve?"))
            if self.broken:
                raise Boom("B failed")
            return "B"

        @step(name="c")
        async def c() -> str:
            self.executions.append("c")
            if self.broken:
                self.c_running.set()
                try:
                    await asyncio.Event().wait()  # runs until cancelled
                except asyncio.CancelledError:
                    self.c_cancelled.set()
                    raise
            return "C"

        async def main(_: Any) -> list[str]:
            return await join(self.how, a(), b(), c())

        self.wf = Workflow(main, storage=self.gate)

    async def release_after_c_cancelled(self) -> None:
        await self.c_cancelled.wait()
        self.gate.release()


@pytest.mark.parametrize("how", PARALLEL)
async def test_g3_sibling_failure_keeps_completed_saves(storage: Storage, how: str) -> None:
    sc = Scenario(storage, how, pause=False)
    releaser = asyncio.create_task(sc.release_after_c_cancelled())
    with pytest.raises((Boom, ExceptionGroup)) as info:
        await sc.wf.run(run_id="r1")
    await releaser
    assert info.group_contains(Boom) if isinstance(info.value, ExceptionGroup) else True
    assert sc.c_cancelled.is_set()
    assert sc.gate.finished.is_set(), "A's save did not finish"
    records = await sc.wf.store.load_steps("r1")
    assert set(records) == {"a@0"}
    sc.broken = False
    sc.executions.clear()
    result = await sc.wf.resume("r1")
    assert result.output == ["A", "B", "C"]
    assert sorted(sc.executions) == ["b", "c"]
    assert result.replayed == ("a@0",)


@pytest.mark.parametrize("how", PARALLEL)
async def test_g3_pause_keeps_completed_saves(storage: Storage, how: str) -> None:
    sc = Scenario(storage, how, pause=True)
    releaser = asyncio.create_task(sc.release_after_c_cancelled())
    result = await sc.wf.run(run_id="r1")
    await releaser
    assert result.status == "paused"
    assert [r.id for r in result.pending] == ["b@0:0"]
    assert sc.gate.finished.is_set()
    sc.executions.clear()
    sc.broken = False
    resumed = await sc.wf.resume("r1", responses={"b@0:0": "yes"})
    assert resumed.status == "completed"
    assert resumed.output == ["A", "yes", "C"]
    assert sorted(sc.executions) == ["b", "c"]


# -- G4 ----------------------------------------------------------------------------------------
def hanging_saves(storage: Storage) -> PutGate:
    """Every step-record save waits for an event that is never set."""
    return PutGate(storage, hold=lambda key: "/s/" in key)


@step(name="quick")
async def quick(x: int) -> int:
    return x


async def two_steps(_: Any) -> int:
    return await quick(1) + await quick(2)


async def test_g4_wait_for_ends_within_bound_when_save_never_returns(storage: Storage) -> None:
    gate = hanging_saves(storage)
    wf = Workflow(two_steps, storage=gate)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(wf.run(run_id="r1"), 0.2)
    assert time.monotonic() - started < 1.0
    assert gate.entered.is_set() and gate.cancelled  # the hung save was cancelled


async def test_g4_asyncio_timeout_ends_within_bound(storage: Storage) -> None:
    wf = Workflow(two_steps, storage=hanging_saves(storage))
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.2):
            await wf.run(run_id="r1")
    assert time.monotonic() - started < 1.0


async def test_g4_task_cancel_ends_within_bound(storage: Storage) -> None:
    gate = hanging_saves(storage)
    wf = Workflow(two_steps, storage=gate)
    task = asyncio.create_task(wf.run(run_id="r1"))
    await gate.entered.wait()
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 1.0


async def test_g4_slow_save_does_not_hold_the_caller(storage: Storage) -> None:
    entered = asyncio.Event()

    class Slow(StorageWrapper):
        async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
            if "/s/" in key:
                entered.set()
                await asyncio.sleep(3)
            return await super().put(key, data, mode=mode)

    wf = Workflow(two_steps, storage=Slow(storage))
    task = asyncio.create_task(wf.run(run_id="r1"))
    await entered.wait()
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 1.0


async def test_g4_second_cancellation_during_teardown_leaves_no_task(storage: Storage) -> None:
    entered = asyncio.Event()
    in_cleanup = asyncio.Event()
    cleanup_may_end = asyncio.Event()

    class SlowToCancel(StorageWrapper):
        async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
            if "/s/" in key:
                entered.set()
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    in_cleanup.set()
                    await cleanup_may_end.wait()  # a cleanup that takes a while
                    raise
            return await super().put(key, data, mode=mode)

    wf = Workflow(two_steps, storage=SlowToCancel(storage), cancel_timeout=5.0)
    task = asyncio.create_task(wf.run(run_id="r1"))
    await entered.wait()
    task.cancel()
    await in_cleanup.wait()
    task.cancel()  # a second cancellation while the runner tears down
    for _ in range(3):
        await asyncio.sleep(0)
    cleanup_may_end.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    # the hygiene fixture fails the test if any runner-owned task is left pending


async def test_g4_self_cancelled_sibling_is_not_a_caller_cancellation(storage: Storage) -> None:
    gate = PutGate(storage, hold=is_step_record("a"))

    @step(name="a")
    async def a() -> str:
        return "A"

    @step(name="b")
    async def b() -> str:
        await gate.entered.wait()
        raise asyncio.CancelledError  # cancels itself: nobody cancelled the caller

    async def main(_: Any) -> list[str]:
        return list(await asyncio.gather(a(), b()))

    wf = Workflow(main, storage=gate)
    waiter = asyncio.create_task(gate.entered.wait())
    run = asyncio.create_task(wf.run(run_id="r1"))
    await waiter
    gate.release()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert not gate.cancelled, "a completed step's save was cancelled"
    assert set(await wf.store.load_steps("r1")) == {"a@0"}


# -- G5 ----------------------------------------------------------------------------------------
async def test_g5_cancel_just_before_save_task_starts(storage: Storage) -> None:
    outer: list[asyncio.Task[Any]] = []

    @step(name="s")
    async def s() -> int:
        outer[0].cancel()  # the cancellation lands as the step completes, before its save runs
        return 1

    async def main(_: Any) -> int:
        return await s()

    wf = Workflow(main, storage=storage)
    task = asyncio.create_task(wf.run(run_id="r1"))
    outer.append(task)
    with pytest.raises(asyncio.CancelledError):
        await task
    gc.collect()
    # the hygiene fixture fails on "coroutine ... was never awaited" and pending tasks


async def test_g5_release_abandoned_at_the_bound_ends_within_the_storages_grace(
    storage: Storage,
) -> None:
    """A storage that settles a cancelled write before raising (PostgreSQL's fence waits up
    to its ``cancel_grace``) outlasts the runner's bound on the teardown's release: the run
    ends at the bound, the release is abandoned still unwinding, and ends by itself soon
    after. Nothing is left pending (the hygiene fixture waits out the unwinding)."""
    settle = 0.2  # more than the runner's moment of unwinding, well within hygiene's grace
    armed = asyncio.Event()
    held = asyncio.Event()

    class SettlesCancelledWrites(StorageWrapper):
        async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
            if armed.is_set() and key.endswith("/head"):
                held.set()
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    settled = asyncio.Event()
                    asyncio.get_running_loop().call_later(settle, settled.set)
                    while not settled.is_set():  # settling, through later cancellations too
                        with contextlib.suppress(asyncio.CancelledError):
                            await settled.wait()
                    raise
            return await super().put(key, data, mode=mode)

    outer: list[asyncio.Task[Any]] = []

    @step(name="s")
    async def s() -> int:
        armed.set()
        outer[0].cancel()
        return 1

    async def main(_: Any) -> int:
        return await s()

    wf = Workflow(main, storage=SettlesCancelledWrites(storage), cancel_timeout=0.1)
    task = asyncio.create_task(wf.run(run_id="r1"))
    outer.append(task)
    started = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 1.0  # G4: the run ended at its bound
    assert held.is_set()  # the release was held, then abandoned while it settled


@pytest.mark.parametrize("path", ["success", "step-failure", "save-failure", "pause"])
async def test_g5_every_path_is_clean(storage: Storage, path: str) -> None:
    class Failing(StorageWrapper):
        async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
            if path == "save-failure" and "/s/" in key:
                raise StorageUnavailable("disk on fire")
            return await super().put(key, data, mode=mode)

    @step(name="s")
    async def s() -> int:
        if path == "step-failure":
            raise Boom
        if path == "pause":
            await context().request_input("?")
        return 1

    async def main(_: Any) -> int:
        return await s()

    wf = Workflow(main, storage=Failing(storage))
    try:
        await wf.run(run_id="r1")
    except (Boom, CheckpointSaveError):
        pass


# -- G6 ----------------------------------------------------------------------------------------
async def test_g6_pause_and_resume_with_responses(storage: Storage) -> None:
    executions: list[str] = []

    @step(name="draft")
    async def draft(topic: str) -> str:
        executions.append("draft")
        return f"draft about {topic}"

    @step(name="review")
    async def review(text: str) -> str:
        executions.append("review")
        ctx = context()
        ctx.state.set("reviewed", text)
        verdict = await ctx.request_input({"text": text})
        return f"{text}: {verdict}"

    async def main(topic: str) -> str:
        return await review(await draft(topic))

    wf = Workflow(main, storage=storage)
    paused = await wf.run("cats", run_id="r1")
    assert paused.status == "paused"
    assert paused.pending[0].payload == {"text": "draft about cats"}
    latest = await wf.store.latest("r1")
    assert latest is not None and latest.status == "paused"
    assert latest.pending == paused.pending
    assert "reviewed" not in latest.state  # the paused step's writes were not committed
    with pytest.raises(ValueError, match="no pending input request"):
        await wf.resume("r1", responses={"nope": 1})
    done = await wf.resume("r1", responses={paused.pending[0].id: "approved"})
    assert done.output == "draft about cats: approved"
    assert executions == ["draft", "review", "review"]
    final = await wf.store.latest("r1")
    assert final is not None and final.state == {"reviewed": "draft about cats"}


# -- G7 ----------------------------------------------------------------------------------------
async def test_g7_dropped_stream_cannot_touch_a_later_run(storage: Storage) -> None:
    a_blocked = asyncio.Event()
    a_state: list[StepState] = []
    a_late_writes: list[str] = []
    b_staged = asyncio.Event()
    b_may_finish = asyncio.Event()
    seen_by_b: list[Any] = []

    @step(name="work")
    async def work(who: str) -> str:
        state = context().state
        if who == "A":
            a_state.append(state)
            state.set("secret", "A's uncommitted write")
            a_blocked.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                try:  # A's cancellation handler writes state after B started
                    context().state.set("shared", "from A's handler")
                    a_late_writes.append("accepted into A's own (discarded) staging")
                except StateClosed:
                    a_late_writes.append("refused")
                raise
        seen_by_b.append(state.get("secret"))
        state.set("shared", "from B")
        b_staged.set()
        await b_may_finish.wait()
        return who

    async def main(who: str) -> str:
        return await work(who)

    wf = Workflow(main, storage=storage)
    stream_a = wf.stream("A", run_id="A")
    async for event in stream_a:
        if isinstance(event, StepStarted):
            break  # the consumer drops the stream mid-step, without closing it
    await a_blocked.wait()

    run_b = asyncio.create_task(wf.run("B", run_id="B"))
    await b_staged.wait()
    del stream_a
    gc.collect()  # A's generator is finalized only now, while B has staged writes
    for _ in range(50):
        await asyncio.sleep(0)
        if a_late_writes:
            break
    # A's late calls on its own state object after B started: refused or no-ops
    with pytest.raises(StateClosed):
        a_state[0].clear()
    with pytest.raises(StateClosed):
        a_state[0].import_state({"shared": "imported by A"})
    with pytest.raises(StateClosed):
        a_state[0].set("shared", "late A")
    a_state[0]._commit()
    a_state[0]._discard()
    b_may_finish.set()
    result = await run_b
    assert result.output == "B"
    assert seen_by_b == [None], "B saw A's uncommitted write"
    latest = await wf.store.latest("B")
    assert latest is not None and latest.state == {"shared": "from B"}
    assert await wf.store.latest("A") is None or (await wf.store.latest("A")).status != "completed"  # type: ignore[union-attr]


async def test_g7_late_state_call_after_run_ended_is_an_error(storage: Storage) -> None:
    kept: list[StepState] = []

    @step(name="s")
    async def s() -> None:
        kept.append(context().state)
        context().state.set("k", 1)

    async def main(_: Any) -> None:
        await s()

    wf = Workflow(main, storage=storage)
    await wf.run(run_id="r1")
    with pytest.raises(StateClosed, match="s@0"):
        kept[0].set("k", 2)
    latest = await wf.store.latest("r1")
    assert latest is not None and latest.state == {"k": 1}


# -- G9 ----------------------------------------------------------------------------------------
class FailingSaves(StorageWrapper):
    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        if "/s/" in key:
            raise StorageUnavailable(f"cannot write {key!r}: disk full")
        return await super().put(key, data, mode=mode)


async def test_g9_failed_save_fails_the_run(storage: Storage) -> None:
    wf = Workflow(two_steps, storage=FailingSaves(storage))
    with pytest.raises(CheckpointSaveError) as info:
        await wf.run(run_id="r1")
    assert isinstance(info.value.__cause__, StorageUnavailable)
    assert "disk full" in str(info.value)


async def test_g9_warn_option_completes_and_emits_warning_event(storage: Storage) -> None:
    wf = Workflow(two_steps, storage=FailingSaves(storage), on_save_error="warn")
    events = [e async for e in wf.stream(run_id="r1")]
    assert any(isinstance(e, SaveFailed) for e in events)
    assert isinstance(events[-1], RunCompleted) and events[-1].output == 3
    result = await Workflow(two_steps, storage=FailingSaves(storage), on_save_error="warn").run(
        run_id="r2"
    )
    assert len(result.save_errors) == 2


async def test_stream_reports_failure_as_event(storage: Storage) -> None:
    @step(name="bad")
    async def bad() -> None:
        raise Boom("nope")

    async def main(_: Any) -> None:
        await bad()

    events = [e async for e in Workflow(main, storage=storage).stream(run_id="r1")]
    assert isinstance(events[-1], RunFailed) and isinstance(events[-1].error, Boom)


async def test_stream_releases_the_lease_so_resume_can_follow_at_once(storage: Storage) -> None:
    fail = True

    @step(name="flaky")
    async def flaky() -> int:
        if fail:
            raise Boom("first attempt")
        return 1

    async def main(_: Any) -> int:
        return await flaky()

    wf = Workflow(main, storage=storage)
    events = [e async for e in wf.stream(run_id="r1")]
    assert isinstance(events[-1], RunFailed)
    fail = False
    resumed = [e async for e in wf.stream(run_id="r1", resume=True)]  # no RunBusy
    assert isinstance(resumed[-1], RunCompleted)
    assert resumed[-1].output == 1


async def test_g2_nested_steps_keep_their_identity_when_the_parent_replays(
    storage: Storage,
) -> None:
    calls: list[str] = []
    fail = True

    @step(name="inner")
    async def inner(x: int) -> int:
        calls.append(f"inner({x})")
        return x * 100

    @step(name="outer")
    async def outer() -> int:
        return await inner(1)

    @step(name="last")
    async def last() -> None:
        if fail:
            raise Boom

    async def main(_: Any) -> list[int]:
        first = await outer()  # calls inner(1) inside
        second = await inner(2)  # a top-level call of the same step
        await last()
        return [first, second]

    wf = Workflow(main, storage=storage)
    with pytest.raises(Boom):
        await wf.run(run_id="r1")
    fail = False
    calls.clear()
    result = await wf.resume("r1")  # outer replays without running its body
    assert result.output == [100, 200]
    assert calls == []
    assert set(result.replayed) == {"outer@0", "inner@0"}


async def test_g5_orphan_step_outliving_its_run_schedules_no_save(storage: Storage) -> None:
    release = asyncio.Event()
    orphans: list[asyncio.Task[Any]] = []

    @step(name="slow")
    async def slow() -> int:
        await release.wait()
        return 1

    async def main(_: Any) -> str:
        orphans.append(asyncio.create_task(slow()))  # never awaited by the workflow
        return "done"

    wf = Workflow(main, storage=storage)
    result = await wf.run(run_id="r1")
    assert result.output == "done"
    release.set()
    with pytest.raises((StateClosed, asyncio.CancelledError)):
        await orphans[0]
    assert await wf.store.load_steps("r1") == {}
