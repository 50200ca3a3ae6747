"""Group ``linearizability``: random concurrent histories, checked against the protocol's model.

Several clients (storages opened at one location when the target can share
one, else concurrent tasks on one storage) issue random operations on a few
fresh keys: put in all three modes, get, delete with and without
``if_match``; some are cancelled at a random moment, and, where the target
accepts an ``endpoint``, a stall proxy holds one client's traffic for random
spans. Each operation is recorded with its invocation, completion and outcome
(`Operation`), and each
key's history is checked by
`check`.

A cancelled or timed-out write is *unknown*: it may take effect at any moment
after it was invoked, or never. For an adapter that declares
``settles_cancelled_writes`` a cancelled write is settled when
``CancelledError`` reaches the caller: if it took effect, it did so before.

Seeds: one per session, shown in pytest's header
(``checkpointkit linearizability seed: N``) and in every failure. Replay the
same random draws with ``--checkpointkit-seed N`` or the environment variable
``CHECKPOINTKIT_SEED=N``; the interleaving itself depends on timing, so a
replay is likelier, not certain, to fail the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import pytest

from ..errors import ConfigurationError, NotFound, PreconditionFailed, StorageUnavailable
from ..storage import Capabilities, GetResult, IfMatch, PutMode, Storage
from .checks import fail
from .clauses import checks
from .fixtures import StorageFixtures
from .linearizability import InconclusiveError, Operation, check
from .proxy import StallProxy
from .seed import SEED_ENV, SEED_KEY, resolve_seed
from .target import Target, new_location

__all__ = [
    "SEED_ENV",
    "SEED_KEY",
    "HistoryPlan",
    "HistoryRecorder",
    "LinearizabilityTests",
    "record_history",
    "resolve_seed",
    "run_to_the_end",
]

T = TypeVar("T")


@dataclass(frozen=True)
class HistoryPlan:
    """The size and mix of one random history.

    Attributes:
        clients: concurrent clients.
        keys: keys the clients share.
        ops_per_client: operations each client issues.
        cancel_rate: chance that an operation is cancelled at a random moment.
        conditional_put: use ``create`` and ``IfMatch`` puts.
        conditional_delete: use ``delete(if_match=...)``.
        final_read_after: once every client is done, each key is read, and
            read again after these seconds (to see a write that lands late; the
            verdict never depends on this timing, only the chance to see one).
    """

    clients: int = 3
    keys: int = 3
    ops_per_client: int = 16
    cancel_rate: float = 0.15
    conditional_put: bool = True
    conditional_delete: bool = True
    final_read_after: float = 0.05


@dataclass(frozen=True)
class _Call:
    kind: str
    mode: str = "overwrite"
    data: bytes | None = None
    expected: str | None = None


_CANCEL_POINTS: tuple[int | float, ...] = (0, 1, 2, 3, 5, 8, 13, 0.0005, 0.001, 0.002, 0.004)
"""When a cancelled operation is cancelled: ints are event-loop iterations, floats seconds."""


class HistoryRecorder:
    """Performs operations and records each as an `Operation`.

    Args:
        settles: the adapter settles cancelled writes (their completion is the
            moment ``CancelledError`` was delivered, not "never").
        clock: the monotonic clock of the history.
    """

    def __init__(self, *, settles: bool, clock: Callable[[], float] = time.monotonic) -> None:
        self.settles = settles
        self.clock = clock
        self.operations: list[Operation] = []

    async def perform(
        self,
        client: str,
        storage: Storage,
        key: str,
        call: _Call,
        cancel_at: int | float | None = None,
    ) -> Operation | None:
        """Run ``call`` on ``storage`` (cancelled at ``cancel_at``), record and return it.

        A get that was cancelled or lost its answer is not recorded (it
        constrains nothing) and gives None.
        """
        coro: Awaitable[Any]
        if call.kind == "put":
            assert call.data is not None
            mode: PutMode = (
                IfMatch(call.expected)
                if call.expected is not None
                else ("create" if call.mode == "create" else "overwrite")
            )
            coro = storage.put(key, call.data, mode=mode)
        elif call.kind == "get":
            coro = storage.get(key)
        else:
            coro = storage.delete(key, if_match=call.expected)
        invoked = self.clock()
        task = await run_to_the_end(coro, cancel_at)
        completed = self.clock()
        op = self._record(client, key, call, invoked, completed, task)
        if op is not None:
            self.operations.append(op)
        return op

    def _record(
        self,
        client: str,
        key: str,
        call: _Call,
        invoked: float,
        completed: float,
        task: asyncio.Future[Any],
    ) -> Operation | None:
        base: dict[str, Any] = {
            "key": key,
            "kind": call.kind,
            "invoked": invoked,
            "client": client,
            "expected": call.expected,
        }
        if call.kind == "put":
            base["mode"] = call.mode
            base["data"] = call.data
        what = _call_words(key, call)
        if task.cancelled():
            if call.kind == "get":
                return None
            return Operation(
                **base,
                completed=completed if self.settles else None,
                outcome="unknown",
                note="cancelled",
            )
        exc = task.exception()
        if exc is None:
            result = task.result()
            if call.kind == "put":
                if not isinstance(result, str):
                    fail(
                        "put must return the new version (a str)",
                        key=key,
                        expected="a version string",
                        observed=f"{what} returned {result!r}",
                    )
                return Operation(**base, completed=completed, version=result)
            if call.kind == "get":
                if not isinstance(result, GetResult | tuple) or len(result) != 2:
                    fail(
                        "get must return data and version",
                        key=key,
                        expected="a GetResult",
                        observed=f"get returned {result!r}",
                    )
                data, version = result
                return Operation(**{**base, "data": bytes(data)}, completed=completed,
                                 version=version)  # fmt: skip
            if not isinstance(result, bool):
                fail(
                    "delete must return whether the key existed (a bool)",
                    key=key,
                    expected="True or False",
                    observed=f"{what} returned {result!r}",
                )
            return Operation(**base, completed=completed, existed=result)
        if isinstance(exc, PreconditionFailed):
            if call.expected is None and call.mode != "create":
                fail(
                    "only a conditional write may raise PreconditionFailed",
                    key=key,
                    expected="an unconditional write to succeed",
                    observed=f"{what} raised PreconditionFailed: {exc}",
                )
            return Operation(
                **base, completed=completed, outcome="failed", error="PreconditionFailed"
            )
        if isinstance(exc, NotFound):
            if call.kind != "get":
                fail(
                    "only get raises NotFound",
                    key=key,
                    expected="a missing key to be reported by the return value or "
                    "PreconditionFailed",
                    observed=f"{what} raised NotFound: {exc}",
                )
            return Operation(**base, completed=completed, outcome="failed", error="NotFound")
        if isinstance(exc, StorageUnavailable | TimeoutError):
            if call.kind == "get":
                return None
            return Operation(**base, completed=None, outcome="unknown", note=type(exc).__name__)
        raise exc


def _call_words(key: str, call: _Call) -> str:
    if call.kind == "put":
        mode = f"IfMatch({call.expected!r})" if call.expected is not None else repr(call.mode)
        return f"put({key!r}, {call.data!r}, mode={mode})"
    if call.kind == "get":
        return f"get({key!r})"
    return f"delete({key!r}, if_match={call.expected!r})"


async def run_to_the_end(
    coro: Awaitable[T], cancel_at: int | float | None = None
) -> asyncio.Future[T]:
    """Run ``coro`` as a task until it is done, cancelled at ``cancel_at`` if given
    (event-loop iterations for an int, seconds for a float); the task, done, to read its
    outcome from. If the caller is cancelled, the task is too: nothing is left running."""
    task = asyncio.ensure_future(coro)
    try:
        if cancel_at is not None:
            await _wait_point(cancel_at, task)
            task.cancel()
        await asyncio.wait({task})
    finally:
        if not task.done():  # the test itself was cancelled: leave nothing running
            task.cancel()
    return task


async def _wait_point(point: int | float, task: asyncio.Future[Any]) -> None:
    """Wait until ``point`` (event-loop iterations for an int, seconds for a float) has
    passed since ``task`` started, or until it is done: where a drawn cancellation falls."""
    if isinstance(point, int):
        for _ in range(point):
            if task.done():
                return
            await asyncio.sleep(0)
    else:
        await asyncio.wait({task}, timeout=point)


def _choose(d: list[float], plan: HistoryPlan, value: bytes, versions: list[str]) -> _Call:
    """One call from the draws ``d`` (uniform in [0, 1)) and the key's versions seen so far.

    Every operation uses the same number of draws, so that a seed replays the
    same draws whatever the interleaving (which versions were seen may differ).
    """
    if d[0] < 0.3:
        return _Call("get")
    if d[0] < 0.8:
        modes = ["overwrite"]
        if plan.conditional_put:
            modes += ["create"] + (["if-match", "if-match"] if versions else [])
        mode = modes[int(d[1] * len(modes))]
        expected = _pick_version(d, versions) if mode == "if-match" else None
        return _Call("put", mode, value, expected)
    expected = None
    if plan.conditional_delete and versions and d[1] < 0.6:
        expected = _pick_version(d, versions)
    return _Call("delete", expected=expected)


def _pick_version(d: list[float], versions: list[str]) -> str:
    """The newest version seen (70 %) or any version seen (a stale one, often)."""
    return versions[-1] if d[2] < 0.7 else versions[int(d[3] * len(versions))]


async def record_history(
    clients: list[Storage],
    plan: HistoryPlan,
    rng: random.Random,
    keys: list[str],
    *,
    settles: bool,
    tag: str = "",
    cancel_rates: list[float] | None = None,
) -> list[Operation]:
    """Run ``plan`` with one task per client (``clients[i % len(clients)]``); the history.

    Args:
        clients: the storages; client ``i`` uses ``clients[i % len(clients)]``.
        plan: how many clients, operations and keys, and which operations.
        rng: the source of every random choice.
        keys: the keys to use (fresh ones: each history starts with them absent).
        settles: the adapter settles cancelled writes.
        tag: a prefix of the written values (distinct values per key).
        cancel_rates: per client, overriding ``plan.cancel_rate``.
    """
    recorder = HistoryRecorder(settles=settles)
    seen: dict[str, list[str]] = {k: [] for k in keys}
    # Each client draws from its own generator, so that a seed replays the same choices
    # whatever the interleaving.
    streams = [random.Random(rng.getrandbits(64)) for _ in range(plan.clients)]

    async def client(i: int) -> None:
        r = streams[i]
        name = f"c{i}"
        storage = clients[i % len(clients)]
        rate = plan.cancel_rate if cancel_rates is None else cancel_rates[i]
        for j in range(plan.ops_per_client):
            d = [r.random() for _ in range(8)]
            key = keys[int(d[4] * len(keys))]
            call = _choose(d, plan, f"{tag}{name}.{j}".encode(), seen[key])
            cancel_at = _CANCEL_POINTS[int(d[6] * len(_CANCEL_POINTS))] if d[5] < rate else None
            op = await recorder.perform(name, storage, key, call, cancel_at)
            if op is not None and op.outcome == "ok" and op.version is not None:
                seen[key].append(op.version)
            if op is not None and op.outcome == "unknown":
                # Read back at once, as a caller would: a write that lands after this
                # read shows up as a change that nothing explains.
                back = await recorder.perform(name, storage, key, _Call("get"))
                if back is not None and back.outcome == "ok" and back.version is not None:
                    seen[key].append(back.version)
            if d[7] < 0.3:
                await asyncio.sleep(0)

    await asyncio.gather(*(client(i) for i in range(plan.clients)))
    # One get of each key at once, and one a moment later: a write landing in between
    # (after it was cancelled, say) shows as a change with no write to explain it.
    for key in keys:
        await recorder.perform("end", clients[-1], key, _Call("get"))
    await asyncio.sleep(plan.final_read_after)
    for key in keys:
        await recorder.perform("end", clients[-1], key, _Call("get"))
    return recorder.operations


class LinearizabilityTests(StorageFixtures):
    """Random concurrent histories are linearizable against the storage protocol's model."""

    conformance_group: ClassVar[str | None] = "linearizability"
    history_rounds: ClassVar[int] = 4
    """Histories per test at scale 1 (each on fresh keys); at least 2 at any scale."""

    @pytest.fixture
    def linearizability_seed(self, request: pytest.FixtureRequest) -> int:
        """The seed of this test's histories (``--checkpointkit-seed``, ``$CHECKPOINTKIT_SEED``)."""
        seed = request.config.stash.get(SEED_KEY, None)
        if seed is None:  # the plugin is not loaded
            try:
                seed = resolve_seed()
            except ConfigurationError as exc:
                pytest.fail(str(exc), pytrace=False)
            request.config.stash[SEED_KEY] = seed
        return seed

    @checks("put.atomic", "put.conditional.one-winner", "version.never-repeats")
    async def test_concurrent_history_is_linearizable(
        self,
        storage: Storage,
        storage_target: Target | None,
        capabilities: Capabilities,
        linearizability_seed: int,
    ) -> None:
        async with _clients(storage, storage_target, capabilities) as (clients, how):
            await _run_rounds(
                self, clients, capabilities, storage_target, linearizability_seed,
                test="plain", how=how,
            )  # fmt: skip

    @checks("put.atomic", "put.conditional.one-winner", "cancel.whole-or-absent")
    async def test_history_with_stalled_backend_is_linearizable(
        self,
        storage: Storage,
        storage_target: Target | None,
        capabilities: Capabilities,
        linearizability_seed: int,
    ) -> None:
        if storage_target is None or not storage_target.proxyable:
            pytest.skip(
                "the target does not accept an endpoint (no stall proxy): give its factory an "
                "'endpoint' keyword and set Target.upstream"
            )
        assert storage_target.upstream is not None
        async with (
            StallProxy(storage_target.upstream) as proxy,
            _clients(storage, storage_target, capabilities, endpoint=proxy.address) as (
                clients,
                how,
            ),
        ):
            await _run_rounds(
                self, clients, capabilities, storage_target, linearizability_seed,
                test="stalled", how=how, proxy=proxy,
            )  # fmt: skip


