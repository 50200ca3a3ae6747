"""What the ecosystem groups share: fixtures, holds, the cancellation probe, the crash writer.

The saver (LangGraph) and storage (agent-framework) groups subclass
`EcosystemFixtures`; a user's test class overrides one fixture
(``saver_factory`` or ``checkpoint_storage_factory``), as for storages.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import math
import os
import signal
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import partial
from importlib.metadata import version
from typing import Any, ClassVar, Final

import pytest
import pytest_asyncio

from .. import descriptors
from ..checks import ConformanceFailure
from ..fixtures import _time_limited
from ..hygiene import HygieneError, hygiene
from ..proxy import StallProxy
from ..settings import NOT_EXERCISED
from ..target import new_location
from .coverage import set_held
from .target import EcosystemTarget

__all__ = [
    "LENGTHS_HINT",
    "PAGES_HINT",
    "SIZES_HINT",
    "CancelOutcome",
    "EcosystemFixtures",
    "cancel_a_read_then_read_again",
    "cancel_while_held",
    "counted",
    "crash_writer",
    "held",
    "read_back_wrong",
    "sized_values",
    "threads_running",
]


HYGIENE_HINT = (
    "to fix: await (or cancel and await) every task the saver or storage starts before its "
    "call or close returns, await every coroutine it creates, and close every connection, "
    "file and thread in close/aclose or the context's exit"
)
"""Appended to every hygiene failure of an ecosystem test."""

PAGES_HINT = (
    "follow the backend's continuation (a next-page token, a cursor, LastEvaluatedKey, a "
    "marker) until it gives none: most backends answer a query, a listing or a batch a page "
    "at a time (100 items, 1,000, 1 MB), and a page may hold fewer items than asked for"
)
"""The fix a failure of the ``lengths`` sweeps suggests."""

LENGTHS_HINT = (
    "give the EcosystemTarget a lower max_length (max_length=129 still passes pages of 10, "
    "100 and 101 items)"
)
"""What shortens the ``lengths`` sweeps for a slow backend."""

SIZES_HINT = (
    "store a value whole, or, where the backend limits an item (DynamoDB 400 KB, Cosmos DB "
    "2 MB, many 1 MiB), split it in parts and read every part back in its numeric order "
    "(part 10 after part 9, not after part 1: sort the keys as numbers, or pad them), then "
    "check the length"
)
"""The fix a failure of the ``sizes`` sweeps suggests."""


@functools.cache
def sized_values() -> dict[str, str]:
    """The values of the ``sizes`` matrix (`coverage.SIZES`), by channel or state key: 0
    bytes, 1 KiB, 1 MiB and 4 MiB (past a 1 MiB or 400 KB item, and past ten parts of 256
    KiB). The 4 MiB one is numbered lines (``0000000``, ``0000001``...), any two parts of
    which differ, so that a value read back with its parts out of order is not equal; made
    once, when first asked for."""
    return {
        "empty": "",
        "kib": "k" * 1024,
        "mib": "m" * (1 << 20),
        "mib4": "".join(map("{:07d}\n".format, range((4 << 20) // 8))),
    }


VALUE_SHAPES: Final[dict[str, Any]] = {
    "NaN": math.nan,
    "infinity": math.inf,
    "-infinity": -math.inf,
    "-0.0": -0.0,
    "0.1 (no float32)": 0.1,
    "2**53 + 1 (no float64)": 2**53 + 1,
    "2**70 (past 64 bits)": 2**70,
    "-2**63": -(2**63),
    "NUL in a string": "a\x00b",
    "lone surrogate": "x\ud800y",
    "keys with . and $": {"a.b": 1, "$c": {"d.e": 2}},
    "empty key": {"": 1},
    "bytes": b"\x00\xff",
    "empty containers": {"a": [], "b": {}, "c": ""},
    "aware datetime (+05:30)": datetime(2025, 3, 1, 9, 0, tzinfo=timezone(timedelta(hours=5.5))),
}
"""Values that some backend's encoding changes without a word (a JSON column, a document
store, a 32-bit float): the ecosystem sweeps store each as a state or channel value."""


def threads_running() -> set[threading.Thread]:
    """The threads alive now, daemon or not, but asyncio's default executor's workers
    (idle workers that the event loop keeps, which hold nothing of a storage) and those of
    a server running in this process that serve one request each (a test's moto server:
    they end when the client's connection has closed, on the server's schedule)."""
    return {
        t
        for t in threading.enumerate()
        if t.is_alive() and not t.name.startswith("asyncio_") and not _serves_a_request(t)
    }


def _serves_a_request(thread: threading.Thread) -> bool:
    """Whether ``thread`` runs a ``socketserver`` server's handler of one request."""
    target = getattr(thread, "_target", None)
    return isinstance(getattr(target, "__self__", None), socketserver.BaseServer)


