"""The conformance groups for a LangGraph checkpointer (a ``BaseCheckpointSaver``).

A saver joins with one fixture and one empty class::

    class TestMySaver(SaverConformance):
        @pytest.fixture
        def saver_factory(self):
            return my_saver_factory  # or an EcosystemTarget

Groups (each a mixin of its own, all in `SaverConformance`):

``semantics``
    ``langgraph-checkpoint-conformance``, LangGraph's own suite, one test per
    capability (``put``, ``put_writes``, ``get_tuple``, ``list``,
    ``delete_thread`` are its base; ``delete_for_runs``, ``copy_thread`` and
    ``prune`` are skipped when the saver does not implement them).
``cancellation``
    a call cancelled while the backend is held ends within the bound, raises
    ``CancelledError`` and does not land afterwards (watched through a second
    instance), and the next call gets its own answer; cancelled at each
    await point, a call is whole or absent and never swallows the cancel.
``concurrency``
    two instances on one thread lose no checkpoint and no write, agree on the
    newest checkpoint, never show a torn checkpoint, and keep LangGraph's
    rules for parents and pending writes.
``isolation``
    mutating what was passed to ``aput``/``aput_writes``, or what was
    loaded, changes nothing stored.
``durability``
    (a target that says it is durable) a checkpoint survives reopening, and
    every checkpoint acknowledged before a SIGKILL mid-write is there, whole.
``hygiene``
    every test is checked for never-awaited coroutines, pending tasks,
    threads and descriptors left after close.
``scenarios``
    LangGraph's own runner over the saver: parallel nodes with one failing,
    interrupt and resume, a cancelled ``ainvoke`` while the saver hangs.
"""

from __future__ import annotations

import asyncio
import gc
import operator
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Annotated, Any, ClassVar, Literal, TypedDict

import pytest

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        BaseCheckpointSaver,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        empty_checkpoint,
        get_checkpoint_metadata,
    )
    from langgraph.checkpoint.base.id import uuid6
except ModuleNotFoundError as _exc:  # pragma: no cover - exercised without the extra
    raise ModuleNotFoundError(
        f"the LangGraph groups need langgraph ({_exc}); "
        'install it with: pip install "checkpointkit[langgraph]"',
        name=_exc.name,
    ) from _exc

from ..cancelling import next_calls
from ..checks import fail, joined
from ..fixtures import slow
from ..settings import NOT_EXERCISED
from ..together import together
from .coverage import SAVER_READS_AFTER, SAVER_SEQUENCES, lengths, writes_before
from .filters import FILTER_KEYS, FILTER_ROWS, FILTER_VALUES, REFUSABLE, TEXT_TWINS, columns_of
from .harness import (
    LENGTHS_HINT,
    PAGES_HINT,
    SIZES_HINT,
    VALUE_SHAPES,
    EcosystemFixtures,
    cancel_a_read_then_read_again,
    cancel_at_each_step,
    cancel_while_held,
    counted,
    crash_writer,
    finish,
    held,
    judge,
    library,
    need,
    no_hold_reason,
    read_back_wrong,
    same_value,
    sized_values,
)
from .ids import ID_GROUPS
from .namespaces import NAMESPACE_GROUPS
from .target import EcosystemTarget

__all__ = [
    "HangingSaver",
    "SaverCancellationTests",
    "SaverConcurrencyTests",
    "SaverConformance",
    "SaverDurabilityTests",
    "SaverFixtures",
    "SaverHygieneTests",
    "SaverIsolationTests",
    "SaverScenarioTests",
    "SaverSemanticsTests",
    "checkpoint_of",
    "config_of",
    "native_level",
]

CAPABILITIES = (
    "put",
    "put_writes",
    "get_tuple",
    "list",
    "delete_thread",
    "delete_for_runs",
    "copy_thread",
    "prune",
)
BASE_CAPABILITIES = CAPABILITIES[:5]


# -- building checkpoints ---------------------------------------------------------------------
def config_of(thread: str, checkpoint_id: str | None = None, ns: str = "") -> RunnableConfig:
    """A ``RunnableConfig`` naming a thread (and a checkpoint)."""
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def checkpoint_of(
    saver: BaseCheckpointSaver[Any], values: dict[str, Any], *, previous: Checkpoint | None = None
) -> tuple[Checkpoint, dict[str, Any]]:
    """A new checkpoint holding ``values`` (a fresh, increasing id) and its new versions."""
    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid6(clock_seq=-1))
    old = {} if previous is None else previous["channel_versions"]
    versions = {ch: saver.get_next_version(old.get(ch), None) for ch in values}
    checkpoint["channel_values"] = dict(values)
    checkpoint["channel_versions"] = {**old, **versions}
    return checkpoint, versions


async def put(
    saver: BaseCheckpointSaver[Any],
    thread: str,
    values: dict[str, Any],
    *,
    parent: str | None = None,
    step: int = 0,
    run: str | None = None,
) -> str:
    """``aput`` a checkpoint of ``values`` on ``thread`` after ``parent`` (its metadata
    naming the run ``run``, if given); its id."""
    checkpoint, versions = checkpoint_of(saver, values)
    metadata = CheckpointMetadata(source="loop", step=step)
    if run is not None:
        metadata["run_id"] = run
    await saver.aput(config_of(thread, parent), checkpoint, metadata, versions)
    return checkpoint["id"]


async def get(
    saver: BaseCheckpointSaver[Any], thread: str, checkpoint_id: str | None = None
) -> CheckpointTuple | None:
    """``aget_tuple`` of a checkpoint (the newest without an id)."""
    return await saver.aget_tuple(config_of(thread, checkpoint_id))


def _id_of(t: CheckpointTuple | None) -> str | None:
    return None if t is None else str(t.config["configurable"]["checkpoint_id"])


async def _ids(
    saver: BaseCheckpointSaver[Any], thread: str, filter: dict[str, Any] | None = None
) -> list[str]:
    return [
        str(t.config["configurable"]["checkpoint_id"])
        async for t in saver.alist(config_of(thread), filter=filter)
    ]


ODD_METADATA: dict[str, Any] = {
    "big": 2**53 + 1,
    "largest": 2**63 - 1,
    "below": -(2**53) - 1,
    "nothing": None,
    "nested": {"user": {"id": "u-1", "roles": ["admin", None, 3]}, "empty": {}},
    "ratio": 0.1,
    "flag": False,
    "\u043a\u043b\u044e\u0447": "\u0437\u043d\u0430\u0447\u0435\u043d\u0438\u0435",
    "\u540d\u524d \U0001f389": "\u3042",
}
"""The metadata of `test_metadata_comes_back_as_put`, beside LangGraph's ``source`` and
``step``: what an application's ``config["metadata"]`` may hold and JSON keeps."""

VERSIONS = 100_001
"""Versions of `test_next_versions_keep_increasing_as_langgraph_compares_them` (past
padding to four digits, and to five)."""

MANY = 1000
"""Channels of one checkpoint, and writes of one ``aput_writes`` call, in
`test_a_checkpoint_of_many_channels_and_writes_comes_back_whole`."""


def _same_value(got: Any, want: Any) -> bool:
    """Whether ``got`` equals ``want`` with every value of the same kind (``True`` is not
    ``1``, ``2.0`` not ``2``), whatever the order of an object's keys."""
    if isinstance(want, dict):
        return (
            isinstance(got, dict)
            and got.keys() == want.keys()
            and all(_same_value(got[k], v) for k, v in want.items())
        )
    if isinstance(want, list):
        return (
            isinstance(got, list | tuple)
            and len(got) == len(want)
            and all(_same_value(g, w) for g, w in zip(got, want, strict=True))
        )
    return type(got) is type(want) and bool(got == want)


PENDING_WRITES: tuple[tuple[str, str, list[tuple[str, Any]]], ...] = (
    ("task-b", "~b", [("log", "b1"), ("log", "b2"), ("other", {"n": 1}), ("log", "b3")]),
    ("task-a", "~b", [("log", "a1"), ("log", "a2")]),
    ("task-c", "~a", [("log", "c1")]),
)
"""The writes of `test_pending_writes_come_back_whole_and_in_order`: (task_id, task_path,
the writes of one ``aput_writes`` call)."""


def _task_order(writes: Sequence[Sequence[Any]]) -> list[str]:
    """The task ids of ``writes`` (``(task_id, channel, value)``), each once, in order."""
    return list(dict.fromkeys(str(w[0]) for w in writes))


def _writes(t: CheckpointTuple | None) -> dict[tuple[str, str], Any]:
    return {} if t is None else {(w[0], w[1]): w[2] for w in (t.pending_writes or [])}


def native_level(outcomes: Mapping[str, str]) -> str:
    """langgraph-checkpoint-conformance's level from our per-capability outcomes."""
    base_ok = [outcomes.get(c) == "passed" for c in BASE_CAPABILITIES]
    detected = [c for c, o in outcomes.items() if o != "skipped"]
    if all(base_ok) and all(outcomes[c] == "passed" for c in detected):
        return "FULL"
    if all(base_ok):
        return "BASE+PARTIAL"
    return "BASE" if any(base_ok) else "NONE"


# -- fixtures ------------------------------------------------------------------------------------
class SaverFixtures(EcosystemFixtures):
    """Fixtures of the saver groups; override ``saver_factory``."""

    @pytest.fixture
    def saver_factory(self) -> EcosystemTarget | Callable[..., Any]:
        """The saver class or factory (or an `EcosystemTarget`); override this.

        Raises:
            NotImplementedError: until a subclass overrides it.
        """
        raise NotImplementedError(
            "override the saver_factory fixture: return a saver class, a factory of savers "
            "or an EcosystemTarget"
        )

    @pytest.fixture
    def eco_target(self, saver_factory: Any) -> EcosystemTarget:
        """The target made from ``saver_factory``."""
        if isinstance(saver_factory, EcosystemTarget):
            return saver_factory
        return EcosystemTarget("langgraph", saver_factory)

    @pytest.fixture
    def thread(self) -> str:
        """A thread id of its own for the test."""
        return f"t-{uuid6().hex[:12]}"


# -- semantics: LangGraph's own suite --------------------------------------------------------------
class SaverSemanticsTests(SaverFixtures):
    """langgraph-checkpoint-conformance, one test per capability."""

    conformance_group: ClassVar[str | None] = "semantics"

    @pytest.mark.parametrize("capability", CAPABILITIES)
    async def test_langgraph_checkpoint_conformance(
        self, capability: str, eco_target: EcosystemTarget
    ) -> None:
        from langgraph.checkpoint.conformance import checkpointer_test, validate

        @checkpointer_test(name=eco_target.name)
        async def fresh() -> AsyncIterator[BaseCheckpointSaver[Any]]:
            location = _fresh_location(eco_target)
            async with eco_target.open(location=location) as saver:
                yield saver

        report = await validate(fresh, capabilities={capability})
        result = report.results[capability]
        if not result.detected:
            if capability in BASE_CAPABILITIES:
                fail(
                    f"langgraph-checkpoint-conformance needs the base capability {capability!r}",
                    expected=f"the saver to implement a{capability}",
                    observed="it does not (LangGraph's suite did not detect it)",
                    detail="implement the async method of BaseCheckpointSaver",
                )
            pytest.skip(f"the saver does not implement a{capability} (an optional capability)")
        if not result.passed:
            shown = "; ".join(result.failures[:5])
            fail(
                f"langgraph-checkpoint-conformance's {capability!r} tests must pass",
                expected="every test to pass",
                observed=f"{result.tests_failed} of {result.tests_failed + result.tests_passed} "
                f"failed: {shown}",
                detail="run langgraph-checkpoint-conformance on the saver for the full output",
            )


def _fresh_location(target: EcosystemTarget) -> str | None:
    from ..target import new_location

    return new_location() if target.reopens else None


# -- cancellation ----------------------------------------------------------------------------------
class SaverCancellationTests(SaverFixtures):
    """A cancelled call ends promptly, lands never after, and leaves the saver healthy."""

    conformance_group: ClassVar[str | None] = "cancellation"

    async def _cancel_held_put(
        self,
        target: EcosystemTarget,
        location: str | None,
        thread: str,
        bound: float,
        watch: Callable[[str], Awaitable[None]] | None = None,
    ) -> tuple[Any, str, str | None]:
        """Cancel an aput while held, release, then put again on the same instance.

        With ``watch``, a cancelled aput's checkpoint is watched (``watch(its id)``) once
        the hold is released, while the instance is still open: a write that goes on in a
        thread or a task may land then, and not once the instance is closed.

        Returns the outcome, the cancelled checkpoint's id and the next one's
        (None when the next call did not get its own answer).
        """
        async with held(target, location) as h:
            need(h is not None, no_hold_reason(target))
            assert h is not None
            checkpoint, versions = checkpoint_of(h.instance, {"v": "cancelled"})
            outcome = await cancel_while_held(
                lambda: h.instance.aput(config_of(thread), checkpoint, {"step": 1}, versions),
                wait=max(5.0, 10 * bound),
            )
            await h.release()
            await finish(outcome.task)
            if watch is not None and outcome.result == "cancelled":
                await watch(checkpoint["id"])
            # The same instance's next call, on the same thread: it must get its own answer.
            next_id = await put(h.instance, thread, {"v": "next"}, step=2)
            got = await get(h.instance, thread, next_id)
            ok = got is not None and got.checkpoint["channel_values"] == {"v": "next"}
        return outcome, checkpoint["id"], next_id if ok else None

    async def test_cancelled_aput_ends_promptly_while_held(
        self, eco_target: EcosystemTarget, location: str | None, thread: str, cancel_bound: float
    ) -> None:
        outcome, _, _ = await self._cancel_held_put(eco_target, location, thread, cancel_bound)
        if outcome.seconds > cancel_bound or outcome.result != "cancelled":
            fail(
                "a cancelled aput must raise CancelledError promptly while the backend is held",
                expected=f"CancelledError within {cancel_bound:g} s",
                observed=f"the call {outcome.result} after {outcome.seconds:.2f} s",
                detail="do not catch CancelledError (re-raise it after cleanup), and do not "
                "wait for the backend's reply inside a shield or a thread join",
            )

    async def test_cancelled_aput_does_not_land_later(
        self,
        eco_target: EcosystemTarget,
        location: str | None,
        thread: str,
        cancel_bound: float,
        settle_window: float,
    ) -> None:
        need(
            location is not None,
            NOT_EXERCISED + "the factory takes no location: no second instance to watch through",
        )

        async def watch(checkpoint_id: str) -> None:  # the cancelled instance still open
            await _watch_absent(eco_target, location, thread, checkpoint_id, settle_window)

        outcome, checkpoint_id, _ = await self._cancel_held_put(
            eco_target, location, thread, cancel_bound, watch
        )
        if outcome.result != "cancelled":
            pytest.skip(f"the cancelled aput {outcome.result} (see the promptness test)")
        await watch(checkpoint_id)  # and once it is closed

    async def test_call_after_cancel_gets_its_own_answer(
        self, eco_target: EcosystemTarget, location: str | None, thread: str
    ) -> None:
        _, _, next_id = await self._cancel_held_put(eco_target, location, thread, 0.5)
        if next_id is None:
            fail(
                "after a cancelled call, the same instance's next call must get its own answer",
                expected="the next aput's checkpoint, read back with its values",
                observed="it is missing or has other values",
                detail="a cancelled call must leave no half-sent request or unread reply on the "
                "connection",
            )

    async def test_cancel_at_each_step_is_whole_or_absent(
        self, instance: Any, second: Any, thread: str, settle_window: float, two_instances: bool
    ) -> None:
        saver: BaseCheckpointSaver[Any] = instance
        ids: list[str] = []

        def make() -> Any:
            n = len(ids)
            checkpoint, versions = checkpoint_of(saver, {"v": n, "w": [n] * 3})
            ids.append(checkpoint["id"])
            return saver.aput(config_of(thread), checkpoint, {"step": n}, versions)

        async def visible(k: int) -> bool:
            return await get(second, thread, ids[k]) is not None

        outcomes = await cancel_at_each_step(make, steps=40, visible=visible)
        await _next_call_answers(saver, thread, "aput cancelled at each step")
        for k, outcome, _ in outcomes:
            if outcome == "swallowed":
                fail(
                    "a cancelled aput must raise CancelledError",
                    expected="CancelledError",
                    observed=f"it returned normally when cancelled after {k} loop iterations",
                    detail="never swallow CancelledError: re-raise it after cleanup",
                )
            if outcome.startswith("raised"):
                fail(
                    "a cancelled aput must raise CancelledError, not another error",
                    expected="CancelledError",
                    observed=f"it {outcome} when cancelled after {k} loop iterations",
                )
        await asyncio.sleep(min(settle_window, 0.5))
        for k, outcome, seen in outcomes:
            got = await get(second, thread, ids[k])
            if outcome == "completed" and got is None:
                fail(
                    "an aput that returned must be stored",
                    expected=f"checkpoint {ids[k]}",
                    observed="it is missing",
                )
            if got is not None and got.checkpoint["channel_values"] != {"v": k, "w": [k] * 3}:
                fail(
                    "a cancelled aput must leave the checkpoint whole or absent",
                    expected=f"absent, or {{'v': {k}, 'w': {[k] * 3}}}",
                    observed=f"{got.checkpoint['channel_values']} after a cancel at step {k}",
                    detail="write the checkpoint and its values in one atomic write (or write "
                    "the values first and the checkpoint that names them last)",
                )
            if two_instances and outcome == "cancelled" and not seen and got is not None:
                fail(
                    "a cancelled aput must not land after CancelledError",
                    expected=f"checkpoint {ids[k]}, absent when the cancel returned, "
                    "to stay absent",
                    observed="a second instance saw it later (cancelled after "
                    f"{k} loop iterations)",
                    detail="the write went on after the cancel (a thread, a task): wait for it to "
                    "end before raising CancelledError",
                )

    async def test_cancelled_aput_writes_is_whole_or_absent(
        self, instance: Any, second: Any, thread: str, settle_window: float
    ) -> None:
        """``aput_writes`` of one task's four writes, cancelled after 0, 1, 2, ... event-loop
        iterations: each call's writes are all stored or none (read through the second
        instance), and one that returned has all four. LangGraph counts a task with any
        stored write as done: on resume it does not run it again and applies what is
        there, so a saver that stores a call's writes one request at a time, cancelled
        half-way, makes the run go on with part of a node's update."""
        saver: BaseCheckpointSaver[Any] = instance
        if "aput_writes" not in set(implemented_methods(saver)):
            pytest.skip("the saver implements no aput_writes")
        checkpoint_id = await put(saver, thread, {"v": 0})
        config = config_of(thread, checkpoint_id)
        calls: list[str] = []

        def make() -> Any:
            task = f"task-{len(calls)}"
            calls.append(task)
            writes = [(f"ch{i}", f"{task}:{i}") for i in range(4)]
            return saver.aput_writes(config, writes, task_id=task, task_path="~a")

        outcomes = await cancel_at_each_step(make, steps=40)
        await _next_call_answers(saver, thread, "aput_writes cancelled at each step")
        await asyncio.sleep(min(settle_window, 0.5))
        writes = _writes(await get(second, thread, checkpoint_id))
        for k, outcome, _ in outcomes:
            task = calls[k]
            stored = sorted(ch for (t, ch) in writes if t == task)
            if outcome == "completed" and len(stored) != 4:
                fail(
                    "an aput_writes that returned must have stored every write",
                    expected=f"the 4 writes of {task}",
                    observed=f"{len(stored)} of them: {stored}",
                )
            if stored and len(stored) != 4:
                fail(
                    "a cancelled aput_writes must store all of its writes or none",
                    expected=f"none or all 4 writes of {task}",
                    observed=f"{len(stored)} of them ({stored}) after a cancel at step {k}",
                    detail="write one call's writes in one atomic request (one transaction, one "
                    "record, one batch): LangGraph takes a task with any stored write for "
                    "done, and resumes with part of its update",
                )

    async def test_cancelled_delete_thread_leaves_each_checkpoint_whole_or_gone(
        self, instance: Any, second: Any, thread: str
    ) -> None:
        """``adelete_thread`` of a thread of three checkpoints (each with its values and a
        pending write), cancelled after 0, 1, 2, ... event-loop iterations, one new thread
        per attempt: every checkpoint still there is whole (its values and its write), as
        LangGraph's savers delete the checkpoints before what they reference. A saver that
        deletes the values or the writes first, cancelled half-way, leaves checkpoints
        that load with missing values: the next run continues from a state that never
        existed."""
        saver: BaseCheckpointSaver[Any] = instance
        has = set(implemented_methods(saver))
        if "adelete_thread" not in has or "aput_writes" not in has:
            pytest.skip("the saver implements no adelete_thread or no aput_writes")
        threads: list[tuple[str, list[str]]] = []

        async def fill(name: str) -> list[str]:
            ids: list[str] = []
            previous: Checkpoint | None = None
            for n in range(3):
                checkpoint, versions = checkpoint_of(
                    saver, {"v": n, "w": [n] * 3}, previous=previous
                )
                parent = None if previous is None else previous["id"]
                metadata = CheckpointMetadata(source="loop", step=n)
                await saver.aput(config_of(name, parent), checkpoint, metadata, versions)
                await saver.aput_writes(config_of(name, checkpoint["id"]), [("ch", n)], "t")
                ids.append(checkpoint["id"])
                previous = checkpoint
            return ids

        async def prepare(k: int) -> None:
            name = f"{thread}-{k}"
            threads.append((name, await fill(name)))

        def make() -> Any:
            return saver.adelete_thread(threads[-1][0])

        outcomes = await cancel_at_each_step(make, steps=40, prepare=prepare)
        await _next_call_answers(saver, thread, "adelete_thread cancelled at each step")
        for (k, outcome, _), (name, ids) in zip(outcomes, threads, strict=False):
            for n, checkpoint_id in enumerate(ids):
                got = await get(second, name, checkpoint_id)
                if got is None:
                    continue
                if outcome == "completed":
                    fail(
                        "an adelete_thread that returned leaves nothing of the thread",
                        expected="no checkpoint",
                        observed=f"checkpoint {checkpoint_id} of {name} is there",
                    )
                values = got.checkpoint["channel_values"]
                if values != {"v": n, "w": [n] * 3} or _writes(got) != {("t", "ch"): n}:
                    fail(
                        "a cancelled adelete_thread leaves each checkpoint whole or gone",
                        expected=f"checkpoint {checkpoint_id} gone, or with values "
                        f"{{'v': {n}, 'w': {[n] * 3}}} and its write",
                        observed=f"values {values}, writes {_writes(got)} after a cancel at "
                        f"step {k}",
                        detail="delete the checkpoints first and what they reference (values, "
                        "writes) after them, or all in one transaction",
                    )


