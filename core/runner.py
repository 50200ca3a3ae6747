"""The runner: workflows of checkpointed steps, with the lifecycle guarantees G1 to G9.

A workflow is a plain async function that calls steps (functions decorated
with `step`) in sequence or in parallel (``asyncio.gather``,
``asyncio.TaskGroup`` or `parallel`). `Workflow` runs it,
saves one write-once record per completed step, and resumes it: completed
steps return their stored results without executing again.

The guarantees, each kept where it is marked ``# Gn`` below:

- G1 snapshot at completion: a step's result and staged state are encoded to
  bytes synchronously when the step completes; the save then runs as a task
  that the runner tracks.
- G2 deterministic replay: a step's identity is its name plus a per-name call
  index, assigned at call time in program order, with an argument fingerprint
  checked on replay (`NondeterminismError`).
- G3 sibling-failure preservation: when a step fails (or pauses), still-running
  sibling steps are cancelled, but every completed step's save finishes.
- G4 caller-cancel promptness: when the caller cancels, in-flight saves are
  cancelled too and the run ends within ``cancel_timeout`` (plus 0.1 s at
  most), whatever the storage does, also if cancelled again during teardown,
  in ``run``, ``resume`` and ``stream`` alike. Cleanup writes (releasing the
  lease) share that bound; one that does not finish in time is abandoned,
  indeterminate, and harmless (a compare-and-swap on this worker's own epoch).
- G5 hygiene: no never-awaited coroutine, no pending task, on every path.
- G6 pause for input: `StepContext.request_input` pauses the run with a
  checkpoint of the pending requests; resume with responses continues.
- G7 run isolation: state is per run and staged per step; a late call on an
  ended step's or run's state raises `StateClosed`, never touching
  another run.
- G8 one owner per run: runs are driven under the store's lease.
- G9 save failures are loud: a failed save fails the run with
  `CheckpointSaveError` unless ``on_save_error="warn"``.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hashlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, ParamSpec, TypeVar, overload

from . import observe
from .codec import Codec
from .errors import (
    CheckpointSaveError,
    EncodeError,
    LeaseLost,
    NondeterminismError,
    NotFound,
    PreconditionFailed,
    RunBusy,
    RunExists,
    StateClosed,
)
from .events import (
    CheckpointSaved,
    Event,
    InputRequested,
    RunCompleted,
    RunFailed,
    RunPaused,
    RunStarted,
    SaveFailed,
    StepCompleted,
    StepReplayed,
    StepStarted,
)
from .storage import Storage
from .store import Checkpoint, CheckpointStore, InputRequest, Lease, StepRecord

if TYPE_CHECKING:  # the otel extra; imported only when a run is observed
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

__all__ = [
    "RunResult",
    "StepContext",
    "StepFunction",
    "StepState",
    "Workflow",
    "context",
    "parallel",
    "step",
]

log = logging.getLogger("checkpointkit.runner")

P = ParamSpec("P")
R = TypeVar("R")
In = TypeVar("In")
Out = TypeVar("Out")

_current_run: contextvars.ContextVar[_Run | None] = contextvars.ContextVar(
    "checkpointkit_run", default=None
)
_current_step: contextvars.ContextVar[StepContext | None] = contextvars.ContextVar(
    "checkpointkit_step", default=None
)

_MISSING: Any = object()


class _PauseRequested(BaseException):
    """Unwinds a step that asked for input. A BaseException, so ``except Exception`` keeps out."""


_UNWIND = 0.03
"""Seconds given to a task cancelled at the end of a bound to unwind before it is abandoned."""

_abandoned: set[asyncio.Task[Any]] = set()
"""Tasks that outlived their bound (a storage ignoring cancellation): kept referenced
until they end, and their outcome retrieved, so none is destroyed pending or leaves an
exception unretrieved."""


def _reap(task: asyncio.Task[Any]) -> None:
    _abandoned.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.debug("abandoned task %s ended with %r", task.get_name(), task.exception())


def _abandon(task: asyncio.Task[Any]) -> None:
    task.cancel()
    _abandoned.add(task)
    task.add_done_callback(_reap)


def _retrieve(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Mark the outcome of every finished task as retrieved (G5)."""
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()


async def _within(tasks: set[asyncio.Task[Any]], deadline: float, *, cancel: bool = True) -> bool:
    """Wait for ``tasks`` until ``deadline`` (loop time), also through new cancellations.

    Returns True if the caller was cancelled meanwhile (the caller re-raises).
    Tasks still pending at the deadline are cancelled, given a moment to
    unwind, then abandoned (kept referenced, their outcome retrieved).
    """
    loop = asyncio.get_running_loop()
    cancelled = False
    pending = {t for t in tasks if not t.done()}
    if cancel:
        for task in pending:
            task.cancel()
    while pending:
        left = deadline - loop.time()
        if left <= 0:
            break
        try:
            _, pending = await asyncio.wait(pending, timeout=left)
        except asyncio.CancelledError:
            cancelled = True  # keep the bound: cancel them (again) and go on waiting
            for task in pending:
                task.cancel()
    if pending:
        for task in pending:
            task.cancel()
        try:
            _, pending = await asyncio.wait(pending, timeout=_UNWIND)
        except asyncio.CancelledError:
            cancelled = True
        stuck = [task for task in pending if not task.done()]
        if stuck:
            log.warning("%d task(s) ignored cancellation past their bound; abandoned", len(stuck))
        for task in stuck:
            _abandon(task)
    _retrieve(tasks)
    return cancelled


