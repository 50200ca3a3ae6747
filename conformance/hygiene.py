"""Hygiene checks: what must never be left behind by a storage or a run.

`hygiene` wraps a block of async code and fails when, inside it:

- a coroutine was never awaited (``RuntimeWarning: coroutine ... was never awaited``);
- a task was destroyed while pending (the loop's exception handler is called);
- an exception was unraisable (``sys.unraisablehook``: errors in ``__del__``,
  in finalizers of async generators, ...);
- a ``ResourceWarning`` was emitted (unclosed file, socket, client session);
- a task created inside the block is still pending at the end, after a
  ``gc.collect()`` and a few loop iterations (a task whose cancellation was
  requested gets ``unwind_grace`` seconds more: a storage that settles a
  cancelled write, or a runner that abandoned a cleanup at its bound, leaves it
  unwinding for its declared grace; one that never ends is still a finding);
- a thread started inside the block is still alive at the end.

Each finding names where the leaked object was created, so that the fix is
obvious: a pending task its ``create_task`` call (a task factory records the
caller's frames while the block runs), a never-awaited coroutine the call that
made it (``sys.set_coroutine_origin_tracking_depth``), and an event-loop error
the creation site asyncio recorded for its future or task when the loop runs in
debug mode (``PYTHONASYNCIODEBUG=1``; the finding says so when it did not).
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import traceback
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any

__all__ = ["HygieneError", "HygieneReport", "frozen_heap", "hygiene"]


class HygieneError(AssertionError):
    """Something was left behind: the message lists every finding."""


@dataclass
class HygieneReport:
    """What `hygiene` found; empty lists mean clean."""

    findings: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.findings)


ORIGIN_DEPTH = 8
"""Frames kept of where a task was created."""

COROUTINE_ORIGIN_DEPTH = 2
"""Frames kept of where each coroutine was created (the call that made it, and its
caller), by the interpreter for every coroutine while a block runs. The cost grows with
the depth: about 0.3 to 0.5 µs a coroutine at 2 against 1.9 µs at 8 (against 0.1 µs
untracked; `benchmarks/hygiene_origins.py`), and an SDK makes dozens of coroutines a
request."""

UNWIND_GRACE = 2.0
"""Seconds a cancelled task still pending at the end of the block may take to end: more
than a storage's grace for settling a cancelled write (PostgreSQL's default is 0.25 s)
under a loaded machine's delays."""

_CREATED_AT: dict[int, list[tuple[CodeType, int]]] = {}
"""Where each task created in a block was: ``(code, line)`` of its creator's frames,
innermost first (`_creator_frames`)."""

_open_blocks = 0
"""Hygiene blocks entered and not yet left. Only the outermost freezes the heap, and it
thaws it only when no `frozen_heap` block is open either: ``gc.unfreeze`` is process-wide,
and an inner block's thaw released the objects the outer one froze, so that the outer
block's collection found (and blamed on its own test) the garbage of tests that ran
before it."""

_frozen_runs = 0
"""`frozen_heap` blocks entered and not yet left."""

_blocks_lock = threading.Lock()
"""Guards the two counts: `run` enters `frozen_heap` in pytest's worker thread while the
caller's loop, and its hygiene blocks, may go on in another."""


def _freeze_for_block() -> None:
    global _open_blocks
    with _blocks_lock:
        if _open_blocks == 0:
            gc.freeze()
        _open_blocks += 1