@contextlib.asynccontextmanager
async def _clients(
    storage: Storage,
    target: Target | None,
    capabilities: Capabilities,
    *,
    endpoint: tuple[str, int] | None = None,
) -> AsyncIterator[tuple[list[Storage], str]]:
    """The clients of a history: storages sharing one location, or ``storage`` alone.

    With ``endpoint``, the first client goes through it (the stall proxy).
    """
    plan = HistoryPlan()
    async with contextlib.AsyncExitStack() as stack:
        if target is not None and target.reopens and capabilities.shared:
            location = new_location()
            clients = []
            for i in range(plan.clients):
                via = endpoint if i == 0 else None
                clients.append(
                    await stack.enter_async_context(target.open(location=location, endpoint=via))
                )
            how = f"{plan.clients} clients sharing one location"
        elif endpoint is not None:
            assert target is not None
            clients = [await stack.enter_async_context(target.open(endpoint=endpoint))]
            how = f"{plan.clients} concurrent tasks on one storage, through the stall proxy"
        else:
            clients = [storage]
            how = f"{plan.clients} concurrent tasks on one storage"
        try:
            yield clients, how
        finally:
            with contextlib.suppress(Exception):
                await _delete_everything(clients[-1])


async def _delete_everything(storage: Storage) -> None:
    keys = [key async for key in storage.list("lin/")]
    for key in keys:
        await storage.delete(key)