async def _cleanup(coro: Coroutine[Any, Any, Any], deadline: float, what: str) -> None:
    """Run a cleanup write until ``deadline`` at most; never raises but CancelledError.

    A cancellation during it does not cut it short (the bound does); it is
    re-raised once the cleanup has ended or been abandoned.
    """
    task = asyncio.get_running_loop().create_task(coro)
    cancelled = await _within({task}, deadline, cancel=False)
    if not task.done():
        log.warning("%s did not finish in time; it may still land (harmlessly)", what)
    elif not task.cancelled() and task.exception() is not None:
        log.warning("%s failed: %r", what, task.exception())
    if cancelled:
        raise asyncio.CancelledError


# -- state ------------------------------------------------------------------------------
class StepState:
    """The state as one step sees it: the run's committed state plus this step's writes.

    Writes are staged here and committed with the step's record when the step
    completes (G7); a failed or cancelled step's writes are discarded. Once the
    step has ended, every change raises `StateClosed`.
    """

    __slots__ = ("_cleared", "_closed", "_deletes", "_run", "_step", "_writes")

    def __init__(self, run: _Run, step: str) -> None:
        self._run = run
        self._step = step
        self._writes: dict[str, Any] = {}
        self._deletes: set[str] = set()
        self._cleared = False
        self._closed = False

    def _check(self, action: str) -> None:
        if self._closed:
            raise StateClosed(
                f"cannot {action}: step {self._step!r} of run {self._run.run_id!r} has ended; "
                "its state is closed"
            )

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key`` as this step sees it, or ``default``."""
        if key in self._writes:
            return self._writes[key]
        if self._cleared or key in self._deletes:
            return default
        return self._run.committed.get(key, default)

    def __getitem__(self, key: str) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key, _MISSING) is not _MISSING

    def set(self, key: str, value: Any) -> None:
        """Stage ``key = value``; committed when the step completes."""
        self._check(f"set {key!r}")
        if not isinstance(key, str):
            raise TypeError(f"state keys are str, not {type(key).__name__}")
        self._writes[key] = value
        self._deletes.discard(key)

    def delete(self, key: str) -> None:
        """Stage the deletion of ``key``."""
        self._check(f"delete {key!r}")
        self._writes.pop(key, None)
        self._deletes.add(key)

    def clear(self) -> None:
        """Stage the removal of every key."""
        self._check("clear the state")
        self._writes.clear()
        self._deletes.clear()
        self._cleared = True

    def import_state(self, values: Mapping[str, Any]) -> None:
        """Stage a replacement of the whole state by ``values``."""
        self._check("import state")
        self.clear()
        for key, value in values.items():
            self.set(key, value)

    def export(self) -> dict[str, Any]:
        """A dict of the state as this step sees it."""
        base = {} if self._cleared else dict(self._run.committed)
        for key in self._deletes:
            base.pop(key, None)
        base.update(self._writes)
        return base

    def _commit(self) -> None:
        """Apply the staged writes to the run (runner only). Late calls do nothing."""
        if self._closed:
            return
        self._closed = True
        self._run.apply(self._writes, self._deletes, self._cleared)

    def _discard(self) -> None:
        """Drop the staged writes (runner only). Late calls do nothing."""
        self._closed = True
        self._writes = {}
        self._deletes = set()


class StepContext:
    """What a running step knows: its run, its identity, its state and input requests."""

    __slots__ = ("_counters", "_requests", "_run", "_state", "step")

    def __init__(self, run: _Run, step: str) -> None:
        self._run = run
        self.step = step
        self._state: StepState | None = None
        self._requests = 0
        self._counters: dict[str, int] | None = None  # call indexes of nested steps

    @property
    def run_id(self) -> str:
        """The id of the run this step belongs to."""
        return self._run.run_id

    @property
    def state(self) -> StepState:
        """The run's state as this step sees it (writes staged until the step completes)."""
        if self._state is None:
            self._state = StepState(self._run, self.step)
        return self._state

    async def request_input(self, payload: Any = None) -> Any:
        """Ask for input: pause the run, or return the response given on resume (G6).

        The first time, the run saves a checkpoint holding the request and ends
        as paused; ``Workflow.resume(run_id, responses={request_id: value})``
        re-runs the step and this call returns ``value``.
        """
        request_id = f"{self.step}:{self._requests}"
        self._requests += 1
        run = self._run
        if request_id in run.responses:
            return run.responses[request_id]
        request = InputRequest(request_id, self.step, payload)
        run.pending.append(request)
        run.emit(InputRequested(run.run_id, request))
        raise _PauseRequested(request_id)


