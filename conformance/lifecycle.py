"""Group ``lifecycle``: the runner's guarantees G1 to G7 (and G9) over the adapter under test.

Each test drives a small workflow through `Workflow`
on the storage under test, wrapped in each save style of
`STYLES`: ``inline`` (the put is awaited
directly), ``task-spawning`` (the put runs in a task the storage creates) and
``gather`` (the put gathers two backend writes). A
`PutGate` holds a chosen step's save in
flight, so the tests fail, cancel or pause the run while that save provably
has not finished. Hygiene (G5) is checked around every test.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections import Counter
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, ClassVar, TypeVar, cast

import pytest

from ..errors import CheckpointSaveError, StateClosed
from ..runner import Workflow, context, step
from ..storage import Storage
from .checks import expect, fail
from .clauses import checks
from .faults import FaultyStorage
from .idle_closed import IdleClosedTests
from .lost_replies import LostReplyTests
from .styles import STYLES, PutGate
from .sweeps import LifecycleSweepTests
from .unavailable import UnavailableTests

__all__ = ["LifecycleTests"]

T = TypeVar("T")

STYLE_NAMES = list(STYLES)
PROMPT = 2.0
"""Seconds within which a cancelled run must end (the runner's own bound is 0.5 s)."""


class Boom(Exception):
    """The failure of a step that fails on purpose."""


PATIENCE = 10.0
"""Seconds to wait for progress that a working adapter makes in milliseconds."""


async def _bounded(
    aw: Awaitable[T], seconds: float, what: str, *, run: asyncio.Future[Any] | None = None
) -> T:
    """``await aw`` within ``seconds``; fail at once if ``run`` ends first (it never will
    make the awaited progress then), so that no test waits out its bound needlessly."""
    __tracebackhide__ = True
    task = asyncio.ensure_future(aw)
    waiting: set[asyncio.Future[Any]] = {task} if run is None else {task, run}
    await asyncio.wait(waiting, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    if run is not None and run.done():
        ended = "was cancelled" if run.cancelled() else f"raised {run.exception()!r}"
        if not run.cancelled() and run.exception() is None:
            ended = f"returned {run.result()!r}"
        fail(
            "the run must make progress",
            expected=what,
            observed=f"the run ended before that: it {ended}",
        )
    fail(
        "the run must make progress",
        expected=f"{what} within {seconds:g} s",
        observed="it did not happen",
    )


async def _spin(rounds: int = 100) -> None:
    """Let the event loop run ``rounds`` iterations: what the runner does without I/O."""
    for _ in range(rounds):
        await asyncio.sleep(0)


def _gated(storage: Storage, style: str, wf_key: Callable[[], str]) -> tuple[PutGate, Any]:
    """``STYLES[style](PutGate(storage))`` holding the put of the key ``wf_key()`` names."""
    gate = PutGate(storage, hold=lambda key: key == wf_key())
    return gate, STYLES[style](gate)


def _workflow(
    fn: Callable[[Any], Awaitable[Any]], storage: Any, **options: Any
) -> Workflow[Any, Any]:
    return Workflow(fn, storage=storage, **options)


class LifecycleTests(LifecycleSweepTests, UnavailableTests, LostReplyTests, IdleClosedTests):
    """Runner guarantees over the adapter, in the three save styles."""

    conformance_group: ClassVar[str | None] = "lifecycle"

    @pytest.fixture
    def runner_storage(self, storage: Storage, supports_conditional_put: bool) -> Storage:
        """The storage under test, when the checkpoint store can run on it."""
        if not supports_conditional_put:
            pytest.skip("the checkpoint store needs conditional_put (write-once records, leases)")
        return storage

    # -- G1 / G2 -------------------------------------------------------------------------------
    @checks("runner.g1-snapshot")
    @pytest.mark.parametrize("style", STYLE_NAMES)
    async def test_g1_step_result_is_a_snapshot_at_completion(
        self, runner_storage: Storage, style: str
    ) -> None:
        storage = runner_storage
        calls: Counter[str] = Counter()
        seen: list[dict[str, Any]] = []
        failing = [True]

        @step(name="make")
        async def make(n: int) -> dict[str, Any]:
            calls["make"] += 1
            return {"items": [n]}

        @step(name="check")
        async def check() -> str:
            if failing[0]:
                raise Boom("fails on the first run, on purpose")
            return "ok"

        async def main(_: Any) -> dict[str, Any]:
            result = await make(1)
            seen.append(copy.deepcopy(result))
            result["items"].append("mutated after the step completed")
            await check()
            return result

        wf = _workflow(main, STYLES[style](storage))
        with pytest.raises(Boom):
            await wf.run(None, run_id="g1")
        failing[0] = False
        resumed = await wf.resume("g1")
        expect(
            resumed.status == "completed",
            "G1: the resumed run must complete",
            expected="status 'completed'",
            observed=f"status {resumed.status!r}",
        )
        expect(
            seen[-1] == {"items": [1]},
            "G1: a step's stored result is its value at completion; "
            "later mutation changes nothing stored",
            expected="the replayed result {'items': [1]}",
            observed=f"it replayed {seen[-1]!r}",
        )
        expect(
            calls["make"] == 1,
            "G2: a completed step must not execute again on resume",
            expected="1 execution of 'make'",
            observed=f"{calls['make']} executions",
        )

    @checks("runner.g2-replay")
    @pytest.mark.parametrize("style", STYLE_NAMES)
    async def test_g2_concurrent_calls_of_one_step_keep_their_results(
        self, runner_storage: Storage, style: str
    ) -> None:
        storage = runner_storage
        calls: Counter[int] = Counter()
        release = asyncio.Event()
        failing = [True]

        @step(name="square")
        async def square(n: int) -> int:
            calls[n] += 1
            if n == 1:
                await release.wait()  # finishes last: completion order differs from call order
            if n == 3:
                release.set()
            return n * n

        @step(name="after")
        async def after() -> None:
            if failing[0]:
                raise Boom("fails on the first run, on purpose")

        async def main(_: Any) -> list[int]:
            results = list(await asyncio.gather(square(1), square(2), square(3)))
            await after()
            return results

        wf = _workflow(main, STYLES[style](storage))
        with pytest.raises(Boom):
            await wf.run(None, run_id="g2")
        failing[0] = False
        release.clear()
        resumed = await _bounded(
            wf.resume("g2"), PATIENCE, "the resume"
        )  # square(1) must not wait again
        expect(
            resumed.output == [1, 4, 9],
            "G2: concurrent calls of one step must replay their own results",
            expected="[1, 4, 9]",
            observed=f"{resumed.output!r}",
        )
        expect(
            all(v == 1 for v in calls.values()),
            "G2: completed steps must not execute again",
            expected="each call executed once",
            observed=f"executions {dict(calls)}",
        )

    # -- G3 --------------------------------------------------------------------------------
    @checks("runner.g3-sibling-failure")
    @pytest.mark.parametrize("style", STYLE_NAMES)
    async def test_g3_sibling_failure_keeps_completed_saves(
        self, runner_storage: Storage, style: str
    ) -> None:
        storage = runner_storage
        calls: Counter[str] = Counter()
        fail_now = asyncio.Event()
        failing = [True]
        wf: Workflow[Any, Any] | None = None
        gate, styled = _gated(
            storage, style, lambda: wf.store.step_key("g3", "quick@0") if wf else ""
        )

        @step(name="quick")
        async def quick() -> str:
            calls["quick"] += 1
            return "done"

        @step(name="sibling")
        async def sibling() -> str:
            if failing[0]:
                await fail_now.wait()
                raise Boom("the sibling fails while quick's save is in flight")
            return "fine"

        async def main(_: Any) -> list[str]:
            return list(await asyncio.gather(quick(), sibling()))

        wf = _workflow(main, styled)
        run = asyncio.ensure_future(wf.run(None, run_id="g3"))
        finished_at_end: list[bool] = []
        run.add_done_callback(lambda _t: finished_at_end.append(gate.finished.is_set()))
        await _bounded(gate.entered.wait(), PATIENCE, "quick's save to start", run=run)
        fail_now.set()
        await _spin()  # a correct runner is still waiting for the save (it needs no I/O)
        gate.release()
        with pytest.raises(Boom):
            await _bounded(run, PATIENCE, "the run to end")
        expect(
            not gate.cancelled,
            "G3: a sibling's failure must not cancel a completed step's save",
            expected="quick's save to finish",
            observed=f"it was cancelled ({gate.cancelled})",
        )
        expect(
            finished_at_end == [True],
            "G3: the run must end only after the completed step's save finished",
            expected="the save finished before the run raised",
            observed="the run ended while the save was still in flight",
        )
        failing[0] = False
        resumed = await _bounded(wf.resume("g3"), PATIENCE, "the resume")
        expect(
            resumed.output == ["done", "fine"],
            "G3: the resumed run must complete",
            expected="['done', 'fine']",
            observed=repr(resumed.output),
        )
        expect(
            calls["quick"] == 1,
            "G3: a resume must not execute the completed step again",
            expected="1 execution of 'quick'",
            observed=f"{calls['quick']} executions",
        )

    # -- G4 --------------------------------------------------------------------------------
    @checks("runner.g4-cancel-prompt")
    @pytest.mark.parametrize("how", ["task.cancel", "asyncio.timeout"])
    @pytest.mark.parametrize("style", STYLE_NAMES)
    async def test_g4_caller_cancel_ends_run_promptly_even_if_save_never_returns(
        self, runner_storage: Storage, style: str, how: str
    ) -> None:
        storage = runner_storage
        wf: Workflow[Any, Any] | None = None
        gate, styled = _gated(
            storage, style, lambda: wf.store.step_key("g4", "quick@0") if wf else ""
        )

        @step(name="quick")
        async def quick() -> str:
            return "done"

        async def main(_: Any) -> None:
            await quick()
            await asyncio.Event().wait()  # the workflow goes on; the save never returns

        wf = _workflow(main, styled)
        scope: list[asyncio.Timeout] = []

        async def caller() -> None:
            assert wf is not None
            if how == "task.cancel":
                await wf.run(None, run_id="g4")
                return
            async with asyncio.timeout(None) as cm:
                scope.append(cm)
                await wf.run(None, run_id="g4")

        run = asyncio.ensure_future(caller())
        await _bounded(gate.entered.wait(), PATIENCE, "quick's save to start", run=run)
        start = time.monotonic()
        if how == "task.cancel":
            run.cancel()
        else:
            scope[0].reschedule(asyncio.get_running_loop().time())  # the timeout expires now
        await asyncio.wait({run}, timeout=PROMPT + 1)
        elapsed = time.monotonic() - start
        if not run.done() or elapsed > PROMPT:
            fail(
                f"G4: a run cancelled by its caller ({how}) must end promptly "
                "even if a save never returns",
                expected=f"it to end within {PROMPT:g} s",
                observed="it was still running" if not run.done() else f"it took {elapsed:.2f} s",
            )
        if how == "task.cancel":
            expect(
                run.cancelled(),
                "G4: a cancelled run must raise CancelledError",
                expected="CancelledError",
                observed=repr(None if run.cancelled() else run.exception()),
            )
        else:
            exc = None if run.cancelled() else run.exception()
            expect(
                isinstance(exc, TimeoutError),
                "G4: a run under asyncio.timeout must end with TimeoutError",
                expected="TimeoutError",
                observed=repr(exc) if not run.cancelled() else "CancelledError",
            )
        expect(
            bool(gate.cancelled),
            "G4: a caller's cancellation must cancel the in-flight save",
            expected="the held save to be cancelled",
            observed="it was left running",
        )

    @checks("runner.g4-cancel-prompt", "runner.g5-hygiene")
    @pytest.mark.parametrize("style", STYLE_NAMES)
    async def test_g4_repeated_cancellation_leaves_no_task_behind(
        self, runner_storage: Storage, style: str
    ) -> None:
        storage = runner_storage
        wf: Workflow[Any, Any] | None = None
        gate, styled = _gated(
            storage, style, lambda: wf.store.step_key("g4r", "quick@0") if wf else ""
        )

        @step(name="quick")
        async def quick() -> str:
            return "done"

        @step(name="stuck")
        async def stuck() -> None:
            try:
                await asyncio.Event().wait()
            finally:
                await asyncio.sleep(0)  # its cleanup takes a loop iteration

        async def main(_: Any) -> None:
            await quick()
            await stuck()

        wf = _workflow(main, styled)
        run = asyncio.ensure_future(wf.run(None, run_id="g4r"))
        await _bounded(gate.entered.wait(), PATIENCE, "quick's save to start", run=run)
        start = time.monotonic()
        for _ in range(3):
            run.cancel()
            await asyncio.sleep(0)
        await asyncio.wait({run}, timeout=PROMPT + 1)
        elapsed = time.monotonic() - start
        if not run.done() or elapsed > PROMPT:
            fail(
                "G4: a run cancelled repeatedly must still end promptly",
                expected=f"it to end within {PROMPT:g} s",
                observed="it was still running" if not run.done() else f"it took {elapsed:.2f} s",
            )
        expect(
            run.cancelled(),
            "G4: a cancelled run must raise CancelledError",
            expected="CancelledError",
            observed=repr(run.exception() if not run.cancelled() else None),
        )

    @checks("runner.g5-hygiene")
    @pytest.mark.parametrize("style", STYLE_NAMES)
    async def test_cancel_before_a_save_starts_leaves_nothing_pending(
        self, runner_storage: Storage, style: str
    ) -> None:
        storage = runner_storage
        holder: list[asyncio.Future[Any]] = []

        @step(name="quick")
        async def quick() -> str:
            holder[0].cancel()  # the caller cancels just as the step completes
            return "done"

        async def main(_: Any) -> str:
            return await quick()

        wf = _workflow(main, STYLES[style](storage))
        run = asyncio.ensure_future(wf.run(None, run_id="early"))
        holder.append(run)
        await asyncio.wait({run}, timeout=PROMPT + 1)
        if not run.done():
            fail(
                "G4: a run cancelled before its save started must end promptly",
                expected=f"it to end within {PROMPT:g} s",
                observed="it was still running",
            )
        if not run.cancelled():
            # The step and its save may both have finished before the cancellation landed.
            run.result()

    # -- G6 --------------------------------------------------------------------------------
    @checks("runner.g6-pause")
    @pytest.mark.parametrize("style", STYLE_NAMES)
    async def test_g6_pause_settles_saves_and_resume_continues(
        self, runner_storage: Storage, style: str
    ) -> None:
        storage = runner_storage
        calls: Counter[str] = Counter()
        wf: Workflow[Any, Any] | None = None
        gate, styled = _gated(
            storage, style, lambda: wf.store.step_key("g6", "quick@0") if wf else ""
        )

        @step(name="quick")
        async def quick() -> int:
            calls["quick"] += 1
            return 1

        @step(name="ask")
        async def ask() -> Any:
            return await context().request_input({"question": "name?"})

        async def main(_: Any) -> list[Any]:
            return list(await asyncio.gather(quick(), ask()))

        wf = _workflow(main, styled)
        run = asyncio.ensure_future(wf.run(None, run_id="g6"))
        finished_at_end: list[bool] = []
        run.add_done_callback(lambda _t: finished_at_end.append(gate.finished.is_set()))
        await _bounded(gate.entered.wait(), PATIENCE, "quick's save to start", run=run)
        await _spin()  # a correct runner is still waiting for the save (it needs no I/O)
        gate.release()
        result = await _bounded(run, PATIENCE, "the run to pause")
        expect(
            result.status == "paused",
            "G6: a step asking for input must pause the run",
            expected="status 'paused'",
            observed=f"status {result.status!r}",
        )
        expect(
            len(result.pending) == 1,
            "G6: the paused run must list its input request",
            expected="1 pending request",
            observed=f"{len(result.pending)}",
        )
        expect(
            finished_at_end == [True],
            "G6: a pause must settle every completed step's save first",
            expected="quick's save finished before the run paused",
            observed="the run paused while it was in flight",
        )
        expect(
            not gate.cancelled,
            "G6: a pause must not cancel a completed step's save",
            expected="the save to finish",
            observed="it was cancelled",
        )
        resumed = await _bounded(
            wf.resume("g6", responses={result.pending[0].id: "Ada"}), PATIENCE, "the resume"
        )
        expect(
            resumed.status == "completed" and resumed.output == [1, "Ada"],
            "G6: resuming with the response must continue the run",
            expected="completed with [1, 'Ada']",
            observed=f"{resumed.status} with {resumed.output!r}",
        )
        expect(
            calls["quick"] == 1,
            "G6: a resume must not execute the completed step again",
            expected="1 execution",
            observed=f"{calls['quick']}",
        )

    # -- G7 --------------------------------------------------------------------------------
    @checks("runner.g7-isolation")
    @pytest.mark.parametrize("style", STYLE_NAMES)
    async def test_g7_failed_step_state_writes_are_discarded(
        self, runner_storage: Storage, style: str
    ) -> None:
        storage = runner_storage

        @step(name="good")
        async def good() -> None:
            context().state.set("kept", "from a completed step")

        @step(name="bad")
        async def bad() -> None:
            context().state.set("dropped", "from a failed step")
            raise Boom("fails after staging a write, on purpose")

        @step(name="read")
        async def read() -> list[Any]:
            state = context().state
            return [state.get("kept", "absent"), state.get("dropped", "absent")]

        async def main(_: Any) -> list[Any]:
            await good()
            try:
                await bad()
            except Boom:
                pass
            return await read()

        wf = _workflow(main, STYLES[style](storage))
        result = await wf.run(None, run_id="g7")
        expect(
            result.output == ["from a completed step", "absent"],
            "G7: a completed step's state writes are committed; a failed step's are discarded",
            expected="['from a completed step', 'absent']",
            observed=repr(result.output),
        )

    @checks("runner.g7-isolation")
    @pytest.mark.parametrize("style", STYLE_NAMES)
    async def test_g7_abandoned_stream_cannot_touch_a_later_run(
        self, runner_storage: Storage, style: str
    ) -> None:
        storage = runner_storage
        entered = asyncio.Event()
        leaked: list[Any] = []

        @step(name="hang")
        async def hang() -> None:
            leaked.append(context().state)
            entered.set()
            await asyncio.Event().wait()

        @step(name="write")
        async def write(value: str) -> None:
            context().state.set("owner", value)

        async def first(_: Any) -> None:
            await hang()

        async def second(_: Any) -> str:
            await write("second run")
            return "second done"

        styled = STYLES[style](storage)
        wf1, wf2 = _workflow(first, styled), _workflow(second, styled)
        stream = cast(AsyncGenerator[Any, None], wf1.stream(None, run_id="abandoned"))
        await _bounded(stream.__anext__(), PATIENCE, "the first event")
        await _bounded(entered.wait(), PATIENCE, "the first run's step to start")
        result = await wf2.run(None, run_id="later")
        await _bounded(stream.aclose(), PROMPT, "the abandoned stream to close")  # finalized late
        try:
            leaked[0].set("owner", "abandoned run")
        except StateClosed:
            pass
        latest = await wf2.store.latest("later")
        state = dict(latest.state) if latest is not None else {}
        expect(
            result.output == "second done" and state.get("owner") == "second run",
            "G7: an abandoned run's late cleanup must not touch a later run",
            expected="the later run's state {'owner': 'second run'}",
            observed=f"output {result.output!r}, state {state!r}",
        )

    # -- G9 --------------------------------------------------------------------------------
    @checks("runner.g9-loud-save")
    @pytest.mark.parametrize("style", STYLE_NAMES)
    async def test_g9_failed_save_fails_the_run_loudly(
        self, runner_storage: Storage, style: str
    ) -> None:
        storage = runner_storage
        wf: Workflow[Any, Any] | None = None
        faulty = FaultyStorage(storage)
        faulty.fail(
            "put", key=lambda key: wf is not None and key == wf.store.step_key("g9", "quick@0")
        )

        @step(name="quick")
        async def quick() -> str:
            return "done"

        async def main(_: Any) -> str:
            return await quick()

        wf = _workflow(main, STYLES[style](faulty))
        try:
            result = await _bounded(wf.run(None, run_id="g9"), PATIENCE, "the run to end")
        except CheckpointSaveError:
            return
        fail(
            "G9: a failed save must fail the run",
            expected="CheckpointSaveError",
            observed=f"the run ended {result.status!r}",
        )