async def _stall_now_and_then(proxy: StallProxy, rng: random.Random, done: asyncio.Event) -> None:
    """Stall the proxy for random spans (5 to 30 ms), between gaps of 0 to 10 ms, until ``done``."""
    while not done.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), rng.uniform(0, 0.01))
        if done.is_set():
            break
        proxy.stall(rng.choice(["request", "response", "both"]), partial=rng.random() < 0.5)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), rng.uniform(0.005, 0.03))
        proxy.resume()
    proxy.resume()


async def _run_rounds(
    tests: LinearizabilityTests,
    clients: list[Storage],
    capabilities: Capabilities,
    target: Target | None,
    seed: int,
    *,
    test: str,
    how: str,
    proxy: StallProxy | None = None,
) -> None:
    scale = 1.0 if target is None else target.scale
    rounds = max(2, round(tests.history_rounds * scale))
    plan = HistoryPlan(
        conditional_put=capabilities.conditional_put,
        conditional_delete=capabilities.conditional_delete,
    )
    settles = capabilities.settles_cancelled_writes
    rates = None
    if proxy is not None:  # the proxied client (c0) is cancelled more often, mid-stall
        rates = [0.3] + [plan.cancel_rate] * (plan.clients - 1)
    for r in range(rounds):
        rng = random.Random(f"{seed}:{test}:{r}")
        keys = [f"lin/{test}{r}/k{k}" for k in range(plan.keys)]
        done = asyncio.Event()
        staller = None
        if proxy is not None:
            staller = asyncio.ensure_future(
                _stall_now_and_then(proxy, random.Random(rng.getrandbits(64)), done)
            )
        try:
            history = await record_history(
                clients, plan, rng, keys, settles=settles, tag=f"{r}.", cancel_rates=rates
            )
        finally:
            done.set()
            if staller is not None:
                await staller
        try:
            result = check(history)
        except InconclusiveError as exc:
            fail(
                "the linearizability check must decide",
                expected="the history to be small enough to check",
                observed=f"{exc} (seed {seed}, round {r + 1})",
            )
        if not result.ok:
            model = (
                "a cancelled write may take effect only before CancelledError reached the "
                "caller (the adapter declares settles_cancelled_writes)"
                if settles
                else "a cancelled write may take effect at any moment after it was issued, or never"
            )
            fail(
                "every history of concurrent operations must be linearizable",
                expected="each key's operations to fit one order consistent with their "
                f"times, as on one atomic register ({model})",
                observed=f"history {r + 1} of {rounds} ({how}, {len(history)} operations) "
                f"is not (seed {seed}: replay with --checkpointkit-seed {seed} or "
                f"{SEED_ENV}={seed})",
                detail=result.describe(),
            )
