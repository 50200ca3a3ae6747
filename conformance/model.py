"""Group ``model``: random programs, run against the adapter, checked against the protocol's model.

Hypothesis draws programs (`programs`): puts in
every mode, gets, deletes with and without ``if_match``, ``delete_many`` (a key
may repeat), listings with prefix, ``start_after``, ``limit`` and small pages,
values of 0, 1 and around each power of two bytes, keys of every shape the
protocol allows and keys that are parents, children and neighbours of each
other; tasks that run at once; cancellations at a drawn point; closing and
reopening at the same location (where ``durable`` is declared and the factory
accepts ``location``) and ``aclose()`` while tasks run. Each example runs on a
fresh storage, and every answer is compared with what the model allows:

- put, get and delete are recorded as one history
  (`Operation`) and checked by
  the linearizability checker, which accepts any order of the operations that
  ran at once, and treats a cancelled or failed write as the protocol says
  (it may have happened, or may still happen; on an adapter that declares
  ``settles_cancelled_writes``, not after ``CancelledError``);
- listings and ``delete_many`` are checked against which keys the model knows
  to be present, absent, or either (a key written by a task running at the same
  time, or by a write whose outcome is unknown).

Why not `hypothesis.stateful.RuleBasedStateMachine`: its rules are
synchronous and sequential, while these programs run tasks at once on the test's
event loop, and the model's answer to a concurrent segment is a search over its
orders (the checker), not one next state. So Hypothesis draws a whole program
and shrinks it; this module runs it. Hypothesis runs in a worker thread and
hands each program to the test's event loop.

Budget and seed: the group runs examples until its budget (seconds,
``--checkpointkit-model-budget``, ``Target.model_budget``, 12 by default) is
spent; the seed (``--checkpointkit-model-seed``, ``$CHECKPOINTKIT_MODEL_SEED``,
else a fresh one) fixes what Hypothesis draws. A failure is shrunk (within
half the budget more) and reported with the seed and a standalone script that
replays the minimal program (`replay`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal

import pytest

from ..errors import ConfigurationError, OutcomeUnknown, StorageClosed, StorageUnavailable
from ..storage import Capabilities, Storage, StorageBase, delete_many
from .checks import ConformanceFailure, describe, fail, short_key
from .clauses import checks
from .fixtures import StorageFixtures, raw_storage
from .histories import HistoryRecorder, _Call, run_to_the_end
from .linearizability import InconclusiveError, Operation, check
from .programs import (
    CloseDuring,
    Delete,
    DeleteMany,
    Get,
    List,
    Op,
    Program,
    ProgramOptions,
    Put,
    Reopen,
    Step,
    Together,
    programs,
    replay_script,
)
from .seed import MODEL_SEED_ENV, MODEL_SEED_KEY, resolve_seed
from .settings import DEFAULT_MODEL_BUDGET
from .target import Target, new_location, resolve_target

__all__ = ["ModelTests", "execute", "replay"]

BOGUS_VERSION = "ck-model-no-such-version"
"""The version an ``if-match`` of ref ``bogus`` expects: one that no write minted."""

State = Literal["absent", "present", "either"]


@dataclass
class _Keys:
    """Which keys the model knows to be present or absent, between sequential steps.

    A key is ``either`` after a write whose outcome is unknown, or after a
    segment of tasks that wrote it; an answer that shows it (a get, a delete,
    a failed create) makes it known again, unless a write whose outcome is
    unknown may still land on it later (``haunted``: an adapter that does not
    settle cancelled writes).
    """

    settles: bool
    state: dict[str, State] = field(default_factory=dict)
    haunted: set[str] = field(default_factory=set)

    def of(self, key: str) -> State:
        return "either" if key in self.haunted else self.state.get(key, "absent")

    def learn(self, key: str, state: State) -> None:
        if key not in self.haunted:
            self.state[key] = state

    def unknown(self, key: str) -> None:
        self.state[key] = "either"
        if not self.settles:
            self.haunted.add(key)


def _values(program: Program) -> dict[tuple[int, int, int], bytes]:
    """The bytes of each put, by (step, task, operation): distinct per key.

    A value of 4 bytes or more starts with the put's number in the program; a
    shorter one is the next unused value of that size for that key (a size
    whose values are used up on the key grows by one: a key holds ``b''`` once).
    """
    values: dict[tuple[int, int, int], bytes] = {}
    small: dict[tuple[str, int], int] = {}
    n = 0
    for s, step in enumerate(program.steps):
        for t, task in enumerate(_tasks(step)):
            for o, op in enumerate(task):
                if not isinstance(op, Put):
                    continue
                n += 1
                size = op.size
                while size < 4:
                    used = small.get((op.key, size), 0)
                    if used < 256**size:
                        small[(op.key, size)] = used + 1
                        values[(s, t, o)] = used.to_bytes(size, "big")
                        break
                    size += 1
                else:
                    values[(s, t, o)] = n.to_bytes(4, "big") + bytes([n % 251]) * (size - 4)
    return values


def _tasks(step: Step) -> tuple[tuple[Op, ...], ...]:
    if isinstance(step, Together | CloseDuring):
        return step.tasks
    if isinstance(step, Reopen):
        return ()
    return ((step,),)


def _universe(program: Program) -> set[str]:
    keys: set[str] = set()
    for step in program.steps:
        for task in _tasks(step):
            for op in task:
                if isinstance(op, DeleteMany):
                    keys.update(op.keys)
                elif not isinstance(op, List):
                    keys.add(op.key)
    return keys


def _written(step: Step) -> set[str]:
    keys: set[str] = set()
    for task in _tasks(step):
        for op in task:
            if isinstance(op, Put | Delete):
                keys.add(op.key)
            elif isinstance(op, DeleteMany):
                keys.update(op.keys)
    return keys


def _words(op: Op, data: bytes | None = None) -> str:
    if isinstance(op, Put):
        mode = f"if-match {op.ref}" if op.mode == "if-match" else op.mode
        size = len(data) if data is not None else op.size
        text = f"put({short_key(op.key)}, {size} bytes, {mode})"
    elif isinstance(op, Get):
        text = f"get({short_key(op.key)})"
    elif isinstance(op, Delete):
        text = f"delete({short_key(op.key)}{f', if_match {op.ref}' if op.ref else ''})"
    elif isinstance(op, DeleteMany):
        text = f"delete_many([{', '.join(short_key(k, 24) for k in op.keys)}])"
    else:
        text = f"list({op.prefix!r:.40}, start_after={op.start_after!r:.40}, limit={op.limit!r})"
    cancel = getattr(op, "cancel", None)
    return text if cancel is None else f"{text} cancelled at {cancel!r}"


class _Run:
    """One program against one target: the history, the model of keys, the log."""

    def __init__(
        self,
        program: Program,
        target: Target,
        capabilities: Capabilities,
        *,
        reopen: bool,
    ) -> None:
        self.program = program
        self.target = target
        self.settles = capabilities.settles_cancelled_writes
        self.reopen = reopen
        self.recorder = HistoryRecorder(settles=self.settles)
        self.keys = _Keys(self.settles)
        self.universe = _universe(program)
        self.values = _values(program)
        self.seen: dict[str, list[str]] = {}
        self.log: list[str] = []
        self.step = 0
        self.step_failed = True  # until the program's steps have all run
        self.storage: Storage | None = None

    # -- running ------------------------------------------------------------------------
    async def run(self) -> None:
        location = new_location() if self.target.reopens else None
        async with contextlib.AsyncExitStack() as stack:

            async def open_storage() -> Storage:
                opened = await stack.enter_async_context(self.target.open(location=location))
                if self.program.page_size is not None:
                    raw = raw_storage(opened)
                    if isinstance(raw, StorageBase):
                        raw.page_size = self.program.page_size  # type: ignore[misc]
                return opened

            self.storage = await open_storage()
            open_ = True
            try:
                for number, step in enumerate(self.program.steps, 1):
                    self.step = number
                    if isinstance(step, Reopen):
                        await self.storage.aclose()
                        await self._expect_closed("aclose() of a reopen step")
                        self.storage = await open_storage()
                        self.log.append(f"step {self.step}: closed, reopened at the same location")
                    elif isinstance(step, Together | CloseDuring):
                        await self._segment(step)
                        if isinstance(step, CloseDuring):
                            if not self.reopen:
                                self.log.append(f"step {self.step}: the program ends (closed)")
                                open_ = False
                                break
                            self.storage = await open_storage()
                            self.log.append(f"step {self.step}: reopened at the same location")
                    else:
                        await self._op(self.storage, step, (self.step - 1, 0, 0), "c0", None)
                else:
                    for key in sorted(self.universe):  # a last look at every key
                        await self._op(self.storage, Get(key), (-1, 0, 0), "end", None)
            finally:
                if open_:  # leave nothing behind at the location (best effort)
                    with contextlib.suppress(Exception):
                        await delete_many(self.storage, sorted(self.universe))
        self.step_failed = False
        self._check_history()

    async def _segment(self, step: Together | CloseDuring) -> None:
        assert self.storage is not None
        storage = self.storage
        moving = _written(step)
        closed_at: list[float] = []
        late: list[tuple[Op, tuple[int, int, int], str, float, float]] = []

        async def task(t: int) -> None:
            for o, op in enumerate(step.tasks[t]):
                where = (self.step - 1, t, o)
                invoked = self.recorder.clock()
                try:
                    await self._op(storage, op, where, f"c{t}", moving)
                except (StorageClosed, OutcomeUnknown) as exc:
                    # close.in-flight: an operation that aclose() cut off raises
                    # StorageClosed, or, a write sent before it, OutcomeUnknown (a put's
                    # and a delete's are recorded as unknown by the recorder; a
                    # delete_many's comes here)
                    if not isinstance(step, CloseDuring) or (
                        isinstance(exc, OutcomeUnknown) and not isinstance(op, DeleteMany)
                    ):
                        raise
                    late.append((op, where, f"c{t}", invoked, self.recorder.clock()))
                    self.log.append(
                        f"step {self.step} task {t}: {_words(op)} -> {type(exc).__name__}"
                    )

        async def closer(after: int) -> None:
            for _ in range(after):
                await asyncio.sleep(0)
            await storage.aclose()
            closed_at.append(self.recorder.clock())
            self.log.append(f"step {self.step}: aclose() returned while the tasks ran")

        jobs = [task(t) for t in range(len(step.tasks))]
        if isinstance(step, CloseDuring):
            jobs.append(closer(step.after))
        await asyncio.gather(*jobs)
        for op, where, client, invoked, completed in late:
            # An operation cut off by aclose(): whole or not at all; a write may have
            # landed, until aclose() returned (or at any later moment, if the adapter
            # does not settle cancelled writes).
            end = max(completed, closed_at[0]) if self.settles else None
            for key, call in self._calls(op, where):
                if call.kind != "get":
                    self.recorder.operations.append(
                        Operation(
                            key=key, kind=call.kind, invoked=invoked, completed=end,  # type: ignore[arg-type]
                            outcome="unknown", client=client, mode=call.mode,  # type: ignore[arg-type]
                            data=call.data, expected=call.expected, note="cut off by aclose()",
                        )
                    )  # fmt: skip
        for key in moving:
            self.keys.state[key] = "either"
        for done in self.recorder.operations:
            if done.outcome == "unknown" and done.key in moving and not self.settles:
                self.keys.haunted.add(done.key)
        if isinstance(step, CloseDuring):
            await self._expect_closed("aclose() while tasks ran")

    def _calls(self, op: Op, where: tuple[int, int, int]) -> list[tuple[str, _Call]]:
        if isinstance(op, Put):
            expected = self._version(op.key, op.ref) if op.mode == "if-match" else None
            return [(op.key, _Call("put", op.mode, self.values[where], expected))]
        if isinstance(op, Delete):
            expected = self._version(op.key, op.ref) if op.ref is not None else None
            return [(op.key, _Call("delete", expected=expected))]
        if isinstance(op, DeleteMany):
            return [(k, _Call("delete")) for k in dict.fromkeys(op.keys)]
        if isinstance(op, Get):
            return [(op.key, _Call("get"))]
        return []

    def _version(self, key: str, ref: str | None) -> str:
        seen = self.seen.get(key, [])
        if ref == "current" and seen:
            return seen[-1]
        if ref == "stale" and seen:
            return next((v for v in seen if v != seen[-1]), BOGUS_VERSION)
        if ref == "other":
            for other in sorted(self.seen):
                if other != key and self.seen[other]:
                    return self.seen[other][-1]
        return BOGUS_VERSION

    async def _op(
        self,
        storage: Storage,
        op: Op,
        where: tuple[int, int, int],
        client: str,
        moving: set[str] | None,
    ) -> None:
        """Run one operation; ``moving``: the keys tasks running at once write (None: alone)."""
        label = f"step {self.step}" + (f" task {where[1]}" if moving is not None else "")
        if isinstance(op, List):
            got = [key async for key in storage.list(op.prefix, start_after=op.start_after,
                                                     limit=op.limit)]  # fmt: skip
            self.log.append(f"{label}: {_words(op)} -> {[short_key(k, 30) for k in got]}")
            self._check_listing(op, got, moving or set())
            return
        if isinstance(op, DeleteMany):
            await self._delete_many(storage, op, moving, label)
            return
        key, call = self._calls(op, where)[0]
        cancel = getattr(op, "cancel", None)
        recorded = await self.recorder.perform(client, storage, key, call, cancel)
        self.log.append(f"{label}: {_words(op, call.data)} -> " + _outcome(recorded))
        if recorded is None:
            return
        if recorded.outcome == "ok" and recorded.version is not None:
            self.seen.setdefault(key, []).append(recorded.version)
        if moving is None:
            self._learn(recorded)

    async def _delete_many(
        self, storage: Storage, op: DeleteMany, moving: set[str] | None, label: str
    ) -> None:
        distinct = list(dict.fromkeys(op.keys))
        invoked = self.recorder.clock()
        batch = getattr(storage, "delete_many", None)

        async def delete_all() -> Any:
            if batch is not None:
                return await batch(list(op.keys))
            return sum([await storage.delete(k) for k in distinct])

        task = await run_to_the_end(delete_all(), op.cancel)
        completed = self.recorder.clock()
        if task.cancelled():
            # Not atomic: any subset of the keys may be deleted, until CancelledError (or
            # at any later moment, where the adapter does not settle cancelled writes).
            self.log.append(f"{label}: {_words(op)} -> no answer (cancelled)")
            for k in op.keys if moving else distinct:
                self.recorder.operations.append(
                    Operation(
                        key=k, kind="delete", invoked=invoked,
                        completed=completed if self.settles else None, outcome="unknown",
                        client="delete_many", note="cancelled",
                    )
                )  # fmt: skip
                if not moving:
                    self.keys.unknown(k)
            return
        count = task.result()
        self.log.append(f"{label}: {_words(op)} -> {count!r}")
        moving = moving or set()
        states = {k: ("either" if k in moving else self.keys.of(k)) for k in distinct}
        low = sum(1 for s in states.values() if s == "present")
        # A key given twice counts once, unless a task running at once writes it between
        # the two deletes (delete_many is not atomic as a whole).
        high = low + sum(
            op.keys.count(k) if k in moving else 1 for k, s in states.items() if s == "either"
        )
        if not isinstance(count, int) or isinstance(count, bool) or not low <= count <= high:
            allowed = f"{low}" if low == high else f"between {low} and {high}"
            fail(
                "delete_many must return how many of the keys existed (a key given twice "
                "counts once)",
                expected=f"{allowed} for {len(op.keys)} keys of which {len(distinct)} distinct",
                observed=f"it returned {count!r} ({label}: {_words(op)})",
                detail=self._detail(),
            )
        # With tasks running at once, a key given twice is two deletes: one may come before
        # another task's write of it and one after (delete_many is not atomic as a whole).
        for k in op.keys if moving else distinct:
            state = states[k]
            definite = state != "either" and not moving
            self.recorder.operations.append(
                Operation(
                    key=k, kind="delete", invoked=invoked, completed=completed,
                    outcome="ok" if definite else "unknown",
                    existed=(state == "present") if definite else None,
                    client="delete_many",
                )
            )  # fmt: skip
            if not moving:
                self.keys.learn(k, "absent")

    def _learn(self, op: Operation) -> None:
        """What a sequential operation's answer says about its key; checks it first."""
        key = op.key
        if op.outcome == "unknown":
            self.keys.unknown(key)
            return
        before = self.keys.of(key)
        if op.kind == "put":
            after: State = "present" if op.outcome == "ok" or op.mode == "create" else before
            if op.mode == "create":
                self._expect(key, before, "absent" if op.outcome == "ok" else "present", op)
        elif op.kind == "get":
            after = "present" if op.outcome == "ok" else "absent"
            self._expect(key, before, after, op)
        else:
            if op.outcome == "failed":
                after = "present"
            else:
                self._expect(key, before, "present" if op.existed else "absent", op)
                after = "absent"
        self.keys.learn(key, after)

    def _expect(self, key: str, model: State, shown: State, op: Operation) -> None:
        if model in ("either", shown):
            return
        fail(
            f"every answer must fit the protocol's model ({op.kind} after the steps before it)",
            key=key,
            expected=f"the key to be {model}",
            observed=f"{op.call_text()} answered {op.outcome_text()}, as if it were {shown}",
            detail=self._detail(),
        )

    def _check_listing(self, op: List, got: list[str], moving: set[str]) -> None:
        known = {k: ("either" if k in moving else self.keys.of(k)) for k in self.universe}
        present = sorted(k for k, s in known.items() if s == "present")
        what = f"step {self.step}: {_words(op)} returned {len(got)} keys"

        def bad(promise: str, expected: str, observed: str) -> None:
            fail(
                promise,
                expected=expected,
                observed=f"{observed} ({what})",
                detail=self._detail(),
            )

        for before, after in itertools.pairwise(got):
            if not before < after:
                word = "twice" if before == after else "out of order"
                bad(
                    "a listing returns each key once, in ascending order",
                    "strictly ascending keys",
                    f"{short_key(after)} came {word} after {short_key(before)}",
                )
        for key in got:
            if not isinstance(key, str) or not key.startswith(op.prefix):
                bad(
                    "a listing never returns a key outside its prefix",
                    f"keys starting with {op.prefix!r}",
                    f"it returned {short_key(key)}",
                )
            if op.start_after is not None and not key > op.start_after:
                bad(
                    "a listing returns only keys after start_after",
                    f"keys greater than {short_key(op.start_after)}",
                    f"it returned {short_key(key)}",
                )
            if known.get(key, "absent") == "absent":
                why = "was never written" if key not in self.universe else "is absent"
                bad(
                    "a listing returns only keys that exist",
                    "no key the model knows to be absent",
                    f"it returned {short_key(key)}, which {why}",
                )
        if op.limit is not None and len(got) > op.limit:
            bad("a listing returns at most limit keys", f"at most {op.limit}", f"{len(got)}")
        due = [
            k
            for k in present
            if k.startswith(op.prefix) and (op.start_after is None or k > op.start_after)
        ]
        if op.limit is not None and len(got) >= op.limit:
            due = [k for k in due if got and k < got[-1]]
        missing = [k for k in due if k not in got]
        if missing:
            bad(
                "a listing returns every key that exists for the whole listing",
                f"{', '.join(short_key(k, 30) for k in due)} among the keys",
                f"{', '.join(short_key(k, 30) for k in missing)} "
                f"{'is' if len(missing) == 1 else 'are'} missing",
            )

    async def _expect_closed(self, what: str) -> None:
        assert self.storage is not None
        key = min(self.universe, default="a")
        try:
            await self.storage.get(key)
        except StorageClosed:
            return
        except Exception as exc:
            fail(
                "an operation after aclose() must raise StorageClosed",
                key=key,
                expected="get() on the closed storage to raise StorageClosed",
                observed=f"it raised {describe(exc)} (after {what}, step {self.step})",
            )
        fail(
            "an operation after aclose() must raise StorageClosed",
            key=key,
            expected="get() on the closed storage to raise StorageClosed",
            observed=f"it answered (after {what}, step {self.step})",
        )

    def _check_history(self) -> None:
        try:
            result = check(self.recorder.operations)
        except InconclusiveError:
            return  # too many orders to decide: no verdict (the listings were checked)
        if not result.ok:
            fail(
                "every answer must fit the protocol's model (put, get and delete as one "
                "atomic register per key, in any order of what ran at once)",
                expected="the history of the program to be linearizable",
                observed=f"it is not: {_short_keys(result.describe(), self.universe)}",
                detail=self._detail(),
            )

    def _detail(self) -> str:
        lines = self.log[-40:]
        return "What the program did:\n  " + "\n  ".join(lines)