def context() -> StepContext:
    """The context of the step that is running now.

    Raises:
        RuntimeError: called outside a step.
    """
    ctx = _current_step.get()
    if ctx is None:
        raise RuntimeError("checkpointkit.context() was called outside a running step")
    return ctx


# -- steps ---------------------------------------------------------------------------------
class StepFunction(Generic[P, R]):
    """A checkpointed step; calling it inside a run returns an awaitable of its result."""

    def __init__(self, fn: Callable[P, Awaitable[R]], name: str) -> None:
        if "@" in name or ":" in name:
            raise ValueError(f"step name {name!r} must not contain '@' or ':'")
        self.fn = fn
        self.name = name
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<step {self.name}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R]:
        run = _current_run.get()
        if run is None:  # outside a workflow: a plain call, nothing stored
            return _plain(self.fn, args, kwargs)
        # G2: the identity is assigned now, at call time, in program order. A step
        # called inside another step is numbered within its parent, so replaying the
        # parent (which skips its body) cannot shift the numbers of later calls.
        parent = _current_step.get()
        if parent is not None and parent._run is run:
            if parent._counters is None:
                parent._counters = {}
            counters, prefix = parent._counters, f"{parent.step}/"
        else:
            counters, prefix = run.counters, ""
        index = counters.get(self.name, 0)
        counters[self.name] = index + 1
        return run.execute(self, f"{prefix}{self.name}@{index}", args, kwargs)


async def _plain(fn: Callable[..., Awaitable[R]], args: Any, kwargs: Any) -> R:
    return await fn(*args, **kwargs)


@overload
def step(fn: Callable[P, Awaitable[R]], /) -> StepFunction[P, R]: ...
@overload
def step(
    *, name: str | None = None
) -> Callable[[Callable[P, Awaitable[R]]], StepFunction[P, R]]: ...
def step(
    fn: Callable[P, Awaitable[R]] | None = None, /, *, name: str | None = None
) -> StepFunction[P, R] | Callable[[Callable[P, Awaitable[R]]], StepFunction[P, R]]:
    """Make an async function a checkpointed step: ``@step`` or ``@step(name="fetch")``.

    The name (default: the function's qualified name) is part of the step's
    identity in stored runs: keep it stable across deployments.
    """

    def wrap(f: Callable[P, Awaitable[R]]) -> StepFunction[P, R]:
        if not asyncio.iscoroutinefunction(f):
            raise TypeError(f"@step needs an async function, not {f!r}")
        return StepFunction(f, name or f.__qualname__)

    return wrap(fn) if fn is not None else wrap


async def parallel(*awaitables: Awaitable[Any]) -> list[Any]:
    """Run step calls concurrently; if one fails, cancel the rest and raise its error.

    Behaves like ``asyncio.TaskGroup`` but raises the first error itself rather
    than an exception group.
    """
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# -- results ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RunResult(Generic[Out]):
    """How a run ended, when it did not raise.

    Generic in the workflow function's return type: ``Workflow[In, Out].run``
    returns a ``RunResult[Out]``, whose ``output`` is ``Out | None`` (None
    while paused; narrow it with ``status == "completed"`` or a check).

    Attributes:
        run_id: the run.
        status: ``"completed"``, or ``"paused"`` waiting for ``pending`` input.
        output: the workflow function's return value when completed.
        pending: the input requests to answer with ``Workflow.resume``.
        executed: steps that executed in this call, in completion order.
        replayed: steps whose stored result was returned without executing.
        save_errors: saves that failed under ``on_save_error="warn"``.
    """

    run_id: str
    status: Literal["completed", "paused"]
    output: Out | None = None
    pending: tuple[InputRequest, ...] = ()
    executed: tuple[str, ...] = ()
    replayed: tuple[str, ...] = ()
    save_errors: tuple[BaseException, ...] = ()