def same_value(got: Any, saved: Any) -> bool:
    """Whether ``got`` is ``saved`` exactly: same types all the way down, NaN for NaN,
    -0.0 for -0.0, an aware datetime at its own UTC offset (equal instants of two offsets
    compare equal) (a dict's keys in any order: nothing in agent-framework or LangGraph
    reads their order)."""
    if type(got) is not type(saved):
        return False
    if isinstance(saved, datetime):
        return bool(got == saved) and got.utcoffset() == saved.utcoffset()
    if isinstance(saved, float):
        if math.isnan(saved):
            return math.isnan(got)
        return got == saved and math.copysign(1.0, got) == math.copysign(1.0, saved)
    if isinstance(saved, dict):
        return set(got) == set(saved) and all(same_value(got[k], saved[k]) for k in saved)
    if isinstance(saved, list | tuple):
        return len(got) == len(saved) and all(map(same_value, got, saved))
    return bool(got == saved)


def read_back_wrong(expected: str, got: Any) -> str | None:
    """How the value ``got`` read back differs from the ``expected`` one put, or None."""
    if got == expected:
        return None
    if not isinstance(got, str):
        return f"{type(got).__name__} {got!r:.40}"
    if len(got) != len(expected):
        return f"{len(got):,} characters"
    at = next(i for i, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b)
    return f"{len(got):,} characters, not in order from character {at:,} on"


def counted(got: list[Any], expected: list[Any]) -> str:
    """How ``got`` differs from ``expected``, in words: how many, missing, repeated, order."""
    missing = len(set(expected) - set(got))
    extra = len(set(got) - set(expected))
    repeated = len(got) - len(set(got))
    parts = [f"{len(got)} of {len(expected)}"]
    parts += [
        f"{k} {what}"
        for k, what in ((missing, "missing"), (extra, "not expected"), (repeated, "repeated"))
        if k
    ]
    if not (missing or extra or repeated) and got != expected:
        parts.append("out of order")
    return ", ".join(parts)


RUNNER_FAILED = "the runner failed, not the storage"
"""How the reason of a scenario that fails on the library's own storage too begins."""


class EcosystemFixtures:
    """Fixtures of the ecosystem groups; a subclass says how to get the target.

    Attributes:
        conformance_group: the group of the tests defined in a mixin class.
        time_limit: seconds after which one test is failed as hung.
    """

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.asyncio]
    conformance_group: ClassVar[str | None] = None
    time_limit: ClassVar[float] = 60.0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        group = cls.__dict__.get("conformance_group")
        for name, value in list(cls.__dict__.items()):
            if (
                name.startswith("test_")
                and inspect.iscoroutinefunction(value)
                and not getattr(value, "__conformance_wrapped__", False)
            ):
                setattr(cls, name, _time_limited(value, group))

    @pytest.fixture
    def eco_target(self) -> EcosystemTarget:
        """The target; the ecosystem's fixture class derives it from its factory fixture."""
        raise NotImplementedError("override saver_factory or checkpoint_storage_factory")

    @pytest.fixture
    def location(self, eco_target: EcosystemTarget) -> str | None:
        """A fresh location for the test, when the target can open one twice."""
        return new_location() if eco_target.reopens else None

    @pytest_asyncio.fixture
    async def instance(
        self, eco_target: EcosystemTarget, location: str | None
    ) -> AsyncIterator[Any]:
        """A fresh instance (saver or storage) for one test; closed after it."""
        async with eco_target.open(location=location) as opened:
            yield opened

    @pytest_asyncio.fixture
    async def second(
        self, eco_target: EcosystemTarget, location: str | None, instance: Any
    ) -> AsyncIterator[Any]:
        """A second instance on the test's data; the first itself when there is no location."""
        if location is None:
            yield instance
            return
        async with eco_target.open(location=location) as opened:
            yield opened

    @pytest.fixture
    def two_instances(self, eco_target: EcosystemTarget) -> bool:
        """Whether ``second`` is a second instance (else the same one)."""
        return eco_target.reopens

    @pytest.fixture
    def settle_window(self, request: pytest.FixtureRequest, eco_target: EcosystemTarget) -> float:
        """Seconds a cancelled call is watched for a late landing."""
        option = request.config.getoption("checkpointkit_settle_window", default=None)
        return float(option) if option is not None else eco_target.settle_window

    @pytest.fixture
    def cancel_bound(self, request: pytest.FixtureRequest, eco_target: EcosystemTarget) -> float:
        """Seconds within which a cancelled call must end."""
        option = request.config.getoption("checkpointkit_cancel_bound", default=None)
        return float(option) if option is not None else eco_target.cancel_bound

    @pytest_asyncio.fixture(autouse=True)
    async def _ecosystem_hygiene(self) -> AsyncIterator[None]:
        """Hygiene around every test (after every instance is closed), descriptors too."""
        counting = descriptors.available()
        before = descriptors.snapshot() if counting else {}
        try:
            async with hygiene():
                yield
        except HygieneError as exc:
            raise HygieneError(f"{exc}\n- {HYGIENE_HINT}") from None
        if counting:
            found = await descriptors.wait_for_no_leak(before, grace=0.5)
            if found:
                raise HygieneError(
                    "hygiene check failed:\n- the test left "
                    + descriptors.describe_leak(found)
                    + " open after every instance was closed"
                    + f"\n- {HYGIENE_HINT}"
                )