def _short_keys(text: str, keys: set[str]) -> str:
    """``text`` with the long keys' reprs abbreviated."""
    for key in keys:
        if len(repr(key)) > 60:
            text = text.replace(repr(key), short_key(key))
    return text


def _outcome(op: Operation | None) -> str:
    if op is None:
        return "no answer (cancelled)"
    if op.kind == "get" and op.outcome == "ok":
        return f"ok: {describe(op.data)} version {op.version!r}"
    return op.outcome_text()


async def execute(program: Program, target: Target, capabilities: Capabilities) -> None:
    """Run ``program`` on a fresh storage of ``target``; check every answer against the model.

    Args:
        program: the steps.
        target: opens the storages (at one fresh location, where it accepts one).
        capabilities: what the adapter declares (its settling of cancelled writes,
            whether it is durable).

    Raises:
        ConformanceFailure: an answer the protocol's model does not allow.
    """
    reopen = capabilities.durable and target.reopens
    run = _Run(program, target, capabilities, reopen=reopen)
    try:
        await run.run()
    except ConformanceFailure as exc:
        # The steps that ran: what came after a failing answer did not matter.
        exc.add_note(f"{_RAN} {run.step if run.step_failed else len(program.steps)}")
        raise


def program_options(
    target: Target, capabilities: Capabilities, storage: Storage, *, max_value: int = 1 << 16
) -> ProgramOptions:
    """What programs may draw on this target."""
    return ProgramOptions(
        conditional_put=capabilities.conditional_put,
        conditional_delete=capabilities.conditional_delete,
        reopen=capabilities.durable and target.reopens,
        close_during=True,
        paging=isinstance(raw_storage(storage), StorageBase),
        max_value=max_value,
        holds_key=target.holds_key(storage),
    )