async def _next_call_answers(saver: Any, thread: str, after: str) -> None:
    """After cancelled calls (``after`` says which), the same instance's next ``aput`` and
    ``aget_tuple`` return within the storage suite's bound on the calls after a cancelled
    one (`next_calls`) and give the new checkpoint: a call cancelled while it held a lock
    (an ``acquire()`` whose ``release()`` is not in a ``finally``) makes every later call
    wait forever. Needs no hold: the cancels land wherever the calls awaited."""
    __tracebackhide__ = True
    async with next_calls(f"{thread}-next", after):
        checkpoint_id = await put(saver, f"{thread}-next", {"v": "next"}, step=1)
        got = await get(saver, f"{thread}-next", checkpoint_id)
    if got is None or got.checkpoint["channel_values"] != {"v": "next"}:
        fail(
            "after cancelled calls, the same instance's next call must get its own answer",
            expected="the next aput's checkpoint, read back with its values",
            observed="it is missing" if got is None else f"{got.checkpoint['channel_values']}",
            detail=f"after {after}: a cancelled call must leave no half-sent request or "
            "unread reply on the connection",
        )


async def _watch_absent(
    target: EcosystemTarget, location: str | None, thread: str, checkpoint_id: str, window: float
) -> None:
    start = time.monotonic()
    async with target.open(location=location) as observer:
        while True:
            got = await get(observer, thread, checkpoint_id)
            if got is not None:
                fail(
                    "a cancelled aput must not land after CancelledError",
                    expected=f"checkpoint {checkpoint_id} never to appear",
                    observed=f"a second instance saw it {time.monotonic() - start:.2f} s after "
                    "the hold was released",
                    detail="the write went on after the cancel (a thread, a task or bytes already "
                    "sent): wait for it to end before raising CancelledError, or make it "
                    "conditional on a fence that the cancel moves",
                )
            if time.monotonic() - start >= window:
                return
            await asyncio.sleep(0.02)