# -- holding a backend ----------------------------------------------------------------------
@dataclass
class Held:
    """An instance whose backend is held until `release` (or the context's exit)."""

    instance: Any
    how: str
    _release: Callable[[], Awaitable[None]]

    async def release(self) -> None:
        """Let the backend answer again; the instance stays open (idempotent)."""
        await self._release()


@asynccontextmanager
async def held(target: EcosystemTarget, location: str | None) -> AsyncIterator[Held | None]:
    """An instance on ``location`` whose backend stops answering while this is entered.

    Through the stalling TCP proxy if the factory takes ``endpoint``, else
    through the target's ``hold``; yields None when neither is there.
    """
    if target.proxyable:
        assert target.upstream is not None
        async with StallProxy(target.upstream) as proxy:  # noqa: SIM117 - the open needs its address
            async with target.open(location=location, endpoint=proxy.address) as instance:
                await _warm(instance)
                proxy.stall("both")
                set_held(instance, True)

                async def resume() -> None:
                    set_held(instance, False)
                    proxy.resume()

                try:
                    yield Held(instance, "the stalling TCP proxy", resume)
                finally:
                    set_held(instance, False)
                    proxy.resume()
        return
    if target.hold is not None:
        async with target.open(location=location) as instance, AsyncExitStack() as stack:
            await _warm(instance)
            await stack.enter_async_context(target.hold(location))
            set_held(instance, True)

            async def release() -> None:
                set_held(instance, False)
                await stack.aclose()

            try:
                yield Held(instance, "the target's hold", release)
            finally:
                set_held(instance, False)
        return
    yield None


async def _warm(instance: Any) -> None:
    """One read, so that connections are open before the backend is held."""
    warm = getattr(instance, "aget_tuple", None)
    if warm is not None:
        await warm({"configurable": {"thread_id": "warm-up", "checkpoint_ns": ""}})
        return
    await instance.list_checkpoint_ids(workflow_name="warm-up")


REACH_TIMEOUT = 30.0
"""Seconds a call may take to reach the held backend before the suite gives up on it."""


SWALLOWED: Final = "returned a value after cancel() (its CancelledError caught)"
"""A `CancelOutcome`'s result when the call was still running at ``cancel()`` and returned."""


@dataclass
class CancelOutcome:
    """What a call cancelled while held did."""

    seconds: float
    """From ``cancel()`` to the call's end."""
    ended: bool
    """The call ended within the wait."""
    result: str
    """``cancelled``, ``returned`` (cancellation swallowed) or ``raised X``."""
    task: asyncio.Task[Any]

    def late(self, bound: float) -> bool:
        """Whether the call failed its cancellation: it raised another error, ran on,
        returned although it was still running when cancelled (it caught the
        ``CancelledError``), or raised ``CancelledError`` more than ``bound`` seconds after
        ``cancel()`` (one that had returned before ``cancel()`` was not held)."""
        return (
            self.result.startswith("raised")
            or self.result == "still running"
            or self.result == SWALLOWED
            or (self.result == "cancelled" and self.seconds > bound)
        )