PROGRAM_LIMIT: Final = 30.0
"""Seconds one random program may take (or the model budget, if longer) before the model
group fails it as hung: programs take milliseconds each on a healthy storage."""


@dataclass
class _Search:
    """Hypothesis's search, in batches, until the budget is spent or a program fails."""

    run_example: Callable[[Program], None]
    options: ProgramOptions
    seed: int
    budget: float
    examples_per_batch: int = 10
    failed: Program | None = None
    failure: BaseException | None = None
    seed_of_failure: int | None = None
    examples: int = 0
    batch_seed: int = 0
    shown: Program | None = None
    stopped: bool = False
    """Set when the test ended (its time limit, a cancellation): no program runs after it."""

    def _batch_size(self, batch: int) -> int:
        """Examples of batch ``batch``: 10, 20, 40... (fixed, so that a seed replays)."""
        return int(self.examples_per_batch * 2 ** min(batch, 10))

    def search(self) -> None:
        from hypothesis import HealthCheck, Phase, Verbosity, given, settings
        from hypothesis import seed as hypothesis_seed

        start = time.monotonic()
        shrink_for = max(2.0, self.budget / 2)
        stop_shrinking = start + self.budget + shrink_for
        batch = 0
        while time.monotonic() - start < self.budget and self.failed is None and not self.stopped:
            batch_seed = self.seed if batch == 0 else hash((self.seed, batch)) % 2**32
            self.batch_seed = batch_seed
            batch += 1

            def example(program: Program) -> None:
                if self.stopped:
                    return  # the test has ended: Hypothesis runs out of examples at once
                late = self.failed is not None and time.monotonic() > stop_shrinking
                if late and program != self.failed:
                    return  # out of time to shrink: only the smallest failure replays
                self.examples += 1
                try:
                    self.run_example(program)
                except Exception as exc:
                    self.failed, self.failure = program, exc
                    self.shown = _ran(program, exc)
                    self.seed_of_failure = self.seed
                    raise

            test = settings(
                max_examples=self._batch_size(batch - 1),
                deadline=None,
                database=None,
                derandomize=False,
                phases=[Phase.generate, Phase.shrink],
                suppress_health_check=list(HealthCheck),
                verbosity=Verbosity.quiet,
                report_multiple_bugs=False,
                print_blob=False,
            )(hypothesis_seed(batch_seed)(given(programs(self.options))(example)))
            try:
                with _shrinking_limited_to(shrink_for):
                    test()
            except Exception:
                if self.failed is None:  # Hypothesis itself failed: say so
                    raise