# -- one run -----------------------------------------------------------------------------
class _Run:
    """Everything of one run; nothing of it lives on the Workflow object (G7)."""

    def __init__(
        self,
        wf: Workflow[Any, Any],
        run_id: str,
        lease: Lease,
        records: dict[str, StepRecord],
        responses: dict[str, Any],
        sink: Callable[[Event], None] | None,
    ) -> None:
        self.wf = wf
        self.store = wf.store
        self.run_id = run_id
        self.lease = lease
        self.records = records
        self.responses = responses
        self.sink = sink
        self.closed = False
        self.committed: dict[str, Any] = {}
        for record in sorted(records.values(), key=lambda r: r.seq):
            self.apply(record.writes, set(record.deletes), record.cleared)
        self.seq = max((r.seq for r in records.values()), default=0)
        self.counters: dict[str, int] = {}
        self.running: dict[str, asyncio.Task[Any]] = {}
        self.saves: dict[asyncio.Task[None], None] = {}  # in start order
        self.pending: list[InputRequest] = []
        self.executed: list[str] = []
        self.replayed: list[str] = []
        self.save_errors: list[BaseException] = []
        self.fatal: BaseException | None = None
        self.main: asyncio.Task[Any] | None = None
        self.heartbeat: asyncio.Task[None] | None = None
        self.obs = wf._observer if wf._observer is not None else observe.current()
        self.span: Any = None  # the run's span, when observed

    def emit(self, event: Event) -> None:
        if self.sink is not None:
            self.sink(event)

    def apply(self, writes: Mapping[str, Any], deletes: Iterable[str], cleared: bool) -> None:
        if self.closed:
            raise StateClosed(f"run {self.run_id!r} has ended; its state is closed")
        if cleared:
            self.committed.clear()
        for key in deletes:
            self.committed.pop(key, None)
        self.committed.update(writes)

    # -- a step call -------------------------------------------------------------------
    async def execute(
        self, fn: StepFunction[Any, Any], key: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if self.closed:
            raise StateClosed(f"run {self.run_id!r} has ended; step {key!r} cannot run in it")
        fingerprint = self.wf._fingerprint(args, kwargs)
        record = self.records.get(key)
        if record is not None:  # G2: replay, never execute again
            if record.fingerprint != fingerprint:
                raise NondeterminismError(
                    f"step {key!r} of run {self.run_id!r} was called with other arguments "
                    "than in the recorded run; the workflow must call its steps "
                    "deterministically (same order, same arguments)"
                )
            self.replayed.append(key)
            if self.sink is not None:  # no event object made for nobody
                self.sink(StepReplayed(self.run_id, key))
            return record.result
        task = asyncio.current_task()
        assert task is not None
        self.running[key] = task
        ctx = StepContext(self, key)
        token = _current_step.set(ctx)
        if self.sink is not None:  # no event object made for nobody
            self.sink(StepStarted(self.run_id, key))
        obs = self.obs
        traced = obs.start_step(self.span, self.run_id, key) if obs is not None else None
        try:
            result = await fn.fn(*args, **kwargs)
        except BaseException as exc:
            if ctx._state is not None:
                ctx._state._discard()  # G7: a failed or cancelled step's writes are dropped
            if obs is not None and traced is not None:
                obs.end_step(*traced, exc)
            raise
        finally:
            _current_step.reset(token)
            del self.running[key]
        if obs is not None and traced is not None:
            obs.end_step(*traced, None)
        state = ctx._state
        if self.closed:  # an orphan step (in a task the run never awaited) outlived its run
            if state is not None:
                state._discard()
            raise StateClosed(
                f"run {self.run_id!r} ended before step {key!r} completed; its result is not saved"
            )
        # G1: the snapshot is taken now, synchronously, before anything else can run.
        self.seq += 1
        record = StepRecord(
            key,
            result,
            state._writes if state is not None else {},
            tuple(state._deletes) if state is not None else (),
            state._cleared if state is not None else False,
            fingerprint,
            self.seq,
            self.lease.epoch,
        )
        try:
            data = self.store.encode_step(record, run_id=self.run_id)
        except BaseException:
            if state is not None:
                state._discard()
            raise
        if state is not None:
            state._commit()
        self.executed.append(key)
        self._schedule_save(key, data)
        if self.sink is not None:  # no event object made for nobody
            self.sink(StepCompleted(self.run_id, key))
        if len(self.saves) >= self.wf.max_inflight_saves:  # back-pressure on a slow storage
            await asyncio.wait({next(iter(self.saves))})  # the oldest; never cancels it
        return result

    def _schedule_save(self, key: str, data: bytes) -> None:
        # G1/G5: the coroutine is created and handed to a task in one expression, so a
        # cancellation can never leave a save coroutine that was never awaited.
        task = asyncio.get_running_loop().create_task(self._save(key, data))
        self.saves[task] = None
        task.add_done_callback(self._save_done)

    async def _save(self, key: str, data: bytes) -> None:
        try:
            # A record of the same step stored by an earlier owner (steps run at least
            # once) is adopted by the store: that is success, not a conflict.
            save = self.store.save_step(self.run_id, key, data, lease=self.lease)
            if self.obs is None:
                await save
            else:
                await self.obs.save_step(self.span, self.run_id, key, len(data), save)
        except PreconditionFailed as exc:
            raise NondeterminismError(
                f"step {key!r} of run {self.run_id!r} was recorded by another worker "
                "with other arguments"
            ) from exc
        if self.sink is not None:  # no event object made for nobody
            self.sink(CheckpointSaved(self.run_id, key))

    def _save_done(self, task: asyncio.Task[None]) -> None:
        self.saves.pop(task, None)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        self.save_errors.append(exc)
        if self.wf.on_save_error == "warn" and not isinstance(exc, LeaseLost):
            log.warning("checkpoint save failed in run %r: %r", self.run_id, exc)
            self.emit(SaveFailed(self.run_id, str(exc), exc))
            return
        # G9: loud by default: fail the run. Cancelling main is a framework cancellation;
        # the other saves are left to finish (G3).
        self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        if self.fatal is None:
            self.fatal = exc
            if self.main is not None and not self.main.done():
                self.main.cancel()

    async def _heartbeat(self) -> None:
        interval = self.lease.ttl / 3
        while True:
            await asyncio.sleep(interval)
            try:
                self.lease = await self.store.renew(self.lease)
            except Exception as exc:  # LeaseLost or the storage failing
                self._fail(exc)
                return

    # -- the whole run -----------------------------------------------------------------
    async def drive(
        self, fn: Callable[[Any], Awaitable[Any]], input: Any, resumed: bool
    ) -> RunResult[Any]:
        loop = asyncio.get_running_loop()
        ctx = contextvars.copy_context()
        ctx.run(_current_run.set, self)
        self.emit(RunStarted(self.run_id, resumed))
        log.info("run %r %s", self.run_id, "resumed" if resumed else "started")
        if self.obs is not None:
            self.span = self.obs.start_run(self.run_id, resumed, type(self.store.storage).__name__)
            ctx.run(self.obs.activate, self.span)
        self.main = main = loop.create_task(_call(fn, input), context=ctx)
        self.heartbeat = heartbeat = loop.create_task(self._heartbeat())
        outcome: str | None = None
        error: BaseException | None = None
        try:
            try:
                await asyncio.wait({main})
            except asyncio.CancelledError:
                # G4: the caller cancelled: cancel everything, saves included, and go.
                await self._teardown()
                raise
            # G3: the workflow ended. Cancel steps still running (siblings of a
            # failure, or orphans), but let every completed step's save finish.
            await self._settle(list(self.running.values()), cancel=True)
            await self._settle(list(self.saves), cancel=False)
            await self._settle([heartbeat], cancel=True)
            result = await self._conclude(main)
            outcome = result.status
            return result
        except BaseException as exc:
            error = exc
            raise
        finally:
            self.closed = True
            if not heartbeat.done():
                heartbeat.cancel()
            self._ended(outcome, error)

    def _ended(self, outcome: str | None, error: BaseException | None) -> None:
        """Log the run's end (INFO; an error by type only) and end its span."""
        if error is not None:
            outcome = "cancelled" if isinstance(error, asyncio.CancelledError) else "failed"
            log.info("run %r %s (%s)", self.run_id, outcome, type(error).__qualname__)
        else:
            log.info("run %r %s", self.run_id, outcome)
        if self.obs is not None and self.span is not None:
            self.obs.end(self.span, outcome, error)

    async def _settle(self, tasks: list[asyncio.Task[Any]], *, cancel: bool) -> None:
        """Wait for ``tasks`` (cancelling them first if asked); on caller cancel, tear down."""
        if cancel:
            for task in tasks:
                task.cancel()
        pending = {t for t in tasks if not t.done()}
        while pending:
            try:
                _, pending = await asyncio.wait(pending)
            except asyncio.CancelledError:
                # G4: cancelled while settling: cancel the rest too, saves included.
                await self._teardown()
                raise
            if not cancel:
                pending |= {t for t in self.saves if not t.done()}

    async def _teardown(self) -> None:
        """Cancel every task of the run and release the lease, within ``cancel_timeout`` (G4).

        A second cancellation during the wait cancels the tasks again and keeps
        waiting within the same bound. Tasks that outlive it (a storage ignoring
        cancellation) are abandoned, kept referenced until they end. Every
        finished task's outcome is retrieved, the workflow's own error included
        (G5): the caller's cancellation is what propagates.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wf.cancel_timeout
        tasks: set[asyncio.Task[Any]] = {*self.running.values(), *self.saves}
        tasks |= {t for t in (self.main, self.heartbeat) if t is not None}
        await _within(tasks, deadline)
        await self._release(deadline)

    async def _release(self, deadline: float | None = None) -> None:
        """Give the lease back, best effort and bounded: else it expires after its ttl.

        Bounded by ``deadline`` (loop time; default ``cancel_timeout`` from now),
        even if the storage is slow to unwind; an abandoned release may land
        later, harmlessly (it can only release this lease's own epoch).
        """
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + self.wf.cancel_timeout
        await _cleanup(
            self.store.release(self.lease), deadline, f"run {self.run_id!r}: releasing its lease"
        )

    async def _conclude(self, main: asyncio.Task[Any]) -> RunResult[Any]:
        failure: BaseException | None
        if main.cancelled():
            failure = asyncio.CancelledError()
            try:
                main.result()
            except asyncio.CancelledError as exc:
                failure = exc
        else:
            failure = main.exception()
        try:
            if self.fatal is not None:  # G9 (or a lost lease): the run is not resumable otherwise
                if isinstance(self.fatal, LeaseLost):
                    raise self.fatal
                raise CheckpointSaveError(
                    f"run {self.run_id!r} failed: a checkpoint could not be saved: {self.fatal}"
                ) from self.fatal
            if failure is not None and self.pending and _only_pauses(failure):
                return await self._pause()
            if failure is not None:
                _note_completed(failure, self.run_id, self._completed())
                await self._checkpoint("failed", error=f"{type(failure).__name__}: {failure}")
                self.emit(RunFailed(self.run_id, failure))
                raise failure
            output = main.result()
            await self._checkpoint("completed", output=output)
            self.emit(RunCompleted(self.run_id, output))
            return RunResult(
                self.run_id,
                "completed",
                output=output,
                executed=tuple(self.executed),
                replayed=tuple(self.replayed),
                save_errors=tuple(self.save_errors),
            )
        finally:
            await self._release()

    def _completed(self) -> list[str]:
        """Steps completed in the run so far, in completion order (stored ones first)."""
        stored = sorted(self.records.values(), key=lambda r: (r.seq, r.step))
        return [r.step for r in stored] + [k for k in self.executed if k not in self.records]

    async def _pause(self) -> RunResult[Any]:
        pending = tuple(self.pending)
        await self._checkpoint("paused", pending=pending)  # G6
        self.emit(RunPaused(self.run_id, pending))
        return RunResult(
            self.run_id,
            "paused",
            pending=pending,
            executed=tuple(self.executed),
            replayed=tuple(self.replayed),
            save_errors=tuple(self.save_errors),
        )

    async def _checkpoint(
        self,
        status: str,
        *,
        pending: tuple[InputRequest, ...] = (),
        output: Any = None,
        error: str | None = None,
    ) -> None:
        try:
            save = self.store.save_checkpoint(
                self.run_id,
                status=status,
                state=self.committed,
                pending=pending,
                output=output,
                error=error,
                steps=self.seq,
                lease=self.lease,
            )
            if self.obs is not None:
                save = self.obs.save_checkpoint(self.span, self.run_id, status, save)
            checkpoint, lease = await save
        except EncodeError:
            raise
        except Exception as exc:
            if status == "failed":  # the run fails anyway; keep its own error
                log.warning("run %r: could not save the failure checkpoint: %r", self.run_id, exc)
                return
            if isinstance(exc, RunBusy):  # one error for "another owner took the run"
                raise
            if self.wf.on_save_error == "warn":
                self.save_errors.append(exc)
                self.emit(SaveFailed(self.run_id, str(exc), exc))
                return
            raise CheckpointSaveError(
                f"run {self.run_id!r}: the {status} checkpoint could not be saved: {exc}"
            ) from exc
        assert lease is not None
        self.lease = lease
        self.emit(CheckpointSaved(self.run_id, f"checkpoint {checkpoint.checkpoint_id}"))


async def _call(fn: Callable[[Any], Awaitable[Any]], input: Any) -> Any:
    return await fn(input)


_NOTE_STEPS = 20
"""Completed steps named, at most, in the note added to a failed run's error."""


def _note_completed(exc: BaseException, run_id: str, steps: list[str]) -> None:
    """Add a note (PEP 678) to a failed run's error: the run and its completed steps."""
    shown = ", ".join(steps[:_NOTE_STEPS]) or "none"
    if len(steps) > _NOTE_STEPS:
        shown += f", ... ({len(steps) - _NOTE_STEPS} more)"
    exc.add_note(
        f"checkpointkit: run {run_id!r} failed after {len(steps)} completed step(s), "
        f"which resume replays: {shown}"
    )


def _only_pauses(exc: BaseException) -> bool:
    """True if ``exc`` is a pause, or a group of pauses and cancellations only."""
    if isinstance(exc, _PauseRequested):
        return True
    if isinstance(exc, BaseExceptionGroup):
        leaves = exc.exceptions
        return any(isinstance(e, _PauseRequested) for e in leaves) and all(
            _only_pauses(e) or isinstance(e, asyncio.CancelledError) for e in leaves
        )
    return False


# -- the workflow ----------------------------------------------------------------------------
class Workflow(Generic[In, Out]):
    """A workflow function bound to a checkpoint store.

    Generic in the function's input and output types, inferred from ``fn``:
    ``Workflow(main, ...)`` with ``async def main(x: int) -> str`` is a
    ``Workflow[int, str]``, whose ``run`` takes an ``int`` and returns a
    ``RunResult[str]``.

    Args:
        fn: ``async def main(input) -> output`` calling steps.
        storage: a `Storage` or a `CheckpointStore`.
        codec: the codec for step results and state (default codec if None).
        namespace: key prefix inside the storage.
        on_save_error: ``"raise"`` (default; G9) fails the run with
            `CheckpointSaveError` when a save fails; ``"warn"`` keeps
            running, emits a `SaveFailed` event and lists the error in
            `RunResult.save_errors` (the run may then not resume fully).
        lease_ttl: seconds a run's lease lasts; renewed every third of it.
        cancel_timeout: the bound, in seconds, on teardown after a caller's
            cancellation (G4).
        max_inflight_saves: saves running at once before a completed step
            waits for one to finish.
        tracer_provider: an OpenTelemetry ``TracerProvider``: this workflow's
            runs emit spans and metrics (see `checkpointkit.observe`);
            None follows `checkpointkit.observe.enable`. Needs the
            ``otel`` extra.
        meter_provider: an OpenTelemetry ``MeterProvider`` for this workflow's
            metrics; None uses the global one when ``tracer_provider`` is given.
    """

    def __init__(
        self,
        fn: Callable[[In], Awaitable[Out]],
        *,
        storage: Storage | CheckpointStore,
        codec: Codec | None = None,
        namespace: str = "",
        on_save_error: Literal["raise", "warn"] = "raise",
        lease_ttl: float = 30.0,
        cancel_timeout: float = 0.5,
        max_inflight_saves: int = 256,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        if on_save_error not in ("raise", "warn"):
            raise ValueError(f"on_save_error must be 'raise' or 'warn', not {on_save_error!r}")
        if lease_ttl <= 0 or cancel_timeout <= 0 or max_inflight_saves < 1:
            raise ValueError(
                "lease_ttl and cancel_timeout must be positive, max_inflight_saves at least 1"
            )
        self.fn = fn
        if isinstance(storage, CheckpointStore):
            self.store = storage
        else:
            self.store = CheckpointStore(storage, codec=codec, namespace=namespace)
        self.on_save_error = on_save_error
        self.lease_ttl = lease_ttl
        self.cancel_timeout = cancel_timeout
        self.max_inflight_saves = max_inflight_saves
        self._observer = (
            observe.Observer(tracer_provider, meter_provider)
            if tracer_provider is not None or meter_provider is not None
            else None
        )

    def __repr__(self) -> str:
        return f"Workflow({getattr(self.fn, '__qualname__', self.fn)!r}, {self.store!r})"

    def _fingerprint(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        if not args and not kwargs:
            return ""
        try:
            payload = self.store.codec.encode_arguments(args, kwargs)
        except EncodeError:
            # Arguments that cannot be encoded (clients, say) are fingerprinted by type.
            names = [type(a).__qualname__ for a in args]
            names += [f"{k}={type(v).__qualname__}" for k, v in sorted(kwargs.items())]
            payload = repr(names).encode()
        return hashlib.blake2b(payload, digest_size=8).hexdigest()

    async def run(
        self,
        input: In = None,  # type: ignore[assignment]  # a workflow taking None may omit it
        *,
        run_id: str | None = None,
    ) -> RunResult[Out]:
        """Start a new run and drive it to completion or pause.

        Raises:
            RunExists: a run with ``run_id`` exists already (use `resume`).
            CheckpointSaveError: a save failed (G9).
            RunBusy: another worker owns the run.
            Exception: whatever the workflow or a step raised.
        """
        return await self._guarded(self._start(input, run_id, None))

    async def resume(
        self,
        run_id: str,
        responses: Mapping[str, Any] | None = None,
        *,
        wait: float = 0.0,
    ) -> RunResult[Out]:
        """Continue a stored run; completed steps are replayed, not executed (G2).

        Args:
            run_id: the run to continue.
            responses: answers to pending input requests, by request id (G6).
            wait: seconds to wait for another worker's lease to expire (a worker
                killed mid-run holds it until its ttl runs out); 0 fails at once.
                Pair it with `CheckpointStore.abandoned_runs` to take over
                the runs of dead workers.

        Raises:
            NotFound: no such run.
            ValueError: a response names no pending request.
            RunBusy: another worker owns the run (G8), also after ``wait``;
                `LeaseLost` if it took the run over during this call.
        """
        if not isinstance(wait, int | float) or wait < 0:
            raise ValueError(f"wait must be a non-negative number of seconds, not {wait!r}")
        return await self._guarded(self._resume(run_id, responses, None, wait=float(wait)))

    async def _guarded(self, coro: Coroutine[Any, Any, RunResult[Any]]) -> RunResult[Out]:
        """Run ``coro`` in a task of its own, so that a caller's cancel is bounded (G4).

        The run tears itself down within ``cancel_timeout``; should the storage
        hold it longer (an operation that does not honour cancellation, awaited
        before the run's own tasks exist, say), the caller still gets its
        ``CancelledError`` at the bound, and the task is abandoned: kept
        referenced until it ends, its outcome retrieved.
        """
        loop = asyncio.get_running_loop()
        task = loop.create_task(coro)
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            await _within({task}, loop.time() + self.cancel_timeout + 0.05)
            raise
        return task.result()

    def stream(
        self,
        input: In = None,  # type: ignore[assignment]  # as in run
        *,
        run_id: str | None = None,
        resume: bool = False,
        responses: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[Event]:
        """Run (or with ``resume=True``, resume) and yield typed events as they happen.

        The stream ends after `RunCompleted`, `RunPaused` or
        `RunFailed`. Leaving the loop early cancels the run; its
        cleanup can only ever touch its own run (G7).
        """
        if resume and run_id is None:
            raise ValueError("stream(resume=True) needs the run_id to resume")
        return self._stream(input, run_id, resume, responses)

    async def _stream(
        self,
        input: Any,
        run_id: str | None,
        resume: bool,
        responses: Mapping[str, Any] | None,
    ) -> AsyncIterator[Event]:
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        if resume:
            assert run_id is not None
            coro = self._resume(run_id, responses, queue.put_nowait)
        else:
            coro = self._start(input, run_id, queue.put_nowait)
        task = asyncio.get_running_loop().create_task(coro)
        task.add_done_callback(lambda _t: queue.put_nowait(None))
        terminal = False
        try:
            while True:
                event = await queue.get()
                if event is None:
                    break
                yield event
                if isinstance(event, RunCompleted | RunPaused | RunFailed):
                    terminal = True
                    break
            # The run is ending on its own: let it finish (it releases its lease).
            await asyncio.wait({task})
            if task.done() and not task.cancelled() and task.exception() is not None:
                exc = task.exception()
                assert exc is not None
                if not terminal:  # failed before the run began (RunBusy, a bad run id...)
                    yield RunFailed(run_id or "", exc)
        finally:
            # G4: the run tears down within cancel_timeout; the stream waits that long
            # (plus its margin), also through a new cancellation, then re-raises it.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.cancel_timeout + 0.05
            cancelled = await _within({task}, deadline) if not task.done() else False
            _retrieve([task])  # retrieved: the stream reported it as RunFailed
            if cancelled:
                raise asyncio.CancelledError

    async def _start(
        self, input: Any, run_id: str | None, sink: Callable[[Event], None] | None
    ) -> RunResult[Any]:
        run_id = run_id if run_id is not None else uuid.uuid4().hex
        if not await self.store.create_run(run_id, input):
            raise RunExists(run_id)
        # G8. A run completed already (by a creator that stalled past the creation bound
        # and was taken over) is never driven again from no records.
        lease = await self.store.acquire_unless_completed(run_id, ttl=self.lease_ttl)
        if lease is None:
            raise RunExists(run_id)
        run = _Run(self, run_id, lease, {}, {}, sink)
        return await run.drive(self.fn, input, resumed=False)

    async def _resume(
        self,
        run_id: str,
        responses: Mapping[str, Any] | None,
        sink: Callable[[Event], None] | None,
        *,
        wait: float = 0.0,
    ) -> RunResult[Any]:
        if not await self.store.run_exists(run_id):
            pending = await self.store.creation_pending(run_id)
            if pending is not None:
                raise RunBusy(
                    f"run {run_id!r} is being created by another caller", retry_after=pending
                )
            raise NotFound(
                f"run {run_id!r} not found (if its creation was interrupted, run() it again "
                "with its input)"
            )
        await self.store.ensure_listed(run_id)  # repairs a create interrupted before its index
        latest: Checkpoint | None = await self.store.latest(run_id)
        if latest is not None and latest.status == "completed" and not responses:
            return self._completed(latest, sink)
        if responses:
            known = {r.id for r in latest.pending} if latest is not None else set()
            unknown = sorted(set(responses) - known)
            if unknown:
                raise ValueError(
                    f"run {run_id!r} has no pending input request {unknown[0]!r}; "
                    f"pending: {sorted(known) or 'none'}"
                )
        lease = await self._acquire(run_id, wait)  # G8
        if lease is None:  # the head says completed: another worker completed it meanwhile
            latest = await self.store.latest(run_id)
            if latest is not None and latest.status == "completed":
                if responses:
                    raise ValueError(
                        f"run {run_id!r} completed meanwhile; it has no pending input request"
                    )
                return self._completed(latest, sink)
            # ... but its completed checkpoint never landed (its writer died between moving
            # the head and writing it): drive the run again to write it; every step replays.
            lease = await self._acquire(run_id, wait, unless_completed=False)
            assert lease is not None
        try:
            for request_id, value in (responses or {}).items():
                await self.store.save_response(run_id, request_id, value)
            stored = await self.store.load_responses(run_id)
            records = await self.store.load_steps(run_id)
            input = await self.store.load_input(run_id)
        except BaseException:
            # G4: bounded, also when cancelled again; the lease expires after its ttl
            # if the release cannot be done in time.
            deadline = asyncio.get_running_loop().time() + self.cancel_timeout
            await _cleanup(
                self.store.release(lease), deadline, f"run {run_id!r}: releasing its lease"
            )
            raise
        run = _Run(self, run_id, lease, records, stored, sink)
        return await run.drive(self.fn, input, resumed=True)

    @staticmethod
    def _completed(latest: Checkpoint, sink: Callable[[Event], None] | None) -> RunResult[Any]:
        if sink is not None:
            sink(RunCompleted(latest.run_id, latest.output))
        return RunResult(latest.run_id, "completed", output=latest.output)

    async def _acquire(
        self, run_id: str, wait: float, *, unless_completed: bool = True
    ) -> Lease | None:
        """Take the run's lease, waiting up to ``wait`` seconds for a holder's to expire.

        Returns None if the run has completed (checked in the same compare-and-swap
        that takes it, so a run completed by another worker meanwhile is never
        driven again).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            try:
                if not unless_completed:
                    return await self.store.acquire(run_id, ttl=self.lease_ttl)
                return await self.store.acquire_unless_completed(run_id, ttl=self.lease_ttl)
            except RunBusy as exc:
                left = deadline - loop.time()
                if left <= 0:
                    raise
                # The holder's lease expires after retry_after; check again then.
                await asyncio.sleep(min(left, max(exc.retry_after or 0.0, 0.0) + 0.01))