async def cancel_while_held(
    make: Callable[[], Coroutine[Any, Any, Any]],
    *,
    entered: Callable[[], Awaitable[Any]] | None = None,
    wait: float,
) -> CancelOutcome:
    """Start ``make()``, let it reach the held backend, cancel it, time its end.

    Args:
        make: the call.
        entered: awaited before cancelling (default: a short pause, so the
            call has sent its request into the held backend).
        wait: seconds to wait for the call to end after ``cancel()``.
    """
    task = asyncio.ensure_future(make())
    if entered is None:
        await asyncio.sleep(0.05)
    else:
        try:
            await asyncio.wait_for(entered(), REACH_TIMEOUT)
        except TimeoutError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise ConformanceFailure(
                f"the call did not reach the held backend within {REACH_TIMEOUT:g} s "
                "(the suite could not hold it in flight)"
            ) from None
    start = time.monotonic()
    running = not task.done()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=wait)
    seconds = time.monotonic() - start
    if not done:
        return CancelOutcome(seconds, False, "still running", task)
    if task.cancelled():
        result = "cancelled"
    elif task.exception() is not None:
        exc = task.exception()
        result = f"raised {type(exc).__name__}: {exc}"
    else:
        # A task still running when cancel() came gets CancelledError at its next step
        # (also one whose answer had come and not been stepped yet): returning means that
        # the call caught it, and answered the caller as if nothing had been cancelled.
        result = SWALLOWED if running else "returned"
    return CancelOutcome(seconds, True, result, task)


async def cancel_a_read_then_read_again(
    target: EcosystemTarget,
    location: str | None,
    read: Callable[[Any, str, str], Coroutine[Any, Any, Any]],
    write: Callable[[Any, str], Awaitable[str]],
    names: tuple[str, str],
    known: str,
    bound: float,
) -> tuple[CancelOutcome, str, Any]:
    """``read(instance, names[0], known)`` cancelled while the backend is held; once it is
    released, ``write(instance, names[1])`` and ``read`` of what it wrote, on the same
    instance. Returns the cancelled read's outcome, what the write returned and what the
    second read answered."""
    async with held(target, location) as h:
        assert h is not None
        outcome = await cancel_while_held(
            partial(read, h.instance, names[0], known), wait=max(5.0, 10 * bound)
        )
        await h.release()
        await finish(outcome.task)
        written = await write(h.instance, names[1])
        return outcome, written, await read(h.instance, names[1], written)


async def finish(task: asyncio.Task[Any], seconds: float = 30.0) -> None:
    """Let a task that outlived its cancel end (after the hold is gone), whatever it does."""
    if task.done():
        if not task.cancelled():
            task.exception()
        return
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if done:
        if not task.cancelled():
            task.exception()
        return
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def cancel_at_each_step(
    make: Callable[[], Coroutine[Any, Any, Any]],
    *,
    steps: int,
    visible: Callable[[int], Awaitable[bool]] | None = None,
    prepare: Callable[[int], Awaitable[None]] | None = None,
) -> list[tuple[int, str, bool]]:
    """Cancel ``make()`` after 0, 1, 2, ... loop iterations, until it completes first.

    Args:
        make: makes the call of one attempt.
        steps: the most attempts.
        visible: given the attempt's index, whether its write can be seen
            (through a second instance); asked right after each cancelled attempt.
        prepare: given the attempt's index, awaited before it (what the attempt's call
            works on: a thread to delete, say).

    Returns ``(iterations, outcome, seen)`` per attempt, where outcome is
    ``cancelled``, ``completed`` (it ended before the cancel), ``swallowed``
    (cancelled while pending, yet it returned) or ``raised X``, and ``seen``
    whether the write was visible right after the cancel.
    """
    outcomes: list[tuple[int, str, bool]] = []
    for k in range(steps):
        if prepare is not None:
            await prepare(k)
        task = asyncio.ensure_future(make())
        for _ in range(k):
            await asyncio.sleep(0)
        if task.done():
            await asyncio.gather(task, return_exceptions=True)
            outcomes.append((k, "completed", True))
            break
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        seen = True if visible is None else await visible(k)
        if task.cancelled():
            outcomes.append((k, "cancelled", seen))
        elif task.exception() is not None:
            exc = task.exception()
            outcomes.append((k, f"raised {type(exc).__name__}: {exc}", seen))
        else:
            outcomes.append((k, "swallowed", seen))
    return outcomes