_RAN = "checkpointkit-model-steps-run:"


def _ran(program: Program, exc: BaseException) -> Program:
    """``program`` without the steps after the one whose answer failed (they never ran)."""
    for note in getattr(exc, "__notes__", []):
        if note.startswith(_RAN):
            n = int(note.removeprefix(_RAN))
            return Program(program.steps[:n], program.page_size)
    return program


@contextlib.contextmanager
def _shrinking_limited_to(seconds: float) -> Iterator[None]:
    """Make Hypothesis stop shrinking after ``seconds`` (it allows five minutes).

    Hypothesis has no public setting for it: this sets its engine's module
    constant while the search runs (the search runs alone: the test awaits it),
    and does nothing if a version of Hypothesis has no such constant. The
    examples themselves also stop running once the time is spent (see
    `_Search.search`), so the bound holds either way, more loosely.
    """
    from hypothesis.internal.conjecture import engine

    before = getattr(engine, "MAX_SHRINKING_SECONDS", None)
    if before is None:
        yield
        return
    engine.MAX_SHRINKING_SECONDS = seconds  # type: ignore[assignment]
    try:
        yield
    finally:
        engine.MAX_SHRINKING_SECONDS = before


class ModelTests(StorageFixtures):
    """Random programs of operations and lifecycle events fit the protocol's model."""

    conformance_group: ClassVar[str | None] = "model"
    model_max_value: ClassVar[int] = 1 << 16
    """The largest value a program writes, in bytes."""

    @property
    def time_limit(self) -> float:  # type: ignore[override]
        """The budget, its shrinking, and a margin for one slow example."""
        return getattr(self, "_model_time_limit", 60.0)

    @pytest.fixture
    def model_seed(self, request: pytest.FixtureRequest) -> int:
        """The seed of the programs (``--checkpointkit-model-seed``, or the variable)."""
        seed = request.config.stash.get(MODEL_SEED_KEY, None)
        if seed is None:  # the plugin is not loaded
            try:
                seed = resolve_seed(option_name="--checkpointkit-model-seed", env=MODEL_SEED_ENV)
            except ConfigurationError as exc:
                pytest.fail(str(exc), pytrace=False)
            request.config.stash[MODEL_SEED_KEY] = seed
        return seed

    @pytest.fixture
    def model_budget(self, request: pytest.FixtureRequest, storage_target: Target | None) -> float:
        """Seconds of random programs (``--checkpointkit-model-budget`` overrides the target's)."""
        option = request.config.getoption("checkpointkit_model_budget", default=None)
        budget = float(option) if option is not None else (
            DEFAULT_MODEL_BUDGET if storage_target is None else storage_target.model_budget
        )  # fmt: skip
        self._model_time_limit = budget + max(2.0, budget / 2) + 60.0
        return budget

    @checks(
        "put.round-trip",
        "put.returns-version",
        "put.atomic",
        "put.overwrite",
        "put.create.missing",
        "put.create.existing",
        "put.if-match.current",
        "put.if-match.stale",
        "put.if-match.foreign",
        "put.if-match.missing",
        "put.refused-changes-nothing",
        "get.missing",
        "delete.existing",
        "delete.missing",
        "delete.if-match.current",
        "delete.if-match.stale",
        "delete.if-match.missing",
        "delete-many.count",
        "list.order",
        "list.prefix-only",
        "list.start-after",
        "list.limit",
        "list.pages",
        "list.reflects-writes",
        "list.concurrent-writes",
        "close.storage-closed",
        "close.in-flight",
        "version.changes",
        "version.never-repeats",
        "key.max-length",
        "key.multi-byte",
        "cancel.whole-or-absent",
        "cancel.no-late-landing",
        "cap.durable",
    )
    async def test_random_programs_fit_the_protocol_model(
        self,
        target: Target,
        storage: Storage,
        capabilities: Capabilities,
        model_seed: int,
        model_budget: float,
    ) -> None:
        if model_budget == 0:
            pytest.skip("the model group's budget is 0 seconds")
        loop = asyncio.get_running_loop()
        options = program_options(target, capabilities, storage, max_value=self.model_max_value)
        limit = max(PROGRAM_LIMIT, model_budget)
        running: list[concurrent.futures.Future[None]] = []

        def run_example(program: Program) -> None:
            future = asyncio.run_coroutine_threadsafe(execute(program, target, capabilities), loop)
            running[:] = [future]
            if search.stopped:  # the test ended while this program was being sent
                future.cancel()
            try:
                future.result(timeout=limit)
            except concurrent.futures.TimeoutError:
                future.cancel()
                search.stopped = True  # the storage hangs: no more programs on it
                raise ConformanceFailure(
                    f"a program did not finish within {limit:g} s: a storage operation "
                    "never returned (a lock or a connection kept by an earlier call that "
                    "was cancelled or failed?)"
                ) from None

        search = _Search(run_example, options, model_seed, model_budget)
        searching = asyncio.ensure_future(asyncio.to_thread(search.search))
        try:
            await asyncio.shield(searching)
        except BaseException:
            # The test's time limit or a cancellation: stop the search in its thread, and
            # wait (a bounded time) until it has stopped, so that no program of it runs on
            # this event loop after the test (one would hang the loop's shutdown).
            search.stopped = True
            for future in running:
                future.cancel()
            await asyncio.wait([searching], timeout=limit)
            if searching.done() and not searching.cancelled():
                searching.exception()  # retrieved: the test's own error is the one raised
            raise
        if search.failed is None:
            return
        exc = search.failure
        seed = search.seed_of_failure
        why = str(exc) if isinstance(exc, ConformanceFailure) else (
            f"the program raised {type(exc).__name__}: {exc}"
        )  # fmt: skip
        shown = search.shown or search.failed
        steps = len(shown.steps)
        script = replay_script(shown, seed=seed or 0, why=why)
        raise ConformanceFailure(
            f"{why.rstrip('.')}.\nThe model group found it after {search.examples} programs "
            f"(seed {seed}: replay the search with --checkpointkit-model-seed {seed} or "
            f"{MODEL_SEED_ENV}={seed}). The smallest failing program has {steps} "
            f"step{'s' if steps != 1 else ''}; this script replays it "
            f"(python replay.py SPEC):\n{script}"
        ) from (exc if not isinstance(exc, ConformanceFailure) else None)


async def replay(spec: str | Target, program: Program) -> int:
    """Run ``program`` once against ``spec`` and say whether the model allows what it did.

    Args:
        spec: a SPEC string (a storage URL, ``module:factory``, ``file``, ``memory``) or a target.
        program: the program (as a failure's script gives it).

    Returns:
        0 if every answer fit the model, 1 if one did not (the reason is printed).
    """
    target = resolve_target(spec)
    try:
        async with target.open() as storage:
            capabilities = target.capabilities or storage.capabilities
        try:
            await execute(program, target, capabilities)
        except ConformanceFailure as exc:
            print(f"the adapter did something the model does not allow:\n{exc}")
            return 1
        except (StorageUnavailable, OSError) as exc:
            print(f"the backend failed: {describe(exc)}")
            return 1
        print("every answer fit the model (a race may need several replays)")
        return 0
    finally:
        if isinstance(spec, str) and target.cleanup is not None:
            target.cleanup()