# -- concurrency -----------------------------------------------------------------------------------
class SaverConcurrencyTests(SaverFixtures):
    """Two instances on one thread: nothing lost, one newest, nothing torn."""

    conformance_group: ClassVar[str | None] = "concurrency"

    async def test_two_instances_keep_every_checkpoint(
        self, instance: Any, second: Any, thread: str, eco_target: EcosystemTarget
    ) -> None:
        parent = await put(instance, thread, {"v": "parent"})
        n = eco_target.count(10)

        async def writer(saver: Any, tag: str) -> list[str]:
            ids = []
            for i in range(n):
                ids.append(await put(saver, thread, {"v": f"{tag}{i}"}, parent=parent, step=i))
                await asyncio.sleep(0)
            return ids

        a, b = await together(writer(instance, "a"), writer(second, "b"))
        stored = set(await _ids(instance, thread))
        lost = [i for i in a + b if i not in stored]
        if lost:
            fail(
                "two instances putting checkpoints on one thread must lose none",
                expected=f"all {2 * n + 1} checkpoints listed",
                observed=f"{len(lost)} missing (first {lost[0]})",
                detail="store each checkpoint under its own id; never rewrite a shared list",
            )
        for checkpoint_id in (a + b)[:: max(1, n // 3)]:
            got = await get(second, thread, checkpoint_id)
            parent_id = (
                None
                if got is None or got.parent_config is None
                else got.parent_config["configurable"].get("checkpoint_id")
            )
            if parent_id != parent:
                fail(
                    "a checkpoint's parent is the checkpoint its aput config named",
                    expected=f"parent {parent} for {checkpoint_id}",
                    observed=f"parent {parent_id}",
                )

    async def test_latest_is_the_newest_checkpoint_under_two_instances(
        self, instance: Any, second: Any, thread: str, eco_target: EcosystemTarget
    ) -> None:
        # The slower of two instances: the older checkpoint's put lands after the newer's.
        older, older_versions = checkpoint_of(instance, {"v": -1})
        newer, newer_versions = checkpoint_of(instance, {"v": -3})
        await instance.aput(config_of(thread), newer, {"step": 2}, newer_versions)
        await second.aput(config_of(thread), older, {"step": 1}, older_versions)
        for who, saver in (("first", instance), ("second", second)):
            got = _id_of(await get(saver, thread))
            listed = await _ids(saver, thread)
            if got != newer["id"] or listed != [newer["id"], older["id"]]:
                fail(
                    "the latest checkpoint of a thread is the one with the greatest id, "
                    "whatever order the puts landed in",
                    expected=f"latest {newer['id']}, listed [{newer['id']}, {older['id']}]",
                    observed=f"the {who} instance's aget_tuple gave {got}, alist {listed} "
                    "(the older checkpoint was put last)",
                    detail="order by checkpoint id (LangGraph's ids increase with time), not "
                    "by insertion order (a rowid, an append-only log); move a shared head only "
                    "forward (compare-and-swap)",
                )
        n = eco_target.count(12)
        made: list[str] = []

        async def one(saver: Any, i: int) -> None:
            made.append(await put(saver, thread, {"v": i}, step=i))

        for i in range(0, n, 2):
            await together(one(instance, i), one(second, i + 1))
            newest = max(made)
            for who, saver in (("first", instance), ("second", second)):
                got = _id_of(await get(saver, thread))
                if got != newest:
                    fail(
                        "the latest checkpoint of a thread is the one with the greatest id",
                        expected=f"{newest} (the newest of {len(made)})",
                        observed=f"the {who} instance's aget_tuple gave {got}",
                        detail="order by checkpoint id, not by write time or a per-instance "
                        "head; move a shared head only forward (compare-and-swap)",
                    )

    async def test_concurrent_put_writes_keep_every_write(
        self, instance: Any, second: Any, thread: str, eco_target: EcosystemTarget
    ) -> None:
        checkpoint_id = await put(instance, thread, {"v": 0})
        n = eco_target.count(8)
        config = config_of(thread, checkpoint_id)

        async def tasks(saver: Any, tag: str) -> None:
            for i in range(n):
                await saver.aput_writes(config, [("ch", f"{tag}{i}")], task_id=f"{tag}-{i}")
                await asyncio.sleep(0)

        await together(tasks(instance, "a"), tasks(second, "b"))
        writes = _writes(await get(instance, thread, checkpoint_id))
        missing = [f"{t}-{i}" for t in "ab" for i in range(n) if (f"{t}-{i}", "ch") not in writes]
        if missing:
            fail(
                "pending writes of concurrent tasks must all be kept",
                expected=f"{2 * n} writes",
                observed=f"{len(missing)} lost (first from task {missing[0]})",
                detail="store each (task, index) write on its own; never read-modify-write a list",
            )

    async def test_read_during_writes_is_never_torn(
        self, instance: Any, second: Any, thread: str, eco_target: EcosystemTarget
    ) -> None:
        n = eco_target.count(15)
        done = asyncio.Event()

        async def writer() -> None:
            try:
                for i in range(n):
                    await put(instance, thread, {"a": i, "b": i, "blob": str(i) * 200}, step=i)
                    await asyncio.sleep(0)
            finally:
                done.set()

        async def reader() -> None:
            while not done.is_set():
                got = await get(second, thread)
                if got is not None:
                    values = got.checkpoint["channel_values"]
                    step = got.metadata.get("step") if got.metadata else None
                    a, b = values.get("a"), values.get("b")
                    if a != b or values.get("blob") != str(a) * 200 or step != a:
                        fail(
                            "a checkpoint read while another is written must be whole",
                            expected="values and metadata of one checkpoint",
                            observed=f"a={a!r}, b={b!r}, step={step!r}",
                            detail="publish a checkpoint only after its values and metadata "
                            "are stored (one atomic write, or the record last)",
                        )
                await asyncio.sleep(0)

        await together(writer(), reader())

    async def test_parents_and_pending_writes_follow_langgraphs_rules(
        self, instance: Any, second: Any, thread: str
    ) -> None:
        first = await put(instance, thread, {"v": 1})
        child = await put(second, thread, {"v": 2}, parent=first)
        got = await get(instance, thread, child)
        parent = (
            None
            if got is None or got.parent_config is None
            else got.parent_config["configurable"].get("checkpoint_id")
        )
        if parent != first:
            fail(
                "a checkpoint put after another names it as parent, seen by any instance",
                expected=f"parent {first}",
                observed=f"parent {parent}",
            )
        config = config_of(thread, child)
        await instance.aput_writes(config, [("ch", "first")], task_id="task")
        await second.aput_writes(config, [("ch", "second")], task_id="task")
        await instance.aput_writes(config, [("__error__", "old error")], task_id="task-e")
        await second.aput_writes(config, [("__error__", "new error")], task_id="task-e")
        # A task that wrote, then failed: its error is kept beside its regular write.
        await instance.aput_writes(config, [("__error__", "its error")], task_id="task")
        tasks = {"aput_writes": ("task", "task-e")}
        if "put_writes" in set(implemented_methods(instance)):  # the same, by the sync method
            tasks["put_writes"] = ("task-s", "task-se")
            for saver, n in ((instance, "first"), (second, "second")):
                await asyncio.to_thread(saver.put_writes, config, [("ch", n)], "task-s")
            for saver, n in ((instance, "old error"), (second, "new error")):
                await asyncio.to_thread(saver.put_writes, config, [("__error__", n)], "task-se")
            error = [("__error__", "its error")]
            await asyncio.to_thread(instance.put_writes, config, error, "task-s")
        writes = _writes(await get(instance, thread, child))
        for how, (regular, special) in tasks.items():
            if writes.get((regular, "__error__")) != "its error" or (
                writes.get((regular, "ch")) is None
            ):
                fail(
                    "a special write (error, interrupt) of a task is kept beside its regular "
                    "writes",
                    expected=f"the error 'its error' of task {regular!r} (by {how}), beside its "
                    "write 'first' to 'ch'",
                    observed=f"error {writes.get((regular, '__error__'))!r}, write "
                    f"{writes.get((regular, 'ch'))!r}",
                    detail="index a write by WRITES_IDX_MAP.get(channel, position): special "
                    "writes take negative indexes, so that they never replace a regular write "
                    "of their task",
                )
            if writes.get((regular, "ch")) != "first":
                fail(
                    "a regular write of a (task, index) already stored is kept, not replaced",
                    expected=f"'first' (the first write of task {regular!r}, index 0, by {how})",
                    observed=f"{writes.get((regular, 'ch'))!r}",
                    detail="LangGraph's savers skip a regular write whose (task_id, idx) "
                    "exists, by put_writes as by aput_writes",
                )
            if writes.get((special, "__error__")) != "new error":
                fail(
                    "a special write (error, interrupt) of a task replaces the earlier one",
                    expected=f"'new error' (by {how})",
                    observed=f"{writes.get((special, '__error__'))!r}",
                    detail="writes to special channels (negative index) overwrite",
                )


# -- isolation -----------------------------------------------------------------------------------
class SaverIsolationTests(SaverFixtures):
    """Mutating what was put or loaded changes nothing stored."""

    conformance_group: ClassVar[str | None] = "isolation"

    async def test_mutating_after_aput_changes_nothing_stored(
        self, instance: Any, thread: str
    ) -> None:
        values: dict[str, Any] = {"items": [1, 2, 3], "state": {"k": "v"}}
        checkpoint, versions = checkpoint_of(instance, values)
        metadata: dict[str, Any] = {"step": 1, "tags": ["a"]}
        await instance.aput(config_of(thread), checkpoint, metadata, versions)
        values["items"].append(4)
        checkpoint["channel_values"]["items"].append(5)
        checkpoint["channel_values"]["state"]["k"] = "changed"
        checkpoint["channel_values"]["new"] = True
        metadata["tags"].append("b")
        for how, checkpoint_id in (("by its id", checkpoint["id"]), ("as the latest", None)):
            got = await get(instance, thread, checkpoint_id)
            stored = None if got is None else got.checkpoint["channel_values"]
            tags = None if got is None else got.metadata.get("tags")
            if stored != {"items": [1, 2, 3], "state": {"k": "v"}} or tags != ["a"]:
                fail(
                    "mutating a checkpoint after aput must change nothing stored",
                    expected="{'items': [1, 2, 3], 'state': {'k': 'v'}} and tags ['a']",
                    observed=f"aget_tuple {how} gave {stored} and tags {tags}",
                    detail="serialize (or deep-copy) the checkpoint inside aput; do not keep "
                    "the caller's objects (nor in a cache of the latest checkpoint)",
                )

    async def test_mutating_a_loaded_checkpoint_changes_nothing_stored(
        self, instance: Any, thread: str
    ) -> None:
        checkpoint_id = await put(instance, thread, {"items": [1, 2, 3]})
        config = config_of(thread, checkpoint_id)
        await instance.aput_writes(config, [("ch", [1, 2])], task_id="t")
        first = await get(instance, thread, checkpoint_id)
        assert first is not None
        first.checkpoint["channel_values"]["items"].append(4)
        first.checkpoint["channel_values"]["extra"] = 1
        first.metadata["extra"] = 1  # type: ignore[typeddict-unknown-key]
        for write in first.pending_writes or []:
            if isinstance(write[2], list):
                write[2].append(99)
        async for listed in instance.alist(config_of(thread)):
            listed.checkpoint["channel_values"]["items"].append(5)
            for write in listed.pending_writes or []:
                if isinstance(write[2], list):
                    write[2].append(98)
        again = await get(instance, thread, checkpoint_id)
        relisted = [t.checkpoint["channel_values"] async for t in instance.alist(config_of(thread))]
        stored = None if again is None else again.checkpoint["channel_values"]
        written = _writes(again).get(("t", "ch"))
        extra = None if again is None else again.metadata.get("extra")
        if (
            stored != {"items": [1, 2, 3]}
            or relisted != [{"items": [1, 2, 3]}]
            or written != [1, 2]
            or extra is not None
        ):
            fail(
                "mutating a loaded or listed checkpoint, its metadata or its pending writes "
                "must change nothing stored",
                expected="{'items': [1, 2, 3]} from aget_tuple and from alist, the write "
                "[1, 2], no metadata key 'extra'",
                observed=f"{stored} and {relisted}, the write {written!r}, metadata "
                f"'extra' {extra!r}",
                detail="deserialize a new object on every aget_tuple and alist (the "
                "checkpoint, its metadata and each pending write's value); never return the "
                "stored one or one kept in a decode cache",
            )

    async def test_mutating_after_aput_writes_changes_nothing_stored(
        self, instance: Any, thread: str
    ) -> None:
        checkpoint_id = await put(instance, thread, {"v": 0})
        value = [1, 2]
        await instance.aput_writes(config_of(thread, checkpoint_id), [("ch", value)], task_id="t")
        value.append(3)
        stored = _writes(await get(instance, thread, checkpoint_id)).get(("t", "ch"))
        if stored != [1, 2]:
            fail(
                "mutating a write's value after aput_writes must change nothing stored",
                expected="[1, 2]",
                observed=f"{stored!r}",
                detail="serialize the writes inside aput_writes",
            )


# -- durability ------------------------------------------------------------------------------------
class SaverDurabilityTests(SaverFixtures):
    """What was acknowledged is there after reopening, and after a SIGKILL."""

    conformance_group: ClassVar[str | None] = "durability"

    async def test_checkpoint_survives_reopen(
        self, eco_target: EcosystemTarget, location: str | None, thread: str
    ) -> None:
        need(bool(eco_target.durable), f"{eco_target.name} does not say it is durable")
        need(
            location is not None,
            NOT_EXERCISED + "the factory takes no location: it cannot be reopened",
        )
        async with eco_target.open(location=location) as saver:
            checkpoint_id = await put(saver, thread, {"v": "kept"})
            await saver.aput_writes(config_of(thread, checkpoint_id), [("ch", "w")], task_id="t")
        async with eco_target.open(location=location) as saver:
            got = await get(saver, thread)
        if (
            _id_of(got) != checkpoint_id
            or got is None
            or got.checkpoint["channel_values"] != {"v": "kept"}
        ):
            fail(
                "a checkpoint must survive closing and reopening a durable saver",
                expected=f"{checkpoint_id} with {{'v': 'kept'}}",
                observed=f"{_id_of(got)}",
            )
        if _writes(got).get(("t", "ch")) != "w":
            fail(
                "pending writes must survive reopening",
                expected="the write 'w'",
                observed="it is gone",
            )

    async def test_sigkill_mid_write_keeps_every_acknowledged_checkpoint(
        self, eco_target: EcosystemTarget, location: str | None
    ) -> None:
        need(bool(eco_target.durable), f"{eco_target.name} does not say it is durable")
        need(
            location is not None,
            NOT_EXERCISED + "the factory takes no location: it cannot be reopened",
        )
        need(
            eco_target.spec is not None,
            NOT_EXERCISED + "the target has no importable MODULE:ATTR for a subprocess",
        )
        assert location is not None
        async with crash_writer(eco_target, location, acks=eco_target.count(20)) as acked:
            pass
        async with eco_target.open(location=location) as saver:
            for line in acked:
                checkpoint_id, _, n = line.partition(" ")
                got = await get(saver, "crash", checkpoint_id)
                if got is None or got.checkpoint["channel_values"] != {
                    "n": int(n),
                    "pad": "x" * 4096,
                }:
                    fail(
                        "every checkpoint acknowledged before a SIGKILL must be there, whole",
                        expected=f"checkpoint {checkpoint_id} (#{n})",
                        observed="it is missing" if got is None else "it is damaged",
                        detail="make aput return only after the write is durable (commit, fsync)",
                    )
            latest = await get(saver, "crash")
            if latest is None:
                fail(
                    "after a SIGKILL the newest checkpoint must be readable",
                    expected="one",
                    observed="none",
                )


# -- hygiene ---------------------------------------------------------------------------------------
class SaverHygieneTests(SaverFixtures):
    """Every operation, then close: nothing left behind (checked around the test)."""

    conformance_group: ClassVar[str | None] = "hygiene"

    async def test_every_operation_then_close_leaves_nothing_behind(
        self, eco_target: EcosystemTarget, location: str | None, thread: str
    ) -> None:
        async with eco_target.open(location=location) as saver:
            checkpoint_id = await put(saver, thread, {"v": 1})
            await saver.aput_writes(config_of(thread, checkpoint_id), [("ch", 1)], task_id="t")
            await get(saver, thread)
            await _ids(saver, thread)
            await saver.adelete_thread(thread)
            task = asyncio.ensure_future(put(saver, thread, {"v": 2}))
            await asyncio.sleep(0)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def test_listings_stopped_early_leave_nothing_behind(
        self, eco_target: EcosystemTarget, location: str | None, thread: str
    ) -> None:
        """A thread of three checkpoints, listed and left after the first: by ``alist``
        (an ``async for`` that breaks) and, where the saver has one, by the sync ``list``
        in a worker thread (a ``for`` that breaks), each then collected where it was left.
        Nothing may be left behind (the hygiene check around the test: no unraisable
        exception, no pending task, no open descriptor) and the saver's next call
        answers. A sync listing that drives ``alist`` from the calling thread
        (``run_coroutine_threadsafe(anext(...), loop)``) is finalized in that thread,
        outside the saver's event loop, when its caller stops early: LangGraph's
        ``AsyncSqliteSaver`` then fails to close its cursor."""
        async with eco_target.open(location=location) as saver:
            for step in range(3):
                await put(saver, thread, {"v": step})
            async for _ in saver.alist(config_of(thread)):
                break
            gc.collect()
            if "list" in set(implemented_methods(saver)):

                def first_only() -> None:
                    for _ in saver.list(config_of(thread)):
                        break
                    gc.collect()  # collected in the thread that left it

                await asyncio.to_thread(first_only)
            for _ in range(3):  # a finalizer handed back to the loop runs there
                await asyncio.sleep(0)
            ids = await _ids(saver, thread)
            if len(ids) != 3:
                fail(
                    "a listing stopped early must change nothing",
                    key=thread,
                    expected="the thread's 3 checkpoints listed by the next alist",
                    observed=f"{len(ids)} listed after listings stopped after their first",
                )


# -- scenarios: LangGraph's runner over the saver --------------------------------------------------
class HangingSaver(BaseCheckpointSaver[Any]):
    """Delegates to ``inner``; while `hang` is set, ``aput`` and ``aput_writes`` wait.

    They wait until `released` is set (or they are cancelled).

    Args:
        inner: the saver under test.
    """

    def __init__(self, inner: BaseCheckpointSaver[Any]) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner
        self.hang = False
        self.entered = asyncio.Event()
        self.released = asyncio.Event()

    async def _maybe_hang(self) -> None:
        if self.hang:
            self.entered.set()
            await self.released.wait()

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self.inner.aget_tuple(config)

    async def alist(
        self, config: RunnableConfig | None, **kwargs: Any
    ) -> AsyncIterator[CheckpointTuple]:
        async for t in self.inner.alist(config, **kwargs):
            yield t

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any, new_versions: Any
    ) -> RunnableConfig:
        await self._maybe_hang()
        return await self.inner.aput(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self._maybe_hang()
        await self.inner.aput_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await self.inner.adelete_thread(thread_id)

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.inner.get_next_version(current, channel)


class _State(TypedDict):
    log: Annotated[list[str], operator.add]


class _Count(TypedDict):
    n: int


def _parallel_graph(
    saver: BaseCheckpointSaver[Any], calls: dict[str, int], failing: list[bool]
) -> Any:
    from langgraph.graph import END, START, StateGraph

    def node(name: str) -> Callable[[_State], Any]:
        async def run(state: _State) -> dict[str, list[str]]:
            calls[name] = calls.get(name, 0) + 1
            if name == "c" and failing[0]:
                await asyncio.sleep(0.01)  # let a and b finish first
                raise RuntimeError("node c failed")
            return {"log": [name]}

        return run

    builder = StateGraph(_State)
    for name in ("a", "b", "c"):
        builder.add_node(name, node(name))  # type: ignore[call-overload]
        builder.add_edge(START, name)
        builder.add_edge(name, END)
    return builder.compile(checkpointer=saver)


class SaverScenarioTests(SaverFixtures):
    """LangGraph's runner over the saver: failure, interrupt, cancel."""

    conformance_group: ClassVar[str | None] = "scenarios"

    async def _judge(self, scenario: Callable[[Any, Any], Any], instance: Any, second: Any) -> None:
        from langgraph.checkpoint.memory import InMemorySaver

        @asynccontextmanager
        async def reference() -> AsyncIterator[tuple[Any, Any]]:
            saver = InMemorySaver()
            yield saver, saver

        await judge(scenario, (instance, second), reference, library("langgraph"))

    async def test_parallel_nodes_one_failing_keeps_completed_writes(
        self, instance: Any, second: Any, thread: str
    ) -> None:
        async def scenario(saver: Any, reader: Any) -> None:
            calls: dict[str, int] = {}
            failing = [True]
            config = config_of(thread)
            try:
                await _parallel_graph(saver, calls, failing).ainvoke({"log": []}, config)
            except RuntimeError:
                pass
            else:
                fail(
                    "a failing node fails the run", expected="RuntimeError", observed="it succeeded"
                )
            failing[0] = False
            result = await _parallel_graph(reader, calls, failing).ainvoke(None, config)
            if calls != {"a": 1, "b": 1, "c": 2}:
                fail(
                    "completed parallel nodes must not run again when the graph resumes after a "
                    "sibling failed",
                    expected="a and b once, c twice",
                    observed=f"calls {calls}",
                    detail="aput_writes must keep the writes of the nodes that completed, so that "
                    "the resumed run finds them",
                )
            if sorted(result["log"]) != ["a", "b", "c"]:
                fail(
                    "the resumed graph's state holds every node's write",
                    expected="a, b, c",
                    observed=f"{result['log']}",
                )

        await self._judge(scenario, instance, second)

    async def test_interrupt_and_resume(self, instance: Any, second: Any, thread: str) -> None:
        from langgraph.graph import END, START, StateGraph
        from langgraph.types import Command, interrupt

        calls: dict[str, int] = {}

        async def before(state: _State) -> dict[str, list[str]]:
            calls["before"] = calls.get("before", 0) + 1
            return {"log": ["before"]}

        async def ask(state: _State) -> dict[str, list[str]]:
            answer = interrupt("approve?")
            return {"log": [f"answer:{answer}"]}

        def build(saver: Any) -> Any:
            builder = StateGraph(_State)
            builder.add_node("before", before)
            builder.add_node("ask", ask)
            builder.add_edge(START, "before")
            builder.add_edge("before", "ask")
            builder.add_edge("ask", END)
            return builder.compile(checkpointer=saver)

        async def scenario(saver: Any, reader: Any) -> None:
            calls.clear()
            config = config_of(f"{thread}-{id(saver)}")
            first = await build(saver).ainvoke({"log": []}, config)
            if "__interrupt__" not in first:
                fail(
                    "a node calling interrupt() pauses the graph",
                    expected="an __interrupt__",
                    observed=f"{first}",
                )
            resumed = await build(reader).ainvoke(Command(resume="yes"), config)
            if resumed.get("log") != ["before", "answer:yes"] or calls != {"before": 1}:
                fail(
                    "a graph resumed after an interrupt continues from its checkpoint",
                    expected="log ['before', 'answer:yes'], 'before' run once",
                    observed=f"log {resumed.get('log')}, calls {calls}",
                )

        await self._judge(scenario, instance, second)

    async def test_a_loop_of_fifteen_updates_runs_every_step(
        self, instance: Any, second: Any, thread: str
    ) -> None:
        """A node that adds one to a counter until it reaches 15, through LangGraph's runner
        (which decides what runs next by comparing channel versions), then resumed through
        the second instance with 5 more: every step runs."""
        from langgraph.graph import END, START, StateGraph

        def build(saver: Any, until: int) -> Any:
            builder = StateGraph(_Count)
            builder.add_node("add", lambda state: {"n": state["n"] + 1})
            builder.add_edge(START, "add")
            builder.add_conditional_edges("add", lambda state: "add" if state["n"] < until else END)
            return builder.compile(checkpointer=saver)

        async def scenario(saver: Any, reader: Any) -> None:
            config: Any = {**config_of(f"{thread}-{id(saver)}"), "recursion_limit": 100}
            first = await build(saver, 15).ainvoke({"n": 0}, config)
            more = await build(reader, 20).ainvoke({"n": first["n"]}, config)
            if (first["n"], more["n"]) != (15, 20):
                fail(
                    "a graph that loops runs every step over the saver",
                    expected="n = 15 after the first run, 20 after the second",
                    observed=f"n = {first['n']}, then {more['n']} (no error)",
                    detail="LangGraph runs a node when a channel's version is greater than the "
                    "one the node saw: get_next_version must mint versions that keep "
                    "increasing as they compare (pad the number), and aput must store "
                    "channel_versions as given",
                )

        await self._judge(scenario, instance, second)

    async def test_cancelled_ainvoke_while_saver_hangs_ends_promptly(
        self, instance: Any, second: Any, thread: str, cancel_bound: float
    ) -> None:
        bound = max(1.0, 2 * cancel_bound)

        async def scenario(saver: Any, reader: Any) -> None:
            hanging = HangingSaver(saver)
            graph = _parallel_graph(hanging, {}, [False])
            hanging.hang = True
            outcome = await cancel_while_held(
                lambda: graph.ainvoke({"log": []}, config_of(f"{thread}-{id(saver)}")),
                entered=hanging.entered.wait,
                wait=bound + 1.0,
            )
            hanging.released.set()
            await finish(outcome.task)
            if outcome.seconds > bound or outcome.result != "cancelled":
                fail(
                    "a cancelled ainvoke must end promptly while the saver hangs",
                    expected=f"CancelledError within {bound:g} s",
                    observed=f"it {outcome.result} after {outcome.seconds:.2f} s",
                )

        await self._judge(scenario, instance, second)


# -- sweeps: every cell of the coverage matrices --------------------------------------------------


_Seen = tuple[str | None, dict[tuple[str, str], Any]] | None | list[Any]
_Combo = tuple[int | None, bool, bool, int | None]
"""A listing of the listing sweep: the index of the checkpoint its config names (None: the
thread), whether it filters, whether it gives ``before``, its ``limit``."""


async def _call(saver: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """``method`` of ``saver``: awaited, or a sync twin run in a thread (as LangGraph's
    sync runner calls it, away from the event loop)."""
    if method.startswith("a"):  # no sync twin's name starts with "a"
        return await getattr(saver, method)(*args, **kwargs)
    return await asyncio.to_thread(getattr(saver, method), *args, **kwargs)


async def _read_by(saver: Any, thread: str, checkpoint_id: str, *, row: str) -> _Seen:
    """`_read_as`, ``row`` given last."""
    return await _read_as(saver, row, thread, checkpoint_id)


async def _read_as(saver: Any, row: str, thread: str, checkpoint_id: str) -> _Seen:
    """What ``row`` (one of `SAVER_READS_AFTER`) reads of ``thread``: each tuple's id and
    pending writes (``checkpoint_id`` for a read by id)."""
    if row == "alist":
        return [(_id_of(t), _writes(t)) async for t in saver.alist(config_of(thread))]
    if row == "list":
        return await asyncio.to_thread(
            lambda: [(_id_of(t), _writes(t)) for t in saver.list(config_of(thread))]
        )
    method, _, how = row.partition(" ")
    t = await _call(saver, method, config_of(thread, checkpoint_id if how == "by id" else None))
    return None if t is None else (_id_of(t), _writes(t))


async def _read_after(
    saver: Any, base: str, write: str, row: str, writer: Any = None
) -> str | None:
    """``row`` of a thread just before and right after ``write`` changed it (one of
    `SAVER_WRITES_BEFORE`, an async method or a sync twin), through ``writer`` if given
    (another instance on the same data); what is wrong with the second answer, or None."""
    by = saver if writer is None else writer
    thread, source = base, f"{base}-source"
    kind = write if write.startswith("a") or write in SAVER_SEQUENCES else f"a{write}"
    copied = kind in ("acopy_thread", "source deleted", "deleted, then copied again")
    runs = (f"{base}-run-1", f"{base}-run-2")  # the runs that wrote the first and the second
    first = await put(saver, source if copied else thread, {"v": 1}, run=runs[0])
    second = await put(saver, source if copied else thread, {"v": 2}, parent=first, run=runs[1])
    ids: list[str] = [first, second]  # what the thread holds after the write, oldest first
    writes: dict[str, dict[tuple[str, str], Any]] = {}
    if kind in ("source deleted", "deleted, then copied again"):
        # a copy of a thread whose newest checkpoint has a write
        await saver.aput_writes(config_of(source, second), [("ch", "copied")], task_id="copied")
        await saver.acopy_thread(source, thread)
        writes = {second: {("copied", "ch"): "copied"}}
    if kind in ("deleted, then copied again", "deleted, then put again"):
        # what the thread gets of its own before it is deleted: writes on both checkpoints
        for made in (first, second):
            await saver.aput_writes(config_of(thread, made), [("ch", "stale")], task_id="stale")
    new, versions = checkpoint_of(saver, {"v": 3})
    again = kind == "deleted, then put again"
    kept = await get(saver, thread, first) if again else None  # to be put back as it was
    read = {"aput": new["id"], "aprune": first}.get(kind, second)
    if kind in ("deleted, then copied again", "deleted, then put again"):
        read = first  # where the source has no write: a write left by the delete shows
    await _read_as(saver, row, thread, read)  # what a saver may keep, as a caller's reads leave it
    if kind == "aput":
        metadata = CheckpointMetadata(source="loop", step=2)
        await _call(by, write, config_of(thread, second), new, metadata, versions)
        ids.append(new["id"])
    elif kind == "aput_writes":
        await _call(by, write, config_of(thread, second), [("ch", "after")], "after")
        writes = {second: {("after", "ch"): "after"}}
    elif kind == "adelete_thread":
        await _call(by, write, thread)
        ids = []
    elif kind == "acopy_thread":
        await _call(by, write, source, thread)
    elif kind == "source deleted":
        await by.adelete_thread(source)
    elif kind == "deleted, then copied again":  # the copy deleted, then made again
        await by.adelete_thread(thread)
        await by.acopy_thread(source, thread)
    elif kind == "deleted, then put again":  # deleted, then its first checkpoint put back
        await by.adelete_thread(thread)
        if kept is not None:
            versions = kept.checkpoint["channel_versions"]
            await by.aput(config_of(thread), kept.checkpoint, kept.metadata, versions)
        ids = [first]
    elif kind == "adelete_for_runs":
        await _call(by, write, [runs[1]])
        ids = [first]
    else:
        await _call(by, write, [thread])
        ids = [second]
    expected: _Seen
    if row in ("alist", "list"):
        expected = [(i, writes.get(i, {})) for i in reversed(ids)]
    else:
        pick = read if row.endswith("by id") else (ids[-1] if ids else None)
        expected = (pick, writes.get(pick, {})) if pick in ids else None
    got = await _read_as(saver, row, thread, read)
    if got == expected:
        return None
    through = "" if writer is None else " through another instance"
    return f"{row} right after {write}{through}: expected {expected!r}, got {got!r}"


def _who(thread: str) -> str:
    """A thread id for a message (a long one shortened)."""
    return ascii(thread) if len(thread) <= 40 else ascii(f"{thread[:16]}...{thread[-8:]}")


async def _threads_kept_apart(saver: Any, has: set[str], threads: list[str]) -> list[str]:
    """Two checkpoints (and a pending write) on each of ``threads``, each read back by
    every method that names a thread; then a copy of the first, a prune of the second and
    a delete of the first, the others read again after each. What is wrong, or []."""
    wrong: list[str] = []
    made: dict[str, list[str]] = {}  # thread -> its checkpoint ids, newest first
    for t in threads:
        first = await put(saver, t, {"id": t})
        second = await put(saver, t, {"id": t}, parent=first, step=1)
        made[t] = [second, first]
        if "aput_writes" in has:
            await saver.aput_writes(config_of(t, second), [("who", t)], "task")

    async def check(t: str, expected: list[str], when: str) -> None:
        latest = await get(saver, t)
        newest = expected[0] if expected else None
        if _id_of(latest) != newest:
            wrong.append(f"aget_tuple of {_who(t)}{when}: {_id_of(latest)}, not {newest}")
        elif latest is not None and latest.checkpoint["channel_values"].get("id") != t:
            wrong.append(f"aget_tuple of {_who(t)}{when}: another thread's values")
        elif (
            latest is not None and "aput_writes" in has and _writes(latest) != {("task", "who"): t}
        ):
            wrong.append(f"aget_tuple of {_who(t)}{when}: pending writes {_writes(latest)!r}")
        if expected:
            by_id = _id_of(await get(saver, t, expected[-1]))
            if by_id != expected[-1]:
                wrong.append(f"aget_tuple of {_who(t)} by id{when}: {by_id}")
        if "alist" in has:
            listed = await _ids(saver, t)
            if listed != expected:
                others = sum(i not in expected for i in listed)
                wrong.append(
                    f"alist of {_who(t)}{when}: {len(listed)} checkpoints ({others} of other "
                    f"threads), not its {len(expected)}"
                )

    for t in threads:
        await check(t, made[t], "")
    if "alist" in has:
        ours = {cid: t for t in threads for cid in made[t]}
        seen: dict[str, int] = {}
        async for tup in saver.alist(None):
            cid = _id_of(tup)
            if cid in ours:
                seen[cid] = seen.get(cid, 0) + 1
                named = tup.config["configurable"]["thread_id"]
                if named != ours[cid]:
                    wrong.append(
                        f"alist(None) names {_who(named)} for a checkpoint of {_who(ours[cid])}"
                    )
        if {cid for cid, n in seen.items() if n == 1} != set(ours):
            wrong.append(
                f"alist(None) gave {sum(seen.values())} of the {len(ours)} checkpoints once each"
            )
    expected = {t: list(made[t]) for t in threads}
    if "acopy_thread" in has:
        copy = f"{threads[0]}(copy)"
        await saver.acopy_thread(threads[0], copy)
        if "alist" in has and await _ids(saver, copy) != made[threads[0]]:
            wrong.append(
                f"acopy_thread of {_who(threads[0])}: the copy lists {await _ids(saver, copy)}"
            )
        for t in threads:
            await check(t, expected[t], f" after acopy_thread of {_who(threads[0])}")
    if "aprune" in has and len(threads) > 1:
        await saver.aprune([threads[1]], strategy="keep_latest")
        expected[threads[1]] = made[threads[1]][:1]
        for t in threads:
            await check(t, expected[t], f" after aprune of {_who(threads[1])}")
    if "adelete_thread" in has:
        await saver.adelete_thread(threads[0])
        expected[threads[0]] = []
        for t in threads:
            await check(t, expected[t], f" after adelete_thread of {_who(threads[0])}")
    return wrong


async def _put_in(saver: Any, thread: str, ns: str, parent: str | None) -> str:
    """``aput`` a checkpoint holding ``{"ns": ns}`` in namespace ``ns`` of ``thread``, after
    ``parent`` (of the same namespace); its id."""
    checkpoint, versions = checkpoint_of(saver, {"ns": ns})
    metadata = CheckpointMetadata(source="loop", step=0 if parent is None else 1)
    await saver.aput(config_of(thread, parent, ns), checkpoint, metadata, versions)
    return checkpoint["id"]


def _parent_of(t: CheckpointTuple) -> dict[str, Any] | None:
    """The thread, namespace and checkpoint id that ``t``'s ``parent_config`` names (a
    missing ``checkpoint_ns`` is the root's, as LangGraph reads it)."""
    if t.parent_config is None:
        return None
    conf = t.parent_config.get("configurable", {})
    return {
        "thread_id": conf.get("thread_id"),
        "checkpoint_ns": conf.get("checkpoint_ns", ""),
        "checkpoint_id": conf.get("checkpoint_id"),
    }


async def _namespace_reads(
    saver: Any, has: set[str], latest: RunnableConfig, by_id: RunnableConfig | None = None
) -> dict[str, Any]:
    """What each read the saver implements gives: ``aget_tuple`` and ``get_tuple`` of
    ``latest`` (a config without a checkpoint id) and of ``by_id``, if given (a tuple or
    None), ``alist`` and ``list`` of ``latest`` (the tuples). The sync reads run in a
    thread, as LangGraph's sync runner calls them."""
    reads: dict[str, Any] = {}
    if "aget_tuple" in has:
        reads["aget_tuple latest"] = await saver.aget_tuple(latest)
        if by_id is not None:
            reads["aget_tuple by id"] = await saver.aget_tuple(by_id)
    if "alist" in has:
        reads["alist"] = [t async for t in saver.alist(latest)]
    if "get_tuple" in has:
        reads["get_tuple latest"] = await asyncio.to_thread(saver.get_tuple, latest)
        if by_id is not None:
            reads["get_tuple by id"] = await asyncio.to_thread(saver.get_tuple, by_id)
    if "list" in has:
        reads["list"] = await asyncio.to_thread(lambda: list(saver.list(latest)))
    return reads


async def _metadata_read_back(
    saver: Any,
    has: set[str],
    thread: str,
    mine: str,
    expected: Mapping[str, Any],
    *,
    same: Callable[[Any, Any], bool] = operator.eq,
    unwanted: Callable[[str], bool] = lambda _key: False,
) -> list[str]:
    """What the reads of checkpoint ``mine`` of ``thread`` get wrong of its metadata: each
    read (`_namespace_reads`) must give every key of ``expected`` with a value that is
    ``same``, and no key that is ``unwanted``. What is wrong, or []."""
    reads = await _namespace_reads(saver, has, config_of(thread), config_of(thread, mine))
    wrong: list[str] = []
    for method, got in reads.items():
        found = [t for t in got if _id_of(t) == mine] if isinstance(got, list) else [got]
        if not found or found[0] is None:
            wrong.append(f"{method}: no checkpoint {mine}")
            continue
        stored = found[0].metadata
        for key, value in expected.items():
            if key not in stored:
                wrong.append(f"{method}: key {key!r} missing")
            elif not same(stored[key], value):
                wrong.append(f"{method}: {key!r} is {stored[key]!r}, not {value!r}")
        wrong += [f"{method}: key {key!r} kept" for key in stored if unwanted(key)]
    return wrong


async def _namespaces_kept_apart(
    saver: Any, has: set[str], thread: str, group: tuple[str, ...]
) -> list[str]:
    """Two checkpoints in each namespace of ``group`` of ``thread`` (the second the first's
    child, with a pending write), each namespace read back by every read the saver
    implements: its own checkpoints alone, with its values, its write and a
    ``parent_config`` naming the thread, the namespace and the first. What is wrong, or []."""
    made = await _fill_namespaces(saver, has, thread, group)
    return await _namespaces_read_back(saver, has, thread, made)


async def _fill_namespaces(
    saver: Any, has: set[str], thread: str, group: Sequence[str]
) -> dict[str, tuple[str, str]]:
    """Two checkpoints in each namespace of ``group`` of ``thread``, the second the first's
    child holding a pending write ``("who", ns)`` of task ``task`` (where the saver has
    ``aput_writes``); namespace -> (first, second)."""
    made: dict[str, tuple[str, str]] = {}
    for ns in group:
        first = await _put_in(saver, thread, ns, None)
        second = await _put_in(saver, thread, ns, first)
        made[ns] = (first, second)
        if "aput_writes" in has:
            await saver.aput_writes(config_of(thread, second, ns), [("who", ns)], "task")
    return made


async def _namespaces_read_back(
    saver: Any,
    has: set[str],
    thread: str,
    made: Mapping[str, tuple[str, str]],
    *,
    pruned: bool = False,
) -> list[str]:
    """Every read the saver implements of each namespace of ``thread`` that ``made`` names
    (namespace -> its first checkpoint and its second, the first's child with a pending
    write): its own checkpoints alone (the second alone, and no first by id, where
    ``pruned``), each with its values, its write and a ``parent_config`` naming the
    thread, the namespace and the first (or, where ``pruned``, none). What is wrong,
    or []."""
    wrong: list[str] = []
    for ns, (first, second) in made.items():
        reads = await _namespace_reads(
            saver, has, config_of(thread, ns=ns), config_of(thread, first, ns)
        )
        kept = [second] if pruned else [second, first]
        for method, got in reads.items():
            if isinstance(got, list):
                listed = [_id_of(t) for t in got]
                if listed != kept:
                    others = sum(i not in (first, second) for i in listed)
                    wrong.append(
                        f"{method} of namespace {ns!r}: {len(listed)} checkpoints ({others} of "
                        f"other namespaces), not its {len(kept)}"
                    )
                    continue
                pairs = [(got[0], second, first), *([] if pruned else [(got[1], first, None)])]
            elif method.endswith("by id"):
                if pruned:
                    if got is not None:
                        wrong.append(f"{method} of namespace {ns!r}: the pruned {first} is there")
                    continue
                pairs = [(got, first, None)]
            else:
                pairs = [(got, second, first)]
            for t, want, parent in pairs:
                found = _namespace_tuple_wrong(t, thread, ns, want, parent, has, orphan=pruned)
                if found:
                    wrong.append(f"{method} of namespace {ns!r}: {found}")
    return wrong


def _namespace_tuple_wrong(
    t: CheckpointTuple | None,
    thread: str,
    ns: str,
    want: str,
    parent: str | None,
    has: set[str],
    *,
    orphan: bool = False,
) -> str | None:
    """What is wrong with ``t``, read as checkpoint ``want`` of namespace ``ns`` (put with
    ``parent``; the newest holds a pending write), or None. Where ``orphan`` (its parent
    was pruned), a ``parent_config`` of None is right too: ``AsyncPostgresSaver``'s
    ``keep_latest`` leaves a kept checkpoint whose parent it deletes with no parent,
    ``InMemorySaver``-like savers keep naming it."""
    if t is None:
        return f"none, not {want}"
    conf = t.config["configurable"]
    if _id_of(t) != want:
        whose = t.checkpoint["channel_values"].get("ns")
        return f"{_id_of(t)} (of namespace {whose!r}), not {want}"
    if t.checkpoint["channel_values"].get("ns") != ns:
        return "another namespace's values"
    if conf.get("checkpoint_ns", "") != ns:
        return f"a config naming namespace {conf.get('checkpoint_ns')!r}"
    writes = {("task", "who"): ns} if parent is not None and "aput_writes" in has else {}
    if _writes(t) != writes:
        return f"pending writes {_writes(t)!r}"
    expected = (
        None
        if parent is None
        else {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": parent}
    )
    if _parent_of(t) != expected and not (orphan and t.parent_config is None):
        return f"parent_config naming {_parent_of(t)!r}, not {expected!r}"
    return None


async def _reads_after_each_write(saver: Any, thread: str, writer: Any = None) -> list[str]:
    """`_read_after` of each read after each write the saver implements (through
    ``writer``, another instance, the async writes only); what is wrong."""
    has = set(implemented_methods(saver))
    if not {"aput", "aget_tuple"} <= has:
        pytest.skip("the saver implements no aput or no aget_tuple")
    return [
        found
        for write in writes_before("langgraph", has)
        if writer is None or write.startswith("a") or write in SAVER_SEQUENCES
        for n, row in enumerate(SAVER_READS_AFTER)
        if row.split()[0] in has
        and (found := await _read_after(saver, f"{thread}-{_slug(write)}-{n}", write, row, writer))
    ]


def _slug(write: str) -> str:
    """A column of ``after`` as part of a thread id (no space, no comma)."""
    return "-".join(write.replace(",", "").split())


async def _every_call(saver: Any, has: set[str], a: str, b: str) -> None:
    """Each async method once on threads ``a`` and ``b``, which are in the same state.

    The calls that keep the state come first (reads, writes of another
    checkpoint's pending writes, a copy, a prune that keeps the newest), then
    ``aput`` on ``a`` and ``adelete_thread`` on ``b``. Checks what the saver
    answers where LangGraph says what it must be.
    """
    ids = await _ids(saver, a)
    known = ids[0] if ids else str(uuid6(clock_seq=-1))
    got = await get(saver, a, known)
    if ids and _id_of(got) != known:
        fail(
            "aget_tuple by id returns the checkpoint that alist listed",
            expected=known,
            observed=f"{_id_of(got)}",
        )
    latest = await get(saver, a)
    if _id_of(latest) != (max(ids) if ids else None):
        fail(
            "aget_tuple without an id returns the newest checkpoint (None for an empty thread)",
            expected=f"{max(ids) if ids else None}",
            observed=f"{_id_of(latest)}",
        )
    if "aput_writes" in has:
        await saver.aput_writes(config_of(a, known), [("ch", "sweep")], task_id="sweep")
    if "acopy_thread" in has:
        await saver.acopy_thread(a, f"{a}-copy-{uuid6().hex[:6]}")
    if "aprune" in has:
        await saver.aprune([a])
    if "adelete_for_runs" in has:
        await saver.adelete_for_runs([f"no-such-run-{uuid6().hex}"])
    new = await put(saver, a, {"v": "sweep"})
    if _id_of(await get(saver, a, new)) != new:
        fail("a checkpoint put is read back by its id", expected=new, observed="it is missing")
    if "adelete_thread" not in has:
        return
    await saver.adelete_thread(b)
    if await get(saver, b) is not None:
        fail(
            "adelete_thread removes every checkpoint of the thread",
            expected="None from aget_tuple",
            observed="a checkpoint",
        )


def _every_sync_call(saver: Any, has: set[str], a: str, b: str) -> None:
    """`_every_call` with the sync twins the saver implements (run in a worker thread)."""
    ids = [_id_of(t) for t in saver.list(config_of(a))] if "list" in has else []
    known = str(ids[0]) if ids else str(uuid6(clock_seq=-1))
    if "get_tuple" in has:
        saver.get_tuple(config_of(a, known))
        saver.get_tuple(config_of(a))
    if "put_writes" in has:
        saver.put_writes(config_of(a, known), [("ch", "sweep")], task_id="sweep")
    if "copy_thread" in has:
        saver.copy_thread(a, f"{a}-copy-{uuid6().hex[:6]}")
    if "prune" in has:
        saver.prune([a])
    if "delete_for_runs" in has:
        saver.delete_for_runs([f"no-such-run-{uuid6().hex}"])
    if "put" in has:
        checkpoint, versions = checkpoint_of(saver, {"v": "sync"})
        saver.put(config_of(a), checkpoint, {"source": "loop", "step": 0}, versions)
    if "delete_thread" in has:
        saver.delete_thread(b)


class SaverSweepTests(SaverFixtures):
    """Every method the saver implements, in every state and with every option that its
    coverage matrices have (`checkpointkit.conformance.ecosystems.coverage`)."""

    conformance_group: ClassVar[str | None] = "semantics"

    async def test_sweep_every_call_in_every_thread_state(
        self, eco_target: EcosystemTarget, location: str | None, thread: str
    ) -> None:
        async with eco_target.open(location=location) as saver:
            has = set(implemented_methods(saver))
            a, b = f"{thread}-a", f"{thread}-b"
            await _every_call(saver, has, a, b)  # missing; then a exists, b is deleted
            await put(saver, b, {"v": "b"})  # aput after delete
            await _every_call(saver, has, a, b)  # existing
            if "adelete_thread" in has:
                await saver.adelete_thread(a)
                await _every_call(saver, has, a, b)  # after delete
            if "adelete_for_runs" in has:
                run = f"run-{uuid6().hex}"
                kept = await put(saver, f"{thread}-kept", {"v": "kept"})
                await put(saver, f"{thread}-run", {"v": "run"}, run=run)
                await saver.adelete_for_runs([run])
                if await get(saver, f"{thread}-run") is not None:
                    fail(
                        "adelete_for_runs removes the checkpoints of the runs it names",
                        expected="none left on the run's thread",
                        observed="a checkpoint",
                    )
                if _id_of(await get(saver, f"{thread}-kept")) != kept:
                    fail(
                        "adelete_for_runs keeps the checkpoints of other runs",
                        expected=kept,
                        observed="it is gone",
                    )
            sync = {m for m in has if not m.startswith("a")}
            if sync:
                c, d = f"{thread}-c", f"{thread}-d"
                await asyncio.to_thread(_every_sync_call, saver, sync, c, d)  # missing
                await asyncio.to_thread(_every_sync_call, saver, sync & {"put"}, d, d)
                await asyncio.to_thread(_every_sync_call, saver, sync, c, d)  # existing
                await asyncio.to_thread(_every_sync_call, saver, sync & {"delete_thread"}, c, c)
                await asyncio.to_thread(_every_sync_call, saver, sync, c, d)  # after delete
                if "delete_for_runs" in sync:
                    run = f"run-{uuid6().hex}"
                    await put(saver, f"{thread}-sync-run", {"v": "run"}, run=run)
                    await asyncio.to_thread(saver.delete_for_runs, [run])

    async def test_sweep_every_read_after_every_kind_of_write(
        self, instance: Any, thread: str
    ) -> None:
        """Each read of a thread (``aget_tuple`` by id and latest, ``alist``) right after each
        kind of write changed it (``aput``, ``aput_writes``, ``adelete_thread``,
        ``acopy_thread`` into it, ``aprune``, ``adelete_for_runs`` of the run that wrote
        its newest checkpoint, ``adelete_thread`` of the thread it was copied from, and
        ``adelete_thread`` of a thread with writes of its own followed by ``acopy_thread``
        into it again or ``aput`` of its first checkpoint as it was),
        and once just before that write: a saver that caches what it read and forgets the
        cache on some writes answers from before them (a latest tuple kept past an
        ``aput_writes`` hides the pending writes a resume needs, and the finished tasks run
        again; one kept past ``adelete_for_runs`` is a checkpoint it deleted), and one that
        deletes a thread's checkpoints or writes by
        checkpoint id alone deletes its copies' too (a copy keeps the ids); one whose
        delete leaves the thread's pending writes shows them again once the thread holds
        those checkpoint ids again."""
        wrong = await _reads_after_each_write(instance, thread)
        if wrong:
            fail(
                "every read answers what the last write left, whatever that write was",
                expected="each read right after each write to answer as LangGraph's savers do",
                observed="; ".join(wrong),
                detail="a saver that keeps what it read (a latest tuple, a listing) must "
                "forget it on every write that changes the thread: aput, aput_writes, "
                "adelete_thread, acopy_thread into it, aprune, adelete_for_runs; a "
                "thread's delete must match the thread, not only the checkpoint ids, which "
                "a copy keeps; and it must delete the thread's pending writes and blobs with "
                "its checkpoints, or a thread deleted and copied again, or whose checkpoints "
                "are put back, shows the old writes",
            )

    async def test_sweep_every_read_after_another_instances_write(
        self, eco_target: EcosystemTarget, location: str | None, thread: str
    ) -> None:
        """The reads of the sweep before (async and sync), through one instance, and each
        kind of async write through a second instance on the same data, in between: a saver
        that keeps what it read in the instance (a latest tuple, a listing) answers from
        before the other instance's write (two workers of one deployment: one resumes a
        thread from a checkpoint the other has moved past)."""
        need(
            location is not None,
            "the factory takes no location: no second instance on the same data",
        )
        async with (
            eco_target.open(location=location) as saver,
            eco_target.open(location=location) as other,
        ):
            wrong = await _reads_after_each_write(saver, thread, writer=other)
        if wrong:
            fail(
                "every read answers what the last write left, also one made through another "
                "instance",
                expected="each read right after each write of another instance on the same "
                "data to answer as LangGraph's savers do",
                observed="; ".join(wrong),
                detail="what an instance keeps of what it read (a latest tuple, a listing) "
                "must be checked against the backend, or kept where every instance's "
                "writes forget it: another process writes the same threads",
            )

    async def test_sweep_thread_ids_of_every_shape(self, instance: Any, thread: str) -> None:
        """Threads whose ids differ only where a backend's comparison does not look (a
        ``LIKE``, a glob or a regular expression; a collation that folds case or pads
        spaces; Unicode normalization; a 255-character column) or hold characters with a
        meaning in a key, a path or a query: each group side by side, every method that
        names a thread on each, a copy, a prune and a delete among them (the ``ids``
        matrix). A thread id is whatever the application chooses: a user id, an e-mail
        address, a title."""
        saver = instance
        has = set(implemented_methods(saver))
        if not {"aput", "aget_tuple"} <= has:
            pytest.skip("the saver implements no aput or no aget_tuple")
        wrong: list[str] = []
        for n, (row, suffixes) in enumerate(ID_GROUPS.items()):
            found = await _threads_kept_apart(saver, has, [f"{thread}.{n}-{s}" for s in suffixes])
            wrong += [f"{row}: {w}" for w in found]
        if wrong:
            fail(
                "each thread's checkpoints are its own, whatever characters its id holds",
                expected="every read to answer the thread it names, exactly, and every "
                "write, copy, prune and delete to change that thread alone",
                observed=joined(wrong),
                detail="compare thread ids as exact strings (bytes): never by a pattern "
                "(escape LIKE, glob and regular-expression characters, or do not match), "
                "a collation that folds case or trailing spaces, a normalized form or a "
                "prefix cut to a column's length; escape query and path syntax",
            )

    async def test_sweep_namespaces_of_every_shape(self, instance: Any, thread: str) -> None:
        """Namespaces side by side in one thread, as LangGraph's subgraphs make them
        (``node:task``, nested ones joined by ``|``): the root beside a subgraph, its
        nested subgraph and theirs; siblings sharing a prefix (``p:1``, ``p:10``); node
        names holding wildcards, quotes, a space and path separators (the ``namespaces``
        matrix). Each gets two checkpoints, the second the first's child with a pending
        write; every read the saver implements (``aget_tuple`` latest and by id,
        ``alist``, and the sync ``get_tuple`` and ``list``) gives the namespace's own
        checkpoints alone, with a ``parent_config`` naming its namespace. A saver that
        finds a namespace by key prefix reaches the nested ones; one that hands it
        unescaped to RediSearch reads ``|`` as OR."""
        saver = instance
        has = set(implemented_methods(saver))
        if not {"aput", "aget_tuple"} <= has:
            pytest.skip("the saver implements no aput or no aget_tuple")
        wrong: list[str] = []
        for n, (row, group) in enumerate(NAMESPACE_GROUPS.items()):
            found = await _namespaces_kept_apart(saver, has, f"{thread}.ns{n}", group)
            wrong += [f"{row}: {w}" for w in found]
        if wrong:
            fail(
                "each namespace's checkpoints are its own, whatever its shape: nested, "
                "sharing a prefix with another, or holding query syntax",
                expected="every read of a namespace to give its own checkpoints alone, each "
                "with a parent_config naming that namespace",
                observed=joined(wrong),
                detail="compare checkpoint_ns as an exact string: a key prefix needs a "
                "separator after the namespace (p:1 reaches p:1|c:2 and p:10 without one), "
                "and a query needs it escaped (RediSearch reads | as OR, LIKE reads _ and "
                "%); build parent_config from the row's thread, namespace and parent id",
            )

    async def test_sweep_metadata_filters_of_every_shape(self, instance: Any, thread: str) -> None:
        """``alist(filter=...)`` on keys of every shape (LangGraph's ``source`` and ``step``,
        an application's key, one with a dot, with a hyphen, with a quote, a space and a
        non-ASCII letter) with values of every kind (a string, an integer, a boolean, a
        string with quotes, a non-ASCII string), and with a second key: each gives exactly
        the checkpoint whose metadata holds the key with that value, beside a decoy of the
        same kind, one of another kind with the same text (``"7"`` beside ``7``, ``"True"``
        beside ``True``) and one without the key, and ``alist(None)`` with the same filter exactly
        those of every thread that match; the synchronous ``list`` too, where the saver
        implements it (the ``filters`` matrix). A saver may refuse a key it cannot query
        with ``ValueError``, except a plain identifier; it must not answer wrong."""
        saver = instance
        if "alist" not in set(implemented_methods(saver)):
            pytest.skip("the saver implements no alist")
        wrong: list[str] = []
        steps = iter(range(100, 10_000))
        stored: dict[str, dict[str, Any]] = {}  # every checkpoint put -> its metadata
        cases: list[tuple[str, str, dict[str, Any], str]] = []  # row, thread, filter, selected
        for n, row in enumerate(FILTER_ROWS):
            t, key = f"{thread}.m{n}", FILTER_KEYS[row]

            async def put_with(metadata: dict[str, Any], t: str = t) -> str:
                checkpoint, versions = checkpoint_of(saver, {"v": 1})
                full = {"source": "loop", "step": next(steps), **metadata}
                await saver.aput(config_of(t), checkpoint, full, versions)
                stored[checkpoint["id"]] = full
                return checkpoint["id"]

            for column in columns_of(row):
                if column in ("every thread", "sync list"):
                    continue  # each filter of the row, over every thread and by list, below
                if column == "with another key":
                    first, second = (
                        ({"source": "fork", "step": 5}, {"source": "fork", "step": 6})
                        if row == "source"
                        else ({key: 9, "source": "input"}, {key: 9, "source": "loop"})
                        if row == "step"
                        else ({key: "both", "source": "input"}, {key: "both"})
                    )
                else:
                    value, decoy = FILTER_VALUES[column]
                    if row == "source":
                        value, decoy = "input", "update"
                    first, second = {key: value}, {key: decoy}
                cases.append((row, t, first, await put_with(first)))
                await put_with(second)
                if column in TEXT_TWINS:  # another kind, the same text: "7" beside 7
                    await put_with({key: str(first[key])})
            await put_with({})  # without the key (LangGraph's keys: their usual values)
        sync = "list" in set(implemented_methods(saver))

        def listed(config: RunnableConfig | None, given: dict[str, Any]) -> list[str | None]:
            return [_id_of(x) for x in saver.list(config, filter=given)]

        for row, t, given, selected in cases:
            for how in ("alist", "list") if sync else ("alist",):
                for config in (config_of(t), None):  # one thread, then every thread
                    try:
                        got = (
                            [_id_of(x) async for x in saver.alist(config, filter=given)]
                            if how == "alist"
                            else await asyncio.to_thread(listed, config, given)
                        )
                    except ValueError as exc:
                        if row not in REFUSABLE:
                            wrong.append(
                                f"{how} filter {given!r}: raised {type(exc).__name__}: {exc}"
                            )
                        continue  # refused, and said so
                    if config is not None and got != [selected]:
                        wrong.append(
                            f"{how} filter {given!r}: {len(got)} checkpoints"
                            + ("" if selected in got else ", not the one that matches")
                        )
                    ours = {i for i in got if i in stored}  # the location may hold others'
                    matching = {
                        i
                        for i, md in stored.items()
                        if all(md.get(k) == v for k, v in given.items())
                    }
                    if config is None and ours != matching:
                        wrong.append(
                            f"{how}(None) with filter {given!r}: {len(ours)} of this test's "
                            f"checkpoints, not the {len(matching)} that match"
                        )
        if wrong:
            fail(
                "alist (and list) gives the checkpoints whose metadata holds each key of "
                "the filter with an equal value, whatever the key's shape and the value's kind",
                expected="each filter to select exactly the one checkpoint that matches it, "
                "as LangGraph's InMemorySaver and AsyncPostgresSaver do (or a ValueError "
                "for a key with a dot, a hyphen or other characters the saver cannot "
                "query)",
                observed=joined(wrong),
                detail="compare each metadata key as a literal name (a JSON path must quote "
                'it: $."user.id"), compare values of the same kind (bind a number or a '
                'boolean as such, not as JSON text; never compare their text: "7" is not '
                "7), and never drop a key of the filter",
            )

    async def test_pending_writes_come_back_whole_and_in_order(
        self, instance: Any, thread: str
    ) -> None:
        """Three tasks' writes (`PENDING_WRITES`), two of them several to one channel in one
        call (a node that sends twice, ``Command(update=[("log", a), ("log", b)])``): every
        read (``aget_tuple``, ``alist``, and ``get_tuple`` and ``list`` where the saver has
        them) gives every write once, each task's in the order of its call, as LangGraph
        resumes a run with them. A writes table keyed by (task, channel) drops the second
        write to a channel; a list read newest first gives a reducer its items reversed."""
        saver = instance
        checkpoint_id = await put(saver, thread, {"v": 0})
        config = config_of(thread, checkpoint_id)
        for task_id, task_path, writes in PENDING_WRITES:
            await saver.aput_writes(config, writes, task_id=task_id, task_path=task_path)
        expected = {
            task_id: [(channel, value) for channel, value in writes]
            for task_id, _, writes in PENDING_WRITES
        }
        in_order = [
            (task_id, channel, value)
            for task_path, task_id, idx, channel, value in sorted(
                (task_path, task_id, idx, channel, value)
                for task_id, task_path, writes in PENDING_WRITES
                for idx, (channel, value) in enumerate(writes)
            )
        ]  # writes_sort_key order: (task_path, task_id, idx)
        reads = await _namespace_reads(
            saver, set(implemented_methods(saver)), config_of(thread), config
        )
        wrong = []
        for how, got in reads.items():
            mine = [t for t in (got if isinstance(got, list) else [got]) if t is not None]
            pending = [
                tuple(w) for t in mine if _id_of(t) == checkpoint_id for w in t.pending_writes or []
            ]
            by_task: dict[str, list[tuple[str, Any]]] = {}
            for task_id, channel, value in pending:
                by_task.setdefault(task_id, []).append((channel, value))
            if by_task != expected:
                wrong.append(f"{how} gave {by_task}")
            elif pending != in_order:
                wrong.append(f"{how} gave the tasks in the order {_task_order(pending)}")
        if wrong:
            fail(
                "every pending write comes back once, each task's in the order it was put, the "
                "tasks in LangGraph's order (task_path, then task_id)",
                expected=f"per task: {expected}, the tasks in the order {_task_order(in_order)}",
                observed="; ".join(wrong),
                detail="key a write by (thread, namespace, checkpoint, task_id, idx), the idx "
                "being its place in the aput_writes call (LangGraph's savers do), not by "
                "its channel; read a checkpoint's writes back in (task_path, task_id, idx) "
                "order (langgraph.checkpoint.base.writes_sort_key)",
            )

    async def test_pending_writes_stay_with_the_checkpoint_they_name(
        self, instance: Any, thread: str
    ) -> None:
        """Writes to a checkpoint, then its child put, then more writes to the first (no
        longer the newest) and writes to the child: each checkpoint's reads give its own
        writes, every one. With ``durability="async"`` LangGraph saves a step's writes
        while the next checkpoint is being put, and ``get_state_history`` shows each
        step's task results from them; a saver that files writes under the thread's
        newest checkpoint, or drops a parent's writes as consumed when its child is put,
        loses them (and a ``DeltaChannel`` rebuilt from them comes back empty)."""
        saver = instance
        has = set(implemented_methods(saver))
        if "aput_writes" not in has:
            pytest.skip("the saver implements no aput_writes")
        first = await put(saver, thread, {"v": 1})
        await saver.aput_writes(config_of(thread, first), [("log", "a")], task_id="t-a")
        child = await put(saver, thread, {"v": 2}, parent=first, step=1)
        await saver.aput_writes(config_of(thread, first), [("log", "b")], task_id="t-b")
        await saver.aput_writes(config_of(thread, child), [("log", "c")], task_id="t-c")
        want = {
            first: {("t-a", "log"): "a", ("t-b", "log"): "b"},
            child: {("t-c", "log"): "c"},
        }
        wrong: list[str] = []
        for checkpoint_id, expected in want.items():
            reads = await _namespace_reads(
                saver, has, config_of(thread), config_of(thread, checkpoint_id)
            )
            for how, got in reads.items():
                for t in got if isinstance(got, list) else [got]:
                    if t is not None and _id_of(t) == checkpoint_id and _writes(t) != expected:
                        wrong.append(f"{how} of {checkpoint_id} gave {_writes(t)}")
        if wrong:
            fail(
                "each checkpoint keeps the writes put to it, also once it has a child",
                expected=f"the first checkpoint's writes {want[first]}, the child's {want[child]}",
                observed=joined(wrong),
                detail="file a write under the checkpoint its config names (thread, namespace, "
                "checkpoint_id), never under the thread's newest one, and delete writes only "
                "with their checkpoint",
            )

    async def test_writes_whose_value_is_none_come_back(self, instance: Any, thread: str) -> None:
        """A task's writes whose value is None (LangGraph writes ``branch:to:<node>`` with
        None to send the run to a node, and a node may set a key to None) come back as
        None. A saver that skips empty values drops the routing: a run resumed after a
        failed sibling never runs the node the finished task chose."""
        saver = instance
        has = set(implemented_methods(saver))
        if "aput_writes" not in has:
            pytest.skip("the saver implements no aput_writes")
        checkpoint_id = await put(saver, thread, {"v": 0})
        writes = [("branch:to:next", None), ("choice", None), ("log", "kept")]
        await saver.aput_writes(config_of(thread, checkpoint_id), writes, task_id="t")
        expected = {("t", channel): value for channel, value in writes}
        reads = await _namespace_reads(
            saver, has, config_of(thread), config_of(thread, checkpoint_id)
        )
        wrong = [
            f"{how} gave {_writes(t)}"
            for how, got in reads.items()
            for t in (got if isinstance(got, list) else [got])
            if t is not None and _writes(t) != expected
        ]
        if wrong:
            fail(
                "pending writes whose value is None come back",
                expected=f"{expected}",
                observed=joined(wrong),
                detail="store a write's serialized None like any value; do not read None as "
                "no write",
            )

    async def test_a_channel_emptied_in_a_step_reads_back_absent(
        self, instance: Any, thread: str
    ) -> None:
        """A checkpoint whose channel has a new version but no value (LangGraph empties an
        ephemeral channel, ``branch:to:<node>`` or ``__start__``, once a step consumed it)
        reads back without that channel in ``channel_values``, not with the value None:
        LangGraph takes a channel that holds None for one that still holds a value, so
        ``aget_state`` of a finished thread reports tasks still to run (``next``)."""
        saver = instance
        has = set(implemented_methods(saver))
        previous, _ = checkpoint_of(saver, {"kept": 1, "gone": "start"})
        checkpoint, versions = checkpoint_of(saver, {"kept": 1}, previous=previous)
        versions["gone"] = saver.get_next_version(previous["channel_versions"]["gone"], None)
        checkpoint["channel_versions"]["gone"] = versions["gone"]
        await saver.aput(
            config_of(thread), checkpoint, CheckpointMetadata(source="loop", step=1), versions
        )
        reads = await _namespace_reads(
            saver, has, config_of(thread), config_of(thread, checkpoint["id"])
        )
        wrong = [
            f"{how} gave {t.checkpoint['channel_values']}"
            for how, got in reads.items()
            for t in (got if isinstance(got, list) else [got])
            if t is not None and t.checkpoint["channel_values"] != {"kept": 1}
        ]
        if wrong:
            fail(
                "a channel with a version and no value reads back absent",
                expected="channel_values {'kept': 1}",
                observed=joined(wrong),
                detail="store an emptied channel as empty (LangGraph's savers write the "
                "'empty' type) and leave it out of channel_values when reading; never "
                "store it as the value None",
            )

    async def test_before_naming_a_checkpoint_that_is_gone_still_cuts_by_id(
        self, instance: Any, thread: str
    ) -> None:
        """``alist`` with ``before`` naming a checkpoint id that the thread does not hold
        (one pruned or deleted since a page of history was read, as a paging cursor
        does) gives the thread's checkpoints whose ids are less: LangGraph's savers
        compare ids alone. A saver that drops the bound when it cannot find the
        checkpoint gives the newest ones again, and the pages repeat forever."""
        saver = instance
        has = set(implemented_methods(saver))
        if "alist" not in has:
            pytest.skip("the saver implements no alist")
        older = [await put(saver, thread, {"v": n}, step=n) for n in range(2)]
        gone = str(uuid6(clock_seq=-1))  # an id between the two halves, never stored
        newer = [await put(saver, thread, {"v": n}, step=n) for n in range(2, 4)]
        config, before = config_of(thread), config_of(thread, gone)
        want = list(reversed(older))
        listings = await _ids_before(saver, has, config, before)
        wrong = [f"{m} gave {counted(got, want)}" for m, got in listings.items() if got != want]
        if wrong:
            fail(
                "before cuts a listing at its checkpoint id, also when no checkpoint has it",
                expected=f"{want}: the two checkpoints older than {gone} (newer: {newer})",
                observed="; ".join(wrong),
                detail="compare checkpoint ids with before's id (checkpoint_id < ?), as "
                "LangGraph's savers do; do not look the before checkpoint up first",
            )

    async def test_limit_counts_checkpoints_across_namespaces(
        self, instance: Any, thread: str
    ) -> None:
        """``alist`` of a thread without ``checkpoint_ns`` (every namespace) with ``limit``
        gives at most ``limit`` checkpoints in all, and ``alist(None, limit=...)`` (every
        thread) too: a saver that applies the limit per namespace or per thread answers
        a retention job's ``limit=1`` with one checkpoint of each."""
        saver = instance
        has = set(implemented_methods(saver))
        if "alist" not in has:
            pytest.skip("the saver implements no alist")
        for ns in ("", "p:1", "p:1|c:2"):
            parent = await _put_in(saver, thread, ns, None)
            await _put_in(saver, thread, ns, parent)
        await _put_in(saver, f"{thread}-other", "", None)
        wrong: list[str] = []
        thread_only: RunnableConfig = {"configurable": {"thread_id": thread}}
        for limit in (1, 4):
            got = [t async for t in saver.alist(thread_only, limit=limit)]
            if len(got) != limit:
                wrong.append(f"alist of the thread, limit={limit}, gave {len(got)}")
            if "list" in has:
                sync = await asyncio.to_thread(_listed, saver, thread_only, limit)
                if len(sync) != limit:
                    wrong.append(f"list of the thread, limit={limit}, gave {len(sync)}")
        every = [t async for t in saver.alist(None, limit=2)]
        if len(every) != 2:
            wrong.append(f"alist(None, limit=2) gave {len(every)}")
        if wrong:
            fail(
                "limit bounds the whole listing, across namespaces and threads",
                expected="as many checkpoints as the limit (the thread has 6 in 3 namespaces)",
                observed="; ".join(wrong),
                detail="apply the limit once to the whole listing (LIMIT on one query over "
                "every namespace), not to each namespace or thread",
            )

    async def test_a_channel_that_kept_its_version_keeps_its_value(
        self, instance: Any, second: Any, thread: str
    ) -> None:
        """A checkpoint whose channel kept its version (not in ``new_versions``) reads back
        with the value stored for that version, not with what its ``channel_values`` hold
        when ``aput`` runs. LangGraph hands a saver its live channel objects (a join
        edge's set of finished nodes, say) and, with ``durability="async"``, the put runs
        after the next step changed them in place: a saver that stores every channel's
        value with every checkpoint records a value its version never had, and a run
        resumed from it (or ``get_state``'s ``next``) starts the joined node before its
        predecessors ran. Checked through the instance that put the version, and through
        the second one after it read the checkpoint (a run resumed elsewhere)."""
        has = set(implemented_methods(instance))
        wrong: list[str] = []
        for how, writer in (("the same instance", instance), ("a second instance", second)):
            name = f"{thread}-{len(wrong)}-{how[0]}"
            live = ["a"]
            first, versions = checkpoint_of(instance, {"live": live, "n": 1})
            await instance.aput(config_of(name), first, {"step": 1}, versions)
            if writer is second:
                await second.aget_tuple(config_of(name, first["id"]))
            child, versions = checkpoint_of(instance, {"n": 2}, previous=first)
            live.append("changed after its version")  # in place, as LangGraph's channels do
            child["channel_values"]["live"] = live
            await writer.aput(config_of(name, first["id"]), child, {"step": 2}, versions)
            reads = await _namespace_reads(
                instance, has, config_of(name), config_of(name, child["id"])
            )
            for method, got in reads.items():
                for t in got if isinstance(got, list) else [got]:
                    if t is not None and _id_of(t) == child["id"]:
                        value = t.checkpoint["channel_values"].get("live")
                        if value != ["a"]:
                            wrong.append(f"put through {how}, {method} gave {value}")
        if wrong:
            fail(
                "a channel that kept its version keeps the value stored with that version",
                expected="['a'], the value of the channel's version when it was put",
                observed=joined(wrong),
                detail="store a channel's value once per (thread, namespace, channel, "
                "version), as LangGraph's savers do, and write only the channels in "
                "new_versions; a checkpoint references the others by version",
            )

    async def test_a_deleted_threads_values_do_not_come_back(
        self, instance: Any, second: Any, thread: str
    ) -> None:
        """``adelete_thread`` deletes the thread's channel values with its checkpoints: a
        checkpoint put on the thread afterwards that names a version the deleted thread had
        (not in its ``new_versions``, so read from what is stored for that version) does
        not read back with the deleted value, through the instance that deleted it nor
        through another. A saver that keeps values in a table of their own and deletes the
        checkpoints and writes only keeps what its user asked to be deleted, and a thread
        id used again gets it back."""
        has = set(implemented_methods(instance))
        if "adelete_thread" not in has:
            pytest.skip("the saver implements no adelete_thread")
        values = {"secret": "deleted data", "kept": 1}
        checkpoint, versions = checkpoint_of(instance, values)
        await instance.aput(config_of(thread), checkpoint, {"step": 1}, versions)
        await instance.adelete_thread(thread)
        again, _ = checkpoint_of(instance, {})
        again["channel_versions"] = dict(checkpoint["channel_versions"])  # none of them new
        await instance.aput(config_of(thread), again, {"step": 2}, {})
        wrong: list[str] = []
        for who, saver in (("the deleting instance", instance), ("a second instance", second)):
            got = await get(saver, thread)
            if got is not None and got.checkpoint["channel_values"]:
                wrong.append(f"{who} read {got.checkpoint['channel_values']}")
        if wrong:
            fail(
                "adelete_thread deletes every channel value of the thread",
                expected="the checkpoint put after the delete, naming versions of the deleted "
                "thread, to read back with no channel value",
                observed="; ".join(wrong),
                detail="delete the thread's stored channel values (blobs) with its checkpoints "
                "and writes, as InMemorySaver and AsyncPostgresSaver do",
            )

    async def test_delta_channel_history_follows_the_parent_chain(
        self, instance: Any, thread: str
    ) -> None:
        """``aget_delta_channel_history`` (LangGraph's ``DeltaChannel``, beta, rebuilds a
        value from it) of a checkpoint on a branch, with pending writes on every
        checkpoint (the target's own too) and another branch from the same parent, gives
        what LangGraph's own implementation gives walking the saver's ``aget_tuple``:
        the writes of the target's ancestors along ``parent_config``, oldest first, in
        ``writes_sort_key`` order, from the nearest ancestor that holds a value. A saver
        that walks ``alist(before=...)`` takes in the other branch; one that adds the
        target's own writes applies them twice."""
        saver = instance
        if not hasattr(BaseCheckpointSaver, "aget_delta_channel_history"):
            pytest.skip("this LangGraph has no aget_delta_channel_history")
        has = set(implemented_methods(saver))
        if "aput_writes" not in has:
            pytest.skip("the saver implements no aput_writes")
        made: dict[str, Checkpoint] = {}

        async def step(label: str, parent: str | None, values: dict[str, Any]) -> str:
            previous = made[parent] if parent is not None else None
            checkpoint, versions = checkpoint_of(saver, values, previous=previous)
            await saver.aput(config_of(thread, parent), checkpoint, {"step": len(made)}, versions)
            made[checkpoint["id"]] = checkpoint
            config = config_of(thread, checkpoint["id"])
            for path, task in (("~b", "t-1"), ("~a", "t-2")):  # stored out of LangGraph's order
                writes = [("items", f"{label}:{task}:{i}") for i in range(2)]
                await saver.aput_writes(config, writes, task_id=task, task_path=path)
            return checkpoint["id"]

        root = await step("root", None, {"items": ["seed"]})
        middle = await step("middle", root, {"n": 1})
        await step("other branch", middle, {"n": 2})
        target = await step("target", middle, {"n": 3})
        config = config_of(thread, target)
        got = await saver.aget_delta_channel_history(config=config, channels=["items"])
        want = await BaseCheckpointSaver.aget_delta_channel_history(
            saver, config=config, channels=["items"]
        )
        if got != want:
            fail(
                "aget_delta_channel_history follows the parent chain, as LangGraph's walks it",
                expected=f"{want}",
                observed=f"{got}",
                detail="walk parent_config from the target's parent up to the nearest "
                "checkpoint holding the channel's value (the seed), taking each ancestor's "
                "pending writes in writes_sort_key order, oldest first; not the target's own "
                "writes, not a listing by checkpoint id (another branch's checkpoints)",
            )

    async def test_threads_whose_ids_share_a_prefix_stay_apart(
        self, instance: Any, thread: str
    ) -> None:
        """Threads named ``T``, ``T0``, ``T-1``, ``T 1`` and ``T/x`` (a saver that keys or
        deletes by the prefix ``T`` reaches all of them): each one's latest checkpoint
        and listing are its own, and deleting ``T`` leaves the others."""
        saver = instance
        names = [thread, f"{thread}0", f"{thread}-1", f"{thread} 1", f"{thread}/x"]
        made = {name: await put(saver, name, {"thread": name}) for name in names}
        for name in names:
            latest, listed = _id_of(await get(saver, name)), await _ids(saver, name)
            if latest != made[name] or listed != [made[name]]:
                fail(
                    "each thread's checkpoints are its own, also where thread ids share a prefix",
                    expected=f"thread {name!r}: latest {made[name]} and a listing of it alone",
                    observed=f"latest {latest}, listing {listed}",
                    detail="key a thread by its whole id (a prefix query or a key made by "
                    "concatenation without a separator that no id holds reaches other "
                    "threads); a thread id may hold any character",
                )
        if "adelete_thread" not in set(implemented_methods(saver)):
            return
        await saver.adelete_thread(thread)
        gone = [n for n in names[1:] if _id_of(await get(saver, n)) != made[n]]
        if gone or await get(saver, thread) is not None:
            fail(
                "adelete_thread deletes that thread only, also where thread ids share a prefix",
                expected=f"thread {thread!r} gone, the other {len(names) - 1} kept",
                observed=f"gone: {gone or 'none'}; {thread!r} "
                f"{'kept' if await get(saver, thread) is not None else 'gone'}",
                detail="delete by the whole thread id, never by a prefix of it",
            )

    async def test_each_namespace_has_its_own_latest(self, instance: Any, thread: str) -> None:
        """A root checkpoint, then a newer one in a subgraph's namespace: the root's latest
        is still the root's (a saver that orders a thread's checkpoints by id, forgetting
        the namespace, gives the subgraph's), through ``aget_tuple`` and ``alist`` and,
        where the saver implements them, the sync ``get_tuple`` and ``list`` (a graph run
        synchronously, ``get_state``: a saver with a sync and an async path builds its
        query twice)."""
        saver = instance
        has = set(implemented_methods(saver))
        root = await put(saver, thread, {"where": "root"})
        checkpoint, versions = checkpoint_of(saver, {"where": "sub"})
        sub_config = config_of(thread, ns="sub:1")
        await saver.aput(sub_config, checkpoint, {"source": "loop", "step": 0}, versions)
        sub = checkpoint["id"]
        wrong = []
        for ns, expected in (("", root), ("sub:1", sub)):
            config = config_of(thread, ns=ns)
            reads = await _namespace_reads(saver, has, config)
            for method, got in reads.items():
                ids = [_id_of(t) for t in got] if isinstance(got, list) else _id_of(got)
                if ids != ([expected] if isinstance(got, list) else expected):
                    wrong.append(f"{method} of namespace {ns!r} gave {ids}, not {expected}")
        if wrong:
            fail(
                "each namespace of a thread has its own latest checkpoint and listing",
                expected=f"namespace '': {root} alone; namespace 'sub:1': {sub} alone",
                observed="; ".join(wrong),
                detail="filter by checkpoint_ns as well as thread_id when reading the "
                "latest checkpoint and when listing, in the sync methods as in the async ones",
            )

    async def test_a_checkpoint_id_is_found_only_in_its_own_thread_and_namespace(
        self, instance: Any, thread: str
    ) -> None:
        """A checkpoint's id asked of another thread, or of another namespace of its own
        thread, names nothing there: ``aget_tuple`` gives None and ``alist`` nothing (and
        the sync ``get_tuple`` and ``list``, where the saver implements them). A saver that
        finds a checkpoint by its id alone (ids are unique, so a table keyed by the id
        looks safe) answers with another thread's checkpoint: whoever names their own
        thread and an id that someone else's run wrote reads that run's state."""
        saver = instance
        has = set(implemented_methods(saver))
        mine = await put(saver, thread, {"v": "mine"})
        other = f"{thread}-other"
        await put(saver, other, {"v": "other"})
        checkpoint, versions = checkpoint_of(saver, {"v": "sub"})
        await saver.aput(
            config_of(thread, ns="sub:1"), checkpoint, {"source": "loop", "step": 0}, versions
        )
        wrong: list[str] = []
        for where, config in (
            (f"thread {other!r}", config_of(other, mine)),
            (f"namespace 'sub:1' of {thread!r}", config_of(thread, mine, ns="sub:1")),
        ):
            for method, got in (await _namespace_reads(saver, has, config)).items():
                found = [_id_of(t) for t in got] if isinstance(got, list) else _id_of(got)
                if found not in (None, []):
                    name = method.removesuffix(" latest")
                    wrong.append(f"{name} of checkpoint {mine} in {where} gave {found}")
        if wrong:
            fail(
                "a checkpoint id names a checkpoint only in its own thread and namespace",
                expected="None from aget_tuple and nothing from alist",
                observed=joined(wrong),
                detail="look a checkpoint up by thread_id, checkpoint_ns and checkpoint_id "
                "together, never by the id alone",
            )

    async def test_a_config_without_a_namespace_reads_the_root_namespace(
        self, instance: Any, thread: str
    ) -> None:
        """A config that names a thread and no ``checkpoint_ns`` (``checkpointer.get({
        "configurable": {"thread_id": ...}})``, as LangGraph's documentation reads a
        thread's state) reads the root namespace ``""``, as LangGraph's savers do: the
        root's latest checkpoint, not a newer one of a subgraph, and a root checkpoint by
        its id. A saver that reads the missing namespace as None (an SQL ``= NULL``, a key
        with ``None`` in it) finds nothing."""
        saver = instance
        has = set(implemented_methods(saver)) & {"aget_tuple", "get_tuple"}
        if not has:
            pytest.skip("the saver implements no aget_tuple and no get_tuple")
        root = await put(saver, thread, {"where": "root"})
        checkpoint, versions = checkpoint_of(saver, {"where": "sub"})
        await saver.aput(
            config_of(thread, ns="sub:1"), checkpoint, {"source": "loop", "step": 0}, versions
        )
        wrong: list[str] = []
        for label, conf in (
            ("latest", {"thread_id": thread}),
            ("by id", {"thread_id": thread, "checkpoint_id": root}),
        ):
            config: RunnableConfig = {"configurable": conf}
            for method, got in (await _namespace_reads(saver, has, config)).items():
                if _id_of(got) != root:
                    name = method.removesuffix(" latest")
                    wrong.append(f"{name} {label} gave {_id_of(got)}")
        if wrong:
            fail(
                "a config without checkpoint_ns reads the root namespace",
                expected=f"the root's checkpoint {root} (a newer one is in 'sub:1')",
                observed=joined(wrong),
                detail='read config["configurable"].get("checkpoint_ns", "") as LangGraph\'s '
                "savers do: a missing namespace is the root's",
            )

    async def test_config_metadata_is_kept_as_langgraph_merges_it(
        self, instance: Any, thread: str
    ) -> None:
        """``aput`` with a config whose ``metadata`` and ``configurable`` hold an
        application's keys (a user id, an assistant id, a number of tries, and keys
        starting with ``__`` that LangGraph keeps out): every read gives the metadata
        that LangGraph's ``get_checkpoint_metadata`` makes of them, as LangGraph's savers
        store it (what the loop passed, then each other key of the config's metadata and
        configurable whose value is a str, an int, a float or a bool, none of the
        ``__`` ones), and ``alist(filter=...)`` on the user id selects the checkpoint. A
        saver that stores only the metadata it was passed loses what an application
        filters its threads' checkpoints by."""
        saver = instance
        has = set(implemented_methods(saver))
        if "aput" not in has:
            pytest.skip("the saver implements no aput")
        user = f"user-{uuid6().hex}"
        config = config_of(thread)
        config["metadata"] = {"user_id": user, "step": 99, "__hidden": "no"}
        config["configurable"].update({"assistant_id": "a-1", "tries": 3, "__pregel_x": "no"})
        metadata = CheckpointMetadata(source="input", step=-1)
        expected = dict(get_checkpoint_metadata(config, metadata))
        checkpoint, versions = checkpoint_of(saver, {"v": 1})
        await saver.aput(config, checkpoint, metadata, versions)
        mine = checkpoint["id"]
        wrong = await _metadata_read_back(
            saver, has, thread, mine, expected, unwanted=lambda key: key.startswith("__")
        )
        if "alist" in has and await _ids(saver, thread, {"user_id": user}) != [mine]:
            wrong.append(f"alist filter {{'user_id': {user!r}}} did not select it alone")
        if wrong:
            fail(
                "a checkpoint's metadata holds what LangGraph merges into it from the config",
                expected=f"{expected!r} from every read",
                observed=joined(wrong),
                detail="store get_checkpoint_metadata(config, metadata) "
                "(langgraph.checkpoint.base), as LangGraph's savers do, not the metadata "
                "argument alone",
            )

    async def test_a_subgraph_checkpoints_parent_config_names_its_namespace(
        self, instance: Any, thread: str
    ) -> None:
        """Two checkpoints in a subgraph's namespace, the second put with the first as its
        parent (as LangGraph's runner puts each step): every read of the second gives a
        ``parent_config`` naming the thread, the subgraph's namespace and the first, as
        LangGraph's ``InMemorySaver`` gives it (``get_state``'s ``parent_config``, and a
        time travel to it, read that config; one naming the root namespace points at a
        checkpoint that is not there)."""
        saver = instance
        has = set(implemented_methods(saver))
        await put(saver, thread, {"ns": ""})
        ns = "sub:1"
        first = await _put_in(saver, thread, ns, None)
        second = await _put_in(saver, thread, ns, first)
        reads = await _namespace_reads(
            saver, has, config_of(thread, ns=ns), config_of(thread, second, ns)
        )
        want = {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": first}
        wrong = []
        for method, got in reads.items():
            found = [t for t in got if _id_of(t) == second] if isinstance(got, list) else [got]
            parent = _parent_of(found[0]) if found and found[0] is not None else "no checkpoint"
            if parent != want:
                wrong.append(f"{method}: {parent!r}")
        if wrong:
            fail(
                "a checkpoint's parent_config names its thread, its namespace and its parent",
                expected=f"parent_config {{'configurable': {want!r}}}",
                observed="; ".join(wrong),
                detail="build parent_config from the thread_id, the checkpoint_ns and the "
                "parent's checkpoint_id of the row (LangGraph's savers: "
                "{'thread_id': ..., 'checkpoint_ns': ..., 'checkpoint_id': parent_id})",
            )

    async def test_every_namespace_of_a_thread_is_copied_and_pruned_whole(
        self, instance: Any, thread: str
    ) -> None:
        """A thread of three namespaces (the root, a subgraph's and its nested subgraph's),
        each holding two checkpoints, the second the first's child with a pending write:
        ``acopy_thread`` gives the copy every namespace as it is in the source (its
        checkpoints, values, writes and a ``parent_config`` naming the copy), ``aprune``
        with ``keep_latest`` keeps each namespace's newest checkpoint with its values and
        its write (its ``parent_config`` naming the pruned parent, or none, as
        ``AsyncPostgresSaver`` leaves it), and ``aprune`` with ``delete`` leaves no
        namespace anything. LangGraph's
        own suite checks these on the root namespace (and counts a copy's namespaces); a
        saver that copies or keeps the writes or values of the root alone, or deletes the
        root alone, passes it."""
        saver = instance
        has = set(implemented_methods(saver))
        forms = {"acopy_thread", "aprune", "copy_thread", "prune"}
        if not has & forms or not {"aput", "aget_tuple"} <= has:
            pytest.skip("the saver implements no copy_thread and no prune, sync or async")
        group = ("", "p:1", "p:1|c:2")
        wrong: list[str] = []
        # each form the saver implements: the async one, and the sync one run in a worker
        # thread as LangGraph's sync runner calls it (a sync form of its own is code of its
        # own: one that only copies the root, or drives the async form wrongly, shows here)
        for copy, prune in (("acopy_thread", "aprune"), ("copy_thread", "prune")):
            if copy in has:
                source, copied = f"{thread}-{copy}-source", f"{thread}-{copy}"
                made = await _fill_namespaces(saver, has, source, group)
                await _call(saver, copy, source, copied)
                found = await _namespaces_read_back(saver, has, copied, made)
                wrong += [f"the copy by {copy}: {w}" for w in found]
            if prune in has:
                kept = f"{thread}-{prune}-kept"
                made = await _fill_namespaces(saver, has, kept, group)
                await _call(saver, prune, [kept], strategy="keep_latest")
                found = await _namespaces_read_back(saver, has, kept, made, pruned=True)
                wrong += [f"after {prune} keep_latest: {w}" for w in found]
                gone = f"{thread}-{prune}-deleted"
                made = await _fill_namespaces(saver, has, gone, group)
                await _call(saver, prune, [gone], strategy="delete")
                for ns, (first, _) in made.items():
                    reads = await _namespace_reads(
                        saver, has, config_of(gone, ns=ns), config_of(gone, first, ns)
                    )
                    left = [m for m, got in reads.items() if got]
                    if left:
                        wrong.append(
                            f"after {prune} delete: namespace {ns!r} still answers "
                            + ", ".join(left)
                        )
        if wrong:
            fail(
                "copy_thread and prune (each form the saver implements) treat every "
                "namespace of a thread as the root",
                expected="the copy to hold every namespace's checkpoints, values and writes; "
                "keep_latest to keep each namespace's newest with its values and write; "
                "delete to leave no namespace anything",
                observed=joined(wrong),
                detail="copy and prune by thread across every checkpoint_ns: copy the writes "
                "and channel values of every namespace, not of the root alone; keep the "
                "writes of each namespace's newest checkpoint (group by checkpoint_ns in the "
                "writes' delete as in the checkpoints'); a copy's parent_config names the "
                "copy's thread; delete every namespace's rows; a sync form does what its "
                "async form does",
            )

    async def test_a_listing_without_a_namespace_gives_every_namespace(
        self, instance: Any, thread: str
    ) -> None:
        """``alist({"configurable": {"thread_id": ...}})``, a config without
        ``checkpoint_ns`` (as LangGraph's docs list a thread's checkpoints, and as an
        application does that keeps no namespace), gives the checkpoints of every
        namespace of the thread, each once and each with a config naming its own
        namespace, as ``InMemorySaver``, ``AsyncSqliteSaver`` and ``AsyncPostgresSaver``
        do (``aget_tuple`` without a namespace reads the root's); the sync ``list`` too.
        A saver that reads a missing namespace as the root's lists the root alone."""
        saver = instance
        has = set(implemented_methods(saver))
        if "alist" not in has or "aput" not in has:
            pytest.skip("the saver implements no alist or no aput")
        made: dict[str, str] = {}  # checkpoint id -> its namespace
        for ns in ("", "", "p:1", "p:1|c:2"):
            parent = next((c for c, n in reversed(list(made.items())) if n == ns), None)
            made[await _put_in(saver, thread, ns, parent)] = ns
        config: RunnableConfig = {"configurable": {"thread_id": thread}}
        listings = {"alist": [t async for t in saver.alist(config)]}
        if "list" in has:
            listings["list"] = await asyncio.to_thread(lambda: list(saver.list(config)))
        wrong: list[str] = []
        for method, got in listings.items():
            ids = [_id_of(t) for t in got]
            named = {str(_id_of(t)): t.config["configurable"].get("checkpoint_ns", "") for t in got}
            if sorted(map(str, ids)) != sorted(made):
                missing = sorted({made[c] for c in made if c not in ids})
                wrong.append(
                    f"{method} gave {len(ids)} of the thread's {len(made)} checkpoints"
                    + (f" (none of namespaces {missing})" if missing else "")
                )
            elif named != made:
                wrong.append(f"{method} named namespaces {sorted(set(named.values()))}")
        if wrong:
            fail(
                "a listing of a thread without checkpoint_ns gives every namespace's checkpoints",
                expected=f"the {len(made)} checkpoints of namespaces '', 'p:1' and 'p:1|c:2', "
                "each once, each naming its namespace",
                observed="; ".join(wrong),
                detail="filter by checkpoint_ns only where the config holds one (None: every "
                "namespace, as LangGraph's savers do); aget_tuple reads a missing one as ''",
            )

    async def test_before_cuts_by_checkpoint_id_whatever_its_namespace(
        self, instance: Any, thread: str
    ) -> None:
        """``alist`` of the root namespace with ``before`` naming a subgraph's checkpoint
        (its config, as ``get_state`` of a subgraph gives it) gives the root's checkpoints
        whose ids are less than that one's: LangGraph's savers compare ids alone
        (``checkpoint_id < ?``). A saver that looks the ``before`` checkpoint up in the
        namespace it lists, and drops the bound when it is not there, lists every one."""
        saver = instance
        has = set(implemented_methods(saver))
        if "alist" not in has or "aput" not in has:
            pytest.skip("the saver implements no alist or no aput")
        older = await _put_in(saver, thread, "", None)
        cut = await _put_in(saver, thread, "p:1", None)
        newer = await _put_in(saver, thread, "", older)
        await _put_in(saver, thread, "", newer)
        config, before = config_of(thread), config_of(thread, cut, "p:1")
        listings = await _ids_before(saver, has, config, before)
        wrong = [
            f"{m} gave {counted(got, [older])}" for m, got in listings.items() if got != [older]
        ]
        if wrong:
            fail(
                "before cuts a listing at its checkpoint id, whatever namespace it names",
                expected=f"[{older}]: the root's one checkpoint older than the subgraph's {cut}",
                observed="; ".join(wrong),
                detail="compare checkpoint ids with before's id (checkpoint_id < ?), as "
                "LangGraph's savers do; do not look the before checkpoint up in the listed "
                "namespace, nor drop the bound when it is elsewhere",
            )

    async def test_metadata_comes_back_as_put(self, instance: Any, thread: str) -> None:
        """A checkpoint whose metadata holds what an application's ``config["metadata"]``
        may (`ODD_METADATA`: integers past 2**53, a ``None``, nested objects and lists, a
        float, keys in other scripts) is read back with each key holding an equal value
        of the same kind by every read, and ``alist(filter=...)`` on an integer past 2**53
        selects it, not its neighbour 2**53 (a Discord or Twitter snowflake id, a
        nanosecond clock). A saver that keeps numbers as doubles (a document store's
        number, JavaScript) gives 2**53 for both; one that drops keys holding None loses
        them."""
        saver = instance
        has = set(implemented_methods(saver))
        if not {"aput", "aget_tuple"} <= has:
            pytest.skip("the saver implements no aput or no aget_tuple")
        decoy, _ = checkpoint_of(saver, {"v": 0})
        versions = {"v": decoy["channel_versions"]["v"]}
        neighbour = {"source": "loop", "step": 0, "big": 2**53}
        await saver.aput(config_of(thread), decoy, neighbour, versions)
        checkpoint, versions = checkpoint_of(saver, {"v": 1})
        metadata = {"source": "loop", "step": 1, **ODD_METADATA}
        await saver.aput(config_of(thread, decoy["id"]), checkpoint, metadata, versions)
        mine = checkpoint["id"]
        wrong = await _metadata_read_back(saver, has, thread, mine, ODD_METADATA, same=_same_value)
        if "alist" in has:
            selected = {"alist": await _ids(saver, thread, {"big": ODD_METADATA["big"]})}
            if "list" in has:
                selected["list"] = await asyncio.to_thread(
                    _sync_ids, saver, config_of(thread), filter={"big": ODD_METADATA["big"]}
                )
            wrong += [
                f"{m} filter {{'big': 2**53 + 1}} gave {counted(got, [mine])}"
                for m, got in selected.items()
                if got != [mine]
            ]
        if wrong:
            fail(
                "metadata comes back as put, every key with an equal value of the same kind",
                expected=f"{ODD_METADATA!r} from every read, and the filter on 2**53 + 1 to "
                "select that checkpoint alone",
                observed=joined(wrong),
                detail="keep integers exact (a 64-bit integer or the JSON text, not a double), "
                "keep keys holding None, nested objects and lists as they are; JSONB and "
                "LangGraph's serializer do",
            )

    async def test_a_checkpoint_of_many_channels_and_writes_comes_back_whole(
        self, instance: Any, thread: str
    ) -> None:
        """A checkpoint of 1,000 channels (a graph's state keys, or the per-item channels a
        map-reduce makes), and one ``aput_writes`` call of 1,000 writes (a node that
        sends to 1,000 workers): every read gives every channel's value and every write,
        in order. A backend that takes at most 25 items a batch write (DynamoDB's
        ``BatchWriteItem``) or 100 a batch read (``BatchGetItem``), or answers the rest as
        unprocessed, loses the rest when the saver does not send them again."""
        saver = instance
        has = set(implemented_methods(saver))
        if not {"aput", "aget_tuple"} <= has:
            pytest.skip("the saver implements no aput or no aget_tuple")
        values = {f"c{n:04d}": n for n in range(MANY)}
        checkpoint, versions = checkpoint_of(saver, values)
        await saver.aput(config_of(thread), checkpoint, {"source": "loop", "step": 0}, versions)
        config = config_of(thread, checkpoint["id"])
        writes = [(f"w{n:04d}", n) for n in range(MANY)]
        if "aput_writes" in has:
            await saver.aput_writes(config, writes, task_id="many")
        reads = await _namespace_reads(saver, has, config_of(thread), config)
        wrong: list[str] = []
        for method, got in reads.items():
            found = (
                [t for t in got if _id_of(t) == checkpoint["id"]]
                if isinstance(got, list)
                else [got]
            )
            if not found or found[0] is None:
                wrong.append(f"{method}: no checkpoint")
                continue
            got_values = found[0].checkpoint["channel_values"]
            if got_values != values:
                lost = sum(k not in got_values for k in values)
                wrong.append(f"{method}: {len(got_values)} channel values, {lost} lost")
            got_writes = [(c, v) for _, c, v in found[0].pending_writes or []]
            if "aput_writes" in has and got_writes != writes:
                wrong.append(f"{method}: writes {counted(got_writes, writes)}")
        if wrong:
            fail(
                f"a checkpoint of {MANY:,} channels and an aput_writes of {MANY:,} writes "
                "come back whole",
                expected=f"{MANY:,} channel values and {MANY:,} writes, in order, from every read",
                observed="; ".join(wrong),
                detail="a backend's batch takes a limited number of items (DynamoDB: 25 a "
                "BatchWriteItem, 100 a BatchGetItem) and may answer some unprocessed: send "
                "the items in batches of that size and send the unprocessed ones again",
            )

    async def test_sweep_every_combination_of_listing_options(
        self, instance: Any, thread: str
    ) -> None:
        """Six checkpoints of one thread, their metadata ``source`` alternating ``input``
        and ``loop`` (the newest ``loop``): ``alist`` (and ``list``) with a ``filter`` of
        ``input``, ``before`` and ``limit`` two and three at once select what each selects
        alone, newest first, and then at most ``limit`` of them
        (``aget_state_history(filter=..., limit=...)`` passes both; a saver that reads
        ``limit`` rows and then checks the filter itself gives fewer, and one whose fast
        path for ``limit=1`` reads the latest checkpoint skips the filter). A config that
        names a checkpoint (``checkpoint_id``) lists that checkpoint alone, or nothing
        where the filter or ``before`` leaves it out, as ``InMemorySaver`` and
        ``AsyncPostgresSaver`` answer (a saver that builds its query from the thread and
        namespace alone lists the whole thread)."""
        saver = instance
        made: list[tuple[str, str]] = []  # (id, source), oldest first
        parent = None
        for step in range(6):
            source: Literal["input", "loop"] = "input" if step % 2 == 0 else "loop"
            checkpoint, versions = checkpoint_of(saver, {"step": step})
            metadata = CheckpointMetadata(source=source, step=step)
            await saver.aput(config_of(thread, parent), checkpoint, metadata, versions)
            parent = checkpoint["id"]
            made.append((parent, source))
        newest_first = list(reversed(made))
        cut = made[4][0]  # before the fifth checkpoint

        def expected(
            named: int | None, filtered: bool, before: bool, limit: int | None
        ) -> list[str]:
            ids = [
                i
                for i, source in newest_first
                if (named is None or i == made[named][0])
                and (not filtered or source == "input")
                and (not before or i < cut)
            ]
            return ids[:limit]

        combos: list[_Combo] = [
            (None, True, True, None),
            (None, True, False, 1),
            (None, True, False, 2),
            (None, False, True, 2),
            (None, True, True, 1),
            (2, False, False, None),  # an input checkpoint before the cut: itself
            (2, True, False, None),
            (3, True, False, None),  # a loop checkpoint: the filter leaves nothing
            (2, False, True, None),
            (5, False, True, None),  # the newest, not before the cut: nothing
            (3, False, False, 1),
        ]

        def options(
            named: int | None, filtered: bool, before: bool, limit: int | None
        ) -> dict[str, Any]:
            return {
                "config": config_of(thread, None if named is None else made[named][0]),
                "filter": {"source": "input"} if filtered else None,
                "before": config_of(thread, cut) if before else None,
                "limit": limit,
            }

        def name(named: int | None, filtered: bool, before: bool, limit: int | None) -> str:
            given = [] if named is None else [f"checkpoint id ({named + 1} of 6)"]
            on = (("filter", filtered), ("before", before), ("limit", limit is not None))
            given += [option for option, chosen in on if chosen]
            return " + ".join(given) + (f" ({limit})" if limit else "")

        wrong = []
        for combo in combos:
            got = [_id_of(t) async for t in saver.alist(**options(*combo))]
            if got != expected(*combo):
                wrong.append(f"alist {name(*combo)}: {got}, expected {expected(*combo)}")
        if "list" in set(implemented_methods(saver)):

            def listed(combo: _Combo) -> list[str | None]:
                return [_id_of(t) for t in saver.list(**options(*combo))]

            for combo in combos:
                got_sync = await asyncio.to_thread(listed, combo)
                if got_sync != expected(*combo):
                    wrong.append(f"list {name(*combo)}: {got_sync}, expected {expected(*combo)}")
        if wrong:
            fail(
                "alist's config checkpoint_id, filter, before and limit combine: each "
                "selects, then limit counts",
                expected=f"the checkpoints each combination selects, of {len(made)} whose "
                "source alternates input and loop, the newest loop",
                observed="; ".join(wrong),
                detail="apply the metadata filter and before in the query, or read on "
                "until limit checkpoints passed them: a limit applied to the rows before "
                "they are filtered gives fewer; and a config's checkpoint_id selects that "
                "checkpoint alone (add checkpoint_id = ? to the query, beside thread_id and "
                "checkpoint_ns, as InMemorySaver and AsyncPostgresSaver do)",
            )

    async def test_next_versions_keep_increasing_as_langgraph_compares_them(
        self, instance: Any
    ) -> None:
        """``get_next_version`` from nothing, 100,001 times in a row: each version is
        greater than the one before as LangGraph compares them (``>``, string order for
        strings; ``"10.x" < "9.x"`` unless the number is padded, and ``"10000.x" <
        "9999.x"`` where it is padded to four digits), or nodes stop being triggered after
        the ninth (the 9,999th) update of a channel: a long-lived thread's message list
        gets that many."""
        previous: Any = None
        for n in range(1, VERSIONS + 1):
            version = instance.get_next_version(previous, None)
            if previous is not None and not version > previous:
                fail(
                    "each next version must be greater than the version before it",
                    expected=f"update {n}'s version greater than {previous!r}",
                    observed=f"{version!r}",
                    detail="pad the number wider than any count of updates (InMemorySaver: "
                    "f'{n:032}.{random:016}') or use int versions; LangGraph compares "
                    "versions with > and max()",
                )
            previous = version

    async def test_sweep_namespaces_listing_options_and_value_sizes(
        self, instance: Any, thread: str
    ) -> None:
        saver = instance
        first = await put(saver, thread, {"v": 0})
        child = config_of(thread, ns="child")
        checkpoint, versions = checkpoint_of(saver, {"v": "child"})
        stored = await saver.aput(child, checkpoint, {"source": "loop", "step": 0}, versions)
        await saver.aput_writes(stored, [("ch", "child")], task_id="t")
        reads = await _namespace_reads(
            saver,
            set(implemented_methods(saver)),
            child,
            config_of(thread, checkpoint["id"], ns="child"),
        )
        seen = {
            method: [_id_of(t) for t in got] if isinstance(got, list) else [_id_of(got)]
            for method, got in reads.items()
        }
        if any(ids != [checkpoint["id"]] for ids in seen.values()):
            fail(
                "a checkpoint in a child namespace is read and listed in that namespace",
                expected=f"{checkpoint['id']} by id, as the latest and as the one listed, "
                "through the async reads and the sync ones",
                observed="; ".join(f"{method}: {ids}" for method, ids in seen.items()),
                detail="filter by checkpoint_ns as well as thread_id, in the sync methods as "
                "in the async ones",
            )
        sized = sized_values()
        second = await put(saver, thread, dict(sized), parent=first, step=1)
        big = list(sized.items())
        await saver.aput_writes(config_of(thread, second), big, task_id="big")
        got = await get(saver, thread, second)
        values = {} if got is None else got.checkpoint["channel_values"]
        writes = _writes(got)
        wrong = [
            f"{what} {name!r} read back as {found}"
            for name, value in sized.items()
            for what, read in (("channel", values.get(name)), ("write", writes.get(("big", name))))
            if (found := read_back_wrong(value, read))
        ]
        if wrong:
            fail(
                "channel values and writes of 0 bytes, 1 KiB, 1 MiB and 4 MiB are read back whole",
                expected="each value as put: "
                + ", ".join(f"{len(v):,} characters in {n!r}" for n, v in sized.items()),
                observed="; ".join(wrong),
                detail=SIZES_HINT,
            )
        newest = [_id_of(t) async for t in saver.alist(config_of(thread), limit=1)]
        before = [
            _id_of(t)
            async for t in saver.alist(config_of(thread), before=config_of(thread, second))
        ]
        loop = [_id_of(t) async for t in saver.alist(config_of(thread), filter={"step": 1})]
        async for _ in saver.alist(None, limit=1):
            break
        if newest != [second] or before != [first] or loop != [second]:
            fail(
                "alist's limit, before and filter select the checkpoints LangGraph says",
                expected=f"limit=1: [{second}], before: [{first}], filter step=1: [{second}]",
                observed=f"{newest}, {before}, {loop}",
            )
        sync = set(implemented_methods(saver)) & {"list"}
        if sync:

            def listing() -> None:
                list(saver.list(None, limit=1))
                list(saver.list(config_of(thread), filter={"step": 1}))
                list(saver.list(config_of(thread), before=config_of(thread, second)))
                list(saver.list(config_of(thread), limit=1))

            await asyncio.to_thread(listing)

    async def test_sweep_channel_values_of_every_shape(self, instance: Any, thread: str) -> None:
        """Each shape of `VALUE_SHAPES` (special floats, integers past 2**53, NUL and a lone
        surrogate in a string, keys with ``.`` and ``$``...) put as a channel value and as
        a pending write, each in a thread of its own, and read back: as the saver's
        serializer gives it back (``serde.loads_typed(serde.dumps_typed(v))``: a value
        that LangGraph's serializer itself changes is not the saver's doing), or refused
        by ``aput`` or ``aput_writes`` with an error. A saver that keeps values in a JSON
        column or a JSON encoding of its own changes some of them without a word."""
        saver = instance
        wrong: list[str] = []
        for n, (shape, value) in enumerate(VALUE_SHAPES.items()):
            try:
                expected = saver.serde.loads_typed(saver.serde.dumps_typed(value))
            except Exception:
                continue  # the serializer cannot: the saver has nothing to keep
            where = f"{thread}-v{n}"
            try:
                stored = await put(saver, where, {"c": value})
            except Exception:
                continue  # refused with an error: right
            try:
                await saver.aput_writes(config_of(where, stored), [("c", value)], task_id="t")
            except Exception:
                wrote = False
            else:
                wrote = True
            try:
                got = await get(saver, where, stored)
            except Exception as exc:
                wrong.append(f"{shape}: put, then aget_tuple raised {type(exc).__name__}: {exc}")
                continue
            if got is None:
                wrong.append(f"{shape}: put, then aget_tuple found nothing")
                continue
            found = got.checkpoint["channel_values"].get("c", "<missing>")
            if not same_value(found, expected):
                wrong.append(f"{shape}: channel value {expected!r} read back as {found!r}")
            written = _writes(got).get(("t", "c"), "<missing>")
            if wrote and not same_value(written, expected):
                wrong.append(f"{shape}: pending write {expected!r} read back as {written!r}")
        if wrong:
            fail(
                "a channel value or write comes back as the serializer gives it, or is refused",
                expected="each shape's value as serde.loads_typed(serde.dumps_typed(value)) "
                "gives it (NaN, the infinities and -0.0 included), or an error from aput or "
                "aput_writes",
                observed=joined(wrong),
                detail="store the bytes of serde.dumps_typed as they are (a bytea or blob "
                "column), not values re-encoded as JSON: a JSON column has no NaN, no "
                "infinity and no NUL, jsonb turns -0.0 into 0, and orjson writes NaN as null",
            )

    @slow(300, LENGTHS_HINT)
    async def test_sweep_threads_of_every_length(
        self, eco_target: EcosystemTarget, instance: Any, thread: str
    ) -> None:
        """A thread grows to each length of the ``lengths`` matrix (1 to the target's
        ``max_length``, past pages of 10, 100, 101 and 1,000 items): at each, ``alist``
        yields every checkpoint once, newest first, and ``aget_tuple`` the newest; a
        checkpoint holding as many pending writes gives them all; a thread of that length
        is copied, pruned and deleted whole, where the saver implements those. Then, one
        checkpoint longer, ``alist`` with ``limit`` and with ``before`` yields each length's
        worth of checkpoints, the ones LangGraph says."""
        saver = instance
        has = set(implemented_methods(saver))
        ids: list[str] = []
        writes: list[str] = []
        rows = lengths(eco_target.max_length)
        for n in rows:
            await _grow(saver, thread, ids, n)
            await _check_thread(saver, has, thread, ids)
            if "aput_writes" in has:
                await _check_writes(saver, f"{thread}-w", writes, n)
            await _whole_thread_calls(saver, has, f"{thread}-{n}", n)
        await _grow(saver, thread, ids, rows[-1] + 1)
        await _check_options(saver, has, thread, ids, rows)

    @slow(
        120,
        "the thread grows for 20 s at most; what takes longer is listing and deleting it "
        "(a listing that reads one checkpoint a request)",
    )
    async def test_a_thread_longer_than_a_backends_batch_is_listed_and_deleted_whole(
        self, eco_target: EcosystemTarget, instance: Any, thread: str
    ) -> None:
        """A thread grows past the target's ``max_length``, to `LONG_THREAD_MOST`
        checkpoints, for as long as `LONG_THREAD_SECONDS` last: ``alist`` yields every
        checkpoint once, newest first, ``aget_tuple`` the newest, and ``adelete_thread``
        leaves none. One request that carries every item of a thread has a limit the
        ``lengths`` sweep never reaches: Lua's ``unpack`` of more than 8,000 values (a
        Redis script that deletes every key of the thread), the bind parameters of one
        SQL statement (32,766 in SQLite, 65,535 in PostgreSQL)."""
        saver = instance
        has = set(implemented_methods(saver))
        ids: list[str] = []
        deadline = time.monotonic() + LONG_THREAD_SECONDS
        while len(ids) < LONG_THREAD_MOST and time.monotonic() < deadline:
            more = min(LONG_THREAD_WIDTH, LONG_THREAD_MOST - len(ids))
            await _grow_at_once(saver, thread, ids, more)
        need(
            len(ids) > eco_target.max_length,
            f"the saver put {len(ids)} checkpoints in {LONG_THREAD_SECONDS:g} s, no more than "
            f"the lengths sweep's {eco_target.max_length}: no longer thread was made",
        )
        await _check_thread(saver, has, thread, ids)
        if "adelete_thread" not in has:
            return
        await saver.adelete_thread(thread)
        left = await _ids(saver, thread)
        if left or await get(saver, thread) is not None:
            fail(
                f"a thread of {len(ids)} checkpoints is deleted whole",
                expected="no checkpoint left after adelete_thread",
                observed=f"{len(left)} left (alist), aget_tuple "
                f"{'found one' if await get(saver, thread) is not None else 'found none'}",
                detail="delete a thread in batches of a size the backend takes (a Lua "
                "script's unpack takes at most 8,000 values, a SQL statement a limited "
                "number of parameters), or by a range or a prefix, never all its items in "
                "one request",
            )

    async def test_sweep_other_instance_and_reopened(
        self, eco_target: EcosystemTarget, location: str | None, thread: str
    ) -> None:
        need(
            location is not None,
            "the factory takes no location: no second instance on the same data",
        )
        a, b = f"{thread}-a", f"{thread}-b"
        async with eco_target.open(location=location) as saver:
            has = set(implemented_methods(saver))
            for t in (a, b):
                await put(saver, t, {"v": t})
            async with eco_target.open(location=location) as other:
                await _every_call(other, has, a, b)  # written through another open instance
            for t in (f"{a}-r", f"{b}-r"):
                await put(saver, t, {"v": t})
        if eco_target.durable:
            async with eco_target.open(location=location) as reopened:
                await _every_call(reopened, has, f"{a}-r", f"{b}-r")


LONG_THREAD_MOST = 10_001
"""How long `test_a_thread_longer_than_a_backends_batch_is_listed_and_deleted_whole`
grows its thread at most: past Lua's ``unpack`` limit of 8,000 values."""

LONG_THREAD_SECONDS = 20.0
"""How long that test goes on putting checkpoints (a slow saver makes a shorter thread;
one that puts no more than the ``lengths`` sweep's ``max_length`` in that time is skipped,
with the count in the reason)."""


LONG_THREAD_WIDTH = 16
"""How many of that thread's checkpoints are put at once (a saver that syncs each write
makes a longer thread in the time)."""


async def _grow_at_once(
    saver: BaseCheckpointSaver[Any], thread: str, ids: list[str], n: int
) -> None:
    """Put ``n`` more checkpoints on ``thread`` at once, each the child of the one made
    before it (their ids increase in that order), and add their ids to ``ids``."""
    made: list[tuple[Checkpoint, dict[str, Any]]] = [
        checkpoint_of(saver, {"n": len(ids) + i}) for i in range(n)
    ]
    parents = [ids[-1] if ids else None] + [checkpoint["id"] for checkpoint, _ in made[:-1]]
    await together(
        *(
            saver.aput(
                config_of(thread, parent),
                checkpoint,
                CheckpointMetadata(source="loop", step=len(ids) + i),
                versions,
            )
            for i, (parent, (checkpoint, versions)) in enumerate(zip(parents, made, strict=True))
        )
    )
    ids.extend(checkpoint["id"] for checkpoint, _ in made)


async def _grow(saver: BaseCheckpointSaver[Any], thread: str, ids: list[str], n: int) -> None:
    """Put checkpoints on ``thread``, each the child of the one before, until ``ids`` (its
    checkpoints, oldest first) holds ``n``."""
    while len(ids) < n:
        parent = ids[-1] if ids else None
        ids.append(await put(saver, thread, {"n": len(ids)}, parent=parent, step=len(ids)))


async def _ids_before(
    saver: Any, has: set[str], config: RunnableConfig, before: RunnableConfig
) -> dict[str, Any]:
    """The ids ``alist`` (and the sync ``list``, where the saver has it, in a worker
    thread) give for ``config`` with ``before``, by method."""
    listings: dict[str, Any] = {
        "alist": [_id_of(t) async for t in saver.alist(config, before=before)]
    }
    if "list" in has:
        listings["list"] = await asyncio.to_thread(_sync_ids, saver, config, before=before)
    return listings


def _listed(saver: Any, config: RunnableConfig | None, limit: int) -> list[CheckpointTuple]:
    """The sync ``list`` of ``config`` with ``limit``, read whole (run in a worker thread)."""
    return list(saver.list(config, limit=limit))


def _sync_ids(saver: BaseCheckpointSaver[Any], config: RunnableConfig, **options: Any) -> Any:
    """The ids that the sync ``list`` gives, newest first (run it in a thread)."""
    return [_id_of(t) for t in saver.list(config, **options)]


async def _check_thread(
    saver: BaseCheckpointSaver[Any], has: set[str], thread: str, ids: list[str]
) -> None:
    """``alist`` and ``aget_tuple`` of the latest of a thread whose checkpoints are ``ids``
    (oldest first), and their sync twins where the saver has them."""
    reads = {"alist": await _ids(saver, thread)}
    latest = {"aget_tuple": _id_of(await get(saver, thread))}
    if "list" in has:
        reads["list"] = await asyncio.to_thread(_sync_ids, saver, config_of(thread))
    if "get_tuple" in has:
        got = await asyncio.to_thread(saver.get_tuple, config_of(thread))
        latest["get_tuple"] = _id_of(got)
    wrong = [
        f"{method} gave {counted(listed, ids[::-1])}"
        for method, listed in reads.items()
        if listed != ids[::-1]
    ]
    wrong += [
        f"{method} gave {'none' if got_id is None else 'an older one'}"
        for method, got_id in latest.items()
        if got_id != ids[-1]
    ]
    if wrong:
        fail(
            f"every checkpoint of a thread of {len(ids)} is listed, newest first, and the "
            "newest is its latest, however many pages the backend answers in",
            expected=f"{len(ids)} checkpoints listed and the newest as the latest",
            observed="; ".join(wrong),
            detail=PAGES_HINT,
        )


async def _check_options(
    saver: BaseCheckpointSaver[Any], has: set[str], thread: str, ids: list[str], rows: list[int]
) -> None:
    """``alist`` (and the sync ``list``, where the saver has it) with ``limit=n`` and with
    ``before`` the checkpoint after the ``n`` oldest, for each ``n`` of ``rows``, of a
    thread of ``ids`` (oldest first, more than any row)."""
    newest = ids[::-1]
    config = config_of(thread)
    for n in rows:
        cut = config_of(thread, ids[n])
        want = {"limit": newest[:n], "before": ids[:n][::-1]}
        got = {
            f"alist(limit={n})": (
                "limit",
                [_id_of(t) async for t in saver.alist(config, limit=n)],
            ),
            f"alist(before=checkpoint {n + 1})": (
                "before",
                [_id_of(t) async for t in saver.alist(config, before=cut)],
            ),
        }
        if "list" in has:
            got[f"list(limit={n})"] = (
                "limit",
                await asyncio.to_thread(_sync_ids, saver, config, limit=n),
            )
            got[f"list(before=checkpoint {n + 1})"] = (
                "before",
                await asyncio.to_thread(_sync_ids, saver, config, before=cut),
            )
        wrong = [
            f"{what} gave {counted(listed, want[kind])}"
            for what, (kind, listed) in got.items()
            if listed != want[kind]
        ]
        if wrong:
            fail(
                f"alist (and list) with limit or before yields all {n} checkpoints it selects of a "
                f"thread of {len(ids)}, however many pages the backend answers in",
                expected=f"the {n} newest with limit={n}, the {n} oldest with before "
                f"checkpoint {n + 1}",
                observed="; ".join(wrong),
                detail=PAGES_HINT,
            )


async def _check_writes(
    saver: BaseCheckpointSaver[Any], thread: str, made: list[str], n: int
) -> None:
    """Writes of one task each onto one checkpoint of ``thread`` until it holds ``n`` (``made``
    is the checkpoint's id, then the task of each write): ``aget_tuple`` gives them all."""
    if not made:
        made.append(await put(saver, thread, {"writes": True}))
    config = config_of(thread, made[0])
    while len(made) - 1 < n:
        task = f"task-{len(made) - 1:05d}"
        await saver.aput_writes(config, [("ch", len(made) - 1)], task_id=task)
        made.append(task)
    want = {(task, "ch"): i for i, task in enumerate(made[1:])}
    found = await saver.aget_tuple(config)
    got = [] if found is None else list(found.pending_writes or [])
    if len(got) != n or _writes(found) != want:
        fail(
            f"every pending write of a checkpoint holding {n} is read back",
            expected=f"{n} writes, one per task",
            observed=counted([(w[0], w[1], w[2]) for w in got], [(*k, v) for k, v in want.items()]),
            detail=PAGES_HINT,
        )


async def _whole_thread_calls(
    saver: BaseCheckpointSaver[Any], has: set[str], base: str, n: int
) -> None:
    """``acopy_thread``, ``aprune`` and ``adelete_thread`` (those the saver implements) of a
    thread of ``n`` checkpoints: the copy holds all of them, the pruned thread only the
    newest, the deleted thread none."""
    if not has & {"acopy_thread", "aprune", "adelete_thread"}:
        return
    source, copy, pruned = f"{base}-d", f"{base}-c", f"{base}-p"
    made: list[str] = []
    await _grow(saver, source, made, n)
    wrong: list[str] = []
    if "acopy_thread" in has:
        await saver.acopy_thread(source, copy)
        got = await _ids(saver, copy)
        if got != made[::-1]:
            wrong.append(f"acopy_thread made a copy of {counted(got, made[::-1])}")
        pruned = copy
    if "aprune" in has:
        if "acopy_thread" not in has:
            await _grow(saver, pruned, made := [], n)
        await saver.aprune([pruned])
        got = await _ids(saver, pruned)
        if got != made[-1:]:
            wrong.append(f"aprune (keep_latest) left {counted(got, made[-1:])}")
    if "adelete_thread" in has:
        await saver.adelete_thread(source)
        left = await _ids(saver, source)
        if left or await get(saver, source) is not None:
            wrong.append(f"adelete_thread left {len(left)} of {n}")
    if wrong:
        fail(
            f"a thread of {n} checkpoints is copied, pruned and deleted whole",
            expected="every checkpoint copied, the newest alone kept, none left",
            observed="; ".join(wrong),
            detail=PAGES_HINT,
        )


def implemented_methods(saver: Any) -> tuple[str, ...]:
    """The methods of ``saver``'s class that override ``BaseCheckpointSaver``'s."""
    from .coverage import implemented

    return implemented(saver, "langgraph")[0]


class SaverHeldSweepTests(SaverFixtures):
    """Every writing and reading method, cancelled while the backend is held."""

    conformance_group: ClassVar[str | None] = "cancellation"

    async def test_sweep_every_write_cancelled_while_held(
        self, eco_target: EcosystemTarget, location: str | None, thread: str, cancel_bound: float
    ) -> None:
        need(eco_target.holds, no_hold_reason(eco_target))
        async with eco_target.open(location=location) as probe:  # which methods it has
            has = set(implemented_methods(probe))
        late: list[str] = []
        writes = [
            m
            for m in (
                "aput",
                "aput_writes",
                "adelete_thread",
                "adelete_for_runs",
                "acopy_thread",
                "aprune",
            )
            if m in has
        ]
        for method in writes:
            t, run = f"{thread}-{method}", f"run-{uuid6().hex}"
            ids = []
            if location is not None:  # something for the call to write, delete or copy
                async with eco_target.open(location=location) as setup:
                    for i in range(2):
                        ids.append(await put(setup, t, {"v": i}, run=run))
            known = ids[-1] if ids else str(uuid6(clock_seq=-1))

            def call(
                saver: Any, method: str = method, t: str = t, run: str = run, known: str = known
            ) -> Any:
                if method == "aput":
                    checkpoint, versions = checkpoint_of(saver, {"v": "held"})
                    return saver.aput(config_of(t), checkpoint, {"step": 9}, versions)
                if method == "aput_writes":
                    return saver.aput_writes(config_of(t, known), [("ch", "held")], task_id="h")
                if method == "adelete_thread":
                    return saver.adelete_thread(t)
                if method == "adelete_for_runs":
                    return saver.adelete_for_runs([run])
                if method == "acopy_thread":
                    return saver.acopy_thread(t, f"{t}-copy")
                return saver.aprune([t])

            async with held(eco_target, location) as h:
                assert h is not None
                outcome = await cancel_while_held(
                    partial(call, h.instance), wait=max(5.0, 10 * cancel_bound)
                )
                await h.release()
                await finish(outcome.task)
            if outcome.late(cancel_bound):
                late.append(f"{method} {outcome.result} after {outcome.seconds:.2f} s")
        if late:
            fail(
                "a cancelled call must raise CancelledError promptly while the backend is held",
                expected=f"CancelledError within {cancel_bound:g} s from every writing method",
                observed="; ".join(late),
                detail="do not catch CancelledError (re-raise it after cleanup), and do not "
                "wait for the backend's reply inside a shield, a thread join or a cursor's close",
            )

    async def test_sweep_every_read_cancelled_while_held(
        self, eco_target: EcosystemTarget, location: str | None, thread: str, cancel_bound: float
    ) -> None:
        """``aget_tuple`` (by id and latest) and ``alist``, each cancelled while the backend
        is held: each raises ``CancelledError`` within the bound, and once the backend
        answers again the same instance's next calls (an ``aput`` of another thread, then
        the same read of it) get their own answers (a saver with one connection that
        leaves a cancelled read's reply on it hands that reply to the next read)."""
        need(eco_target.holds, no_hold_reason(eco_target))
        async with eco_target.open(location=location) as probe:  # which methods it has
            has = set(implemented_methods(probe))
        wrong: list[str] = []
        for n, row in enumerate(r for r in SAVER_READS_AFTER if r.startswith("a")):
            if row.split()[0] not in has or "aput" not in has:
                continue
            cancelled, after = f"{thread}-{n}-cancelled", f"{thread}-{n}-after"
            known = str(uuid6(clock_seq=-1))
            if location is not None:  # something for the cancelled read to find
                async with eco_target.open(location=location) as setup:
                    known = await put(setup, cancelled, {"v": "cancelled"})
            outcome, mine, got = await cancel_a_read_then_read_again(
                eco_target,
                location,
                partial(_read_by, row=row),
                partial(put, values={"v": "after"}),
                (cancelled, after),
                known,
                cancel_bound,
            )
            if outcome.late(cancel_bound):
                wrong.append(f"{row} {outcome.result} after {outcome.seconds:.2f} s")
            expected: _Seen = [(mine, {})] if row == "alist" else (mine, {})
            if got != expected:
                wrong.append(
                    f"the {row} that followed answered {got!r} for thread {after!r}, "
                    f"expected {expected!r}"
                )
        if wrong:
            fail(
                "a cancelled read must raise CancelledError promptly while the backend is "
                "held, and leave the next call its own answer",
                expected=f"CancelledError within {cancel_bound:g} s from every read, then "
                "the next read's own answer",
                observed="; ".join(wrong),
                detail="a read cancelled before its reply came must leave no unread reply on "
                "the connection (close or reset it), nor wait for the reply inside a shield",
            )


class SaverConformance(
    SaverSemanticsTests,
    SaverCancellationTests,
    SaverConcurrencyTests,
    SaverIsolationTests,
    SaverDurabilityTests,
    SaverHygieneTests,
    SaverScenarioTests,
    SaverSweepTests,
    SaverHeldSweepTests,
):
    """Every group for a LangGraph saver; subclass it and override ``saver_factory``."""