async def judge(
    scenario: Callable[[Any, Any], Awaitable[None]],
    target: tuple[Any, Any],
    reference: Callable[[], AbstractAsyncContextManager[tuple[Any, Any]]],
    library: str,
) -> None:
    """Run a runner scenario on the target; when it fails, on the library's own storage too.

    The failure is the runner's (an expected failure) only when the library's own storage
    breaks the same promise: a target that breaks another one (a resume that did nothing
    because the storage lost what the run needs) fails, as a storage that loses data
    must never score better than a correct one.

    Args:
        scenario: called with the instance to run over and a second one to read with.
        target: the target's ``(instance, second)``.
        reference: opens the library's own in-memory ``(instance, second)``.
        library: the library and version, for the reason (``agent-framework-core 1.23.0``).

    Raises:
        ConformanceFailure: the scenario fails on the target only.
    """
    __tracebackhide__ = True
    try:
        await scenario(*target)
    except ConformanceFailure as exc:
        try:
            async with reference() as (ref, ref_reader):
                await scenario(ref, ref_reader)
        except ConformanceFailure as ref_failure:
            if _promise(ref_failure) == _promise(exc):
                pytest.xfail(
                    f"{RUNNER_FAILED}: {library} fails this scenario on its own "
                    f"in-memory storage too ({ref_failure})"
                )
            raise ConformanceFailure(
                f"{exc} ({library}'s own in-memory storage fails this scenario at another "
                f"promise: {_promise(ref_failure)}; the target broke one before it)"
            ) from exc
        raise exc


def _promise(failure: ConformanceFailure) -> str:
    """The promise a failure states (its message up to ``expected``)."""
    return str(failure).split(": expected ", 1)[0]


def no_hold_reason(target: EcosystemTarget) -> str:
    """Why the held-backend tests cannot run on ``target``."""
    return NOT_EXERCISED + (
        f"{target.name} has no way to hold its backend: give the EcosystemTarget a hold "
        "(a context manager that makes the backend stop answering), or a factory taking "
        "endpoint= with upstream= set, for the stalling TCP proxy"
    )


# -- the crash writer --------------------------------------------------------------------------
@asynccontextmanager
async def crash_writer(
    target: EcosystemTarget, location: str, *, acks: int
) -> AsyncIterator[list[str]]:
    """Run a subprocess that writes checkpoints at ``location``; SIGKILL it after ``acks``.

    Yields the ids the subprocess reported as written (each printed after its
    call returned), once it has been killed.

    Raises:
        ConformanceFailure: the subprocess ended or failed before it was killed.
    """
    if target.spec is None:
        raise RuntimeError("the crash writer needs an importable spec")
    cmd = [
        sys.executable,
        "-m",
        "checkpointkit.conformance.ecosystems.crash",
        target.ecosystem,
        target.spec,
        location,
    ]
    path = _import_path(target.spec)
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": path}
    )
    acked: list[str] = []
    try:
        assert proc.stdout is not None
        while len(acked) < acks:
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            if not line:
                err = b"" if proc.stderr is None else await proc.stderr.read()
                raise ConformanceFailure(
                    f"the crash writer (a subprocess writing through {target.spec}) ended before "
                    f"writing {acks} checkpoints: {err.decode(errors='replace')[-800:]}"
                )
            acked.append(line.decode().strip())
        os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()
        yield acked
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def library(distribution: str) -> str:
    """``distribution version`` of an installed distribution."""
    return f"{distribution} {version(distribution)}"


def _import_path(spec: str) -> str:
    """A PYTHONPATH that imports ``spec``'s module as this process did.

    This process's ``sys.path``, and the directory the module was imported
    from (pytest's importlib mode adds none to ``sys.path``).
    """
    roots = [p for p in sys.path if p]
    name = spec.partition(":")[0]
    origin = getattr(sys.modules.get(name), "__file__", None)
    if origin:
        root = os.path.dirname(os.path.abspath(origin))
        for _ in range(name.count(".")):
            root = os.path.dirname(root)
        roots.insert(0, root)
    return os.pathsep.join(roots)


def need(condition: bool, reason: str) -> None:
    """Skip the test with ``reason`` unless ``condition``."""
    if not condition:
        pytest.skip(reason)