def _thaw_after_block() -> None:
    global _open_blocks
    with _blocks_lock:
        _open_blocks -= 1
        if _open_blocks == 0 and _frozen_runs == 0:
            gc.unfreeze()


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep the objects that exist now out of every ``gc.collect()`` made inside the block
    (``gc.freeze``), so that a collection there costs what the block allocated, not the
    whole heap. `run` enters it around its in-process pytest session, whose
    unraisable-exception plugin collects garbage as the session ends (a whole-heap
    collection of the caller's process otherwise: 0.2 s and more inside a test session,
    twice per run). A hygiene block inside it freezes the heap at its entry as always
    (what was there before is not its garbage), but leaves it frozen until this block
    ends. Inside an open hygiene block it changes nothing: that block froze the heap."""
    global _frozen_runs
    with _blocks_lock:
        if _open_blocks == 0 and _frozen_runs == 0:
            gc.freeze()
        _frozen_runs += 1
    try:
        yield
    finally:
        with _blocks_lock:
            _frozen_runs -= 1
            if _open_blocks == 0 and _frozen_runs == 0:
                gc.unfreeze()


def _creator_frames() -> list[tuple[CodeType, int]]:
    """``(code, line)`` of up to `ORIGIN_DEPTH` frames of the task factory's caller,
    innermost first, taken without reading any source line, and formatted only when a
    finding names the task. ``traceback.extract_stack`` reads each frame's line: it added
    about 21 µs to a task created and run, this about 3 (`benchmarks/hygiene_origins.py`).
    """
    frame: FrameType | None = sys._getframe(2)  # the factory's caller (after this, the factory)
    frames: list[tuple[CodeType, int]] = []
    while frame is not None and len(frames) < ORIGIN_DEPTH:
        frames.append((frame.f_code, frame.f_lineno))
        frame = frame.f_back
    return frames


def _site(stack: traceback.StackSummary | list[Any] | None) -> str:
    """``created at FILE:LINE in FUNC`` of the innermost frame outside asyncio, or "".

    ``stack``: frames outermost first (a ``_source_traceback``), or `_CREATED_AT`'s
    ``(code, line)`` pairs, innermost first."""
    sites: list[tuple[str, int | None, str]] = []
    for entry in stack or []:
        if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], CodeType):
            sites.append((entry[0].co_filename, entry[1], entry[0].co_name))
        else:
            summary = entry if isinstance(entry, traceback.FrameSummary) else None
            if summary is None:
                summary = traceback.StackSummary.from_list([entry])[0]
            sites.insert(0, (summary.filename, summary.lineno, summary.name))
    for filename, lineno, name in sites:  # innermost first
        if "/asyncio/" not in filename.replace("\\", "/") and filename != __file__:
            return f", created at {filename}:{lineno} in {name}"
    return ""


def _describe_task(task: asyncio.Task[Any]) -> str:
    coro = task.get_coro()
    name = getattr(coro, "__qualname__", repr(coro))
    where = _CREATED_AT.get(id(task)) or getattr(task, "_source_traceback", None)
    return f"task {task.get_name()!r} running {name}{_site(where)}"


def _context_site(context: dict[str, Any]) -> str:
    for key in ("future", "task", "handle"):
        obj = context.get(key)
        stack = getattr(obj, "_source_traceback", None)
        if stack:
            return _site(stack)
        if isinstance(obj, asyncio.Task) and id(obj) in _CREATED_AT:
            return _site(_CREATED_AT[id(obj)])
    if context.get("source_traceback"):
        return _site(context["source_traceback"])
    return " (run with PYTHONASYNCIODEBUG=1 to see where it was created)"


@asynccontextmanager
async def hygiene(
    *,
    settle_rounds: int = 20,
    check: bool = True,
    thread_grace: float = 1.0,
    unwind_grace: float = UNWIND_GRACE,
) -> AsyncIterator[HygieneReport]:
    """Check the enclosed block for leaks; raise `HygieneError` at exit.

    Args:
        settle_rounds: loop iterations to let cleanup callbacks run before judging.
        check: raise at the end when something was found (else only report).
        thread_grace: seconds a thread started inside the block may take to end.
        unwind_grace: seconds a task still pending at the end, whose cancellation was
            requested, may take to end (a task nobody cancelled gets none).

    Raises:
        HygieneError: at exit, listing every finding, if ``check`` is true.
    """
    loop = asyncio.get_running_loop()
    report = HygieneReport()
    before_tasks = set(asyncio.all_tasks())
    before_threads = set(threading.enumerate())
    old_unraisable = sys.unraisablehook
    old_handler = loop.get_exception_handler()

    def unraisable(u: Any) -> None:
        obj = f" in {u.object!r}" if u.object is not None else ""
        report.findings.append(f"unraisable exception{obj}: {u.exc_type.__name__}: {u.exc_value}")

    def handler(_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = context.get("message", "")
        exc = context.get("exception")
        report.findings.append(
            f"event loop error: {message}" + (f" ({exc!r})" if exc else "") + _context_site(context)
        )

    old_factory = loop.get_task_factory()

    def factory(
        the_loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any
    ) -> asyncio.Future[Any]:
        task = (
            old_factory(the_loop, coro, **kwargs)
            if old_factory is not None
            else asyncio.Task(coro, loop=the_loop, **kwargs)
        )
        _CREATED_AT[id(task)] = _creator_frames()
        task.add_done_callback(lambda done: _CREATED_AT.pop(id(done), None))
        return task

    old_depth = sys.get_coroutine_origin_tracking_depth()
    sys.set_coroutine_origin_tracking_depth(max(old_depth, COROUTINE_ORIGIN_DEPTH))
    loop.set_task_factory(factory)

    sys.unraisablehook = unraisable
    loop.set_exception_handler(handler)
    # Objects from before the block are not its garbage: freezing them keeps them out of
    # the collection below, which then costs what the block allocated, not the whole heap.
    _freeze_for_block()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield report
        finally:
            try:
                for _ in range(settle_rounds):
                    await asyncio.sleep(0)
                gc.collect()
                for _ in range(settle_rounds):
                    await asyncio.sleep(0)
                current = asyncio.current_task()
                left = {
                    task
                    for task in asyncio.all_tasks() - before_tasks
                    if task is not current and not task.done()
                }
                unwinding = {task for task in left if task.cancelling()}
                if unwinding:
                    await asyncio.wait(unwinding, timeout=unwind_grace)
                for task in left:
                    if task.done():
                        continue
                    if task in unwinding:
                        report.findings.append(
                            f"pending {_describe_task(task)}, still unwinding "
                            f"{unwind_grace:g} s after its cancellation"
                        )
                    else:
                        report.findings.append(f"pending {_describe_task(task)}")
                for thread in set(threading.enumerate()) - before_threads:
                    # asyncio's default executor keeps idle workers; they write nothing.
                    if thread.name.startswith("asyncio_"):
                        continue
                    if thread.is_alive() and not thread.daemon:
                        # A thread told to stop may need a moment to return: give it one.
                        await asyncio.to_thread(thread.join, thread_grace)
                    if thread.is_alive() and not thread.daemon:
                        report.findings.append(f"thread {thread.name!r} still alive")
            finally:
                _thaw_after_block()
                sys.unraisablehook = old_unraisable
                loop.set_exception_handler(old_handler)
                loop.set_task_factory(old_factory)
                sys.set_coroutine_origin_tracking_depth(old_depth)
    for w in caught:
        if issubclass(w.category, ResourceWarning) or "never awaited" in str(w.message):
            report.findings.append(f"{w.category.__name__}: {w.message}")
    if check and report.findings:
        raise HygieneError("hygiene check failed:\n- " + "\n- ".join(report.findings))
