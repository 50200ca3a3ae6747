"""The fixture layer of the suite: what a backend provides, what the tests consult.

A backend joins the suite by overriding one fixture::

    class MyStoreFixtures(StorageFixtures):
        @pytest.fixture
        def storage_factory(self):
            return Target(my_factory, upstream=("127.0.0.1", port))  # or just my_factory

and then declaring empty test classes (``class TestSemantics(MyStoreFixtures,
SemanticsTests): pass``). Overriding ``storage`` directly (an async fixture
yielding one storage) also works; the tests that need a second storage from
the factory (reopening, a second client, the stalling proxy) are then skipped
with that reason.

Capabilities are fixtures that tests consult (``supports_conditional_put``...),
read from the storage's declared `Capabilities`
unless the target overrides them. Hygiene
(`hygiene`) is checked around every
test by an autouse fixture.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, ClassVar, NoReturn

import pytest

try:
    import pytest_asyncio
except ModuleNotFoundError as _exc:  # pragma: no cover - exercised without the extra
    raise ModuleNotFoundError(
        f"the conformance suite's test classes need pytest-asyncio ({_exc}); "
        'install it with: pip install "checkpointkit[conformance]"',
        name=_exc.name,
    ) from _exc

from ..storage import Capabilities, Storage, StorageBase
from . import descriptors
from .checks import ConformanceFailure
from .coverage import CoverageProbe
from .faults import FaultyStorage
from .groups import GROUPS, group_of
from .holds import Hold, ProxyHold, default_hold
from .hygiene import HygieneError, hygiene
from .outages import Outage, default_outage
from .settings import DEFAULT_CANCEL_BOUND, DEFAULT_SETTLE_WINDOW, NOT_EXERCISED
from .settle import SettleWatch
from .styles import StorageWrapper
from .target import Factory, PrefixedStorage, Target, new_location
from .timing import TimedStorage, pending

__all__ = [
    "DEFAULT_CANCEL_BOUND",
    "GROUPS",
    "StorageFixtures",
    "group_of",
    "not_exercised",
    "raw_key",
    "raw_storage",
    "slow",
]


_WRAPPERS = (TimedStorage, CoverageProbe, PrefixedStorage, FaultyStorage, StorageWrapper)


def raw_storage(storage: Any) -> Any:
    """The adapter's own storage object under the suite's wrappers."""
    while isinstance(storage, _WRAPPERS):
        storage = storage.inner
    return storage


def not_exercised(why: str) -> NoReturn:
    """End the test as *not exercised*: a skip whose reason the report lists as such.

    Args:
        why: what kept the test from exercising what it checks, and how to change that.
    """
    __tracebackhide__ = True
    pytest.skip(NOT_EXERCISED + why)


def proxied_target(target: Target | None, nothing: str) -> Target:
    """``target``, if the stall proxy can stand in front of its server; else skip the test,
    saying what cannot be done (``nothing``: "no reply can be lost", say)."""
    __tracebackhide__ = True
    if target is None or not target.proxyable:
        pytest.skip(
            f"{nothing}: the target's factory takes no endpoint, or the target names no "
            "upstream server"
        )
    return target


def need_two_clients(target: Target, supports_shared: bool) -> None:
    """Skip unless the adapter declares ``shared`` and the target can open a second client
    on the same data (its factory takes ``location``)."""
    __tracebackhide__ = True
    if not supports_shared:
        pytest.skip("the adapter does not declare the shared capability")
    if not target.reopens:
        pytest.skip(
            "the factory takes no 'location' keyword, so the suite cannot open a second "
            "client on the same data"
        )


def unmeasured(storage: Any) -> Any:
    """``storage`` without the suite's timing and coverage wrappers (for timing tests)."""
    while isinstance(storage, (TimedStorage, CoverageProbe)):
        storage = storage.inner
    return storage


def raw_key(storage: Any, key: str) -> str:
    """``key`` as the adapter's own object under the suite's wrappers sees it (prefixed)."""
    while isinstance(storage, _WRAPPERS):
        if isinstance(storage, PrefixedStorage):
            key = storage.prefix + key
        storage = storage.inner
    return key


def _replay(model_seed: int) -> str:
    """How to replay a model-group test's programs, for its failure messages."""
    return f"its programs replay with --checkpointkit-model-seed {model_seed}"


TestFn = Callable[..., Coroutine[Any, Any, None]]


def slow(seconds: float, hint: str) -> Callable[[TestFn], TestFn]:
    """Give a test that sends much more than the others a time limit of ``seconds`` (or the
    class's ``time_limit``, if larger), and a ``hint`` for its failure when it runs out:
    what lowers its volume for a slow backend."""

    def mark(fn: TestFn) -> TestFn:
        fn.__conformance_slow__ = (seconds, hint)  # type: ignore[attr-defined]
        return fn

    return mark


HUNG_STOP = 3
"""Tests in a row of one target that ran into their time limit, after which its remaining
tests are not run: calls that no longer return (a lock or connection that a cancelled call
kept, a server-side lock) would make every later test wait out its limit, for hours."""

_RUNNING: list[Target | None] = [None]
"""The target of the test running now (set by the autouse fixture, read by the time limit)."""
_HUNG: dict[str, list[str]] = {}
"""Per target name: the tests in a row that ran into their time limit."""


def _time_limited(fn: TestFn, group: str | None) -> TestFn:
    seconds, hint = getattr(fn, "__conformance_slow__", (0.0, ""))

    @functools.wraps(fn)
    async def test(self: Any, *args: Any, **kwargs: Any) -> None:
        __tracebackhide__ = True
        # The storage target of this test; an ecosystem test has none here (its class's
        # time_limit holds), whatever storage target ran before it in the process.
        target = _RUNNING[0] if isinstance(self, StorageFixtures) else None
        own = None if target is None else target.time_limit
        limit = max(self.time_limit if own is None else own, seconds)
        scope = asyncio.timeout(limit)
        began = asyncio.get_running_loop().time()
        try:
            async with scope:
                await fn(self, *args, **kwargs)
        except TimeoutError as exc:
            if not scope.expired():
                raise
            seed = kwargs.get("model_seed")
            replay = "" if seed is None else f"; {_replay(seed)}"
            waiting = pending(began, scope.when() or 0.0)
            calls = f"; the calls that had not returned: {'; '.join(waiting)}" if waiting else ""
            raise ConformanceFailure(
                f"{fn.__name__} did not finish within the suite's time limit of {limit:g} s: "
                "a storage operation never returned, or a listing never ended (a stalled "
                f"backend, a lost reply, a page cursor that does not move?){calls}{replay}"
                + (f"; or the backend is slow for it: {hint}" if hint else "")
            ) from exc
        finally:
            if target is not None:  # the tests in a row that ran into their limit
                if scope.expired():
                    _HUNG.setdefault(target.name, []).append(fn.__name__)
                else:
                    _HUNG.pop(target.name, None)

    test.__conformance_group__ = group  # type: ignore[attr-defined]
    test.__conformance_wrapped__ = True  # type: ignore[attr-defined]
    return test


class StorageFixtures:
    """Fixtures for the conformance tests; override ``storage_factory``.

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

    # -- what a backend overrides -------------------------------------------------------
    @pytest.fixture
    def storage_factory(self) -> Target | Factory:
        """The factory of fresh storages (or a `Target`); override this.

        Raises:
            NotImplementedError: until a backend's fixture class overrides it.
        """
        raise NotImplementedError(
            "override the storage_factory fixture (return a factory or a Target) "
            "or the storage fixture in your subclass of StorageFixtures"
        )

    # -- derived ----------------------------------------------------------------------------
    @pytest.fixture
    def storage_target(self, request: pytest.FixtureRequest) -> Target | None:
        """The normalized target, or None if only ``storage`` was overridden."""
        try:
            obj = request.getfixturevalue("storage_factory")
        except NotImplementedError:
            return None
        return Target.of(obj)

    @pytest.fixture
    def storage_location(self, storage_target: Target | None) -> str | None:
        """The location of the test's storage, when the target can open one twice."""
        if storage_target is None or not storage_target.reopens:
            return None
        return new_location()

    @pytest_asyncio.fixture
    async def storage(
        self, storage_target: Target | None, storage_location: str | None
    ) -> AsyncIterator[Storage]:
        """A fresh, isolated storage for one test, timed; closed after the test.

        Raises:
            NotImplementedError: neither this nor ``storage_factory`` was overridden.
        """
        if storage_target is None:
            raise NotImplementedError(
                "override the storage_factory fixture (or the storage fixture) "
                "in your subclass of StorageFixtures"
            )
        async with storage_target.open(location=storage_location) as opened:
            yield TimedStorage(opened)

    @pytest_asyncio.fixture
    async def observer(
        self,
        storage: Storage,
        storage_target: Target | None,
        storage_location: str | None,
        capabilities: Capabilities,
    ) -> AsyncIterator[Storage]:
        """A second client of the test's data, to see what a write left behind.

        For a shared backend whose factory accepts ``location``, a second
        storage opened at the test storage's location: its reads are not
        queued behind the first client's writes (a single worker thread, a
        connection lock). Otherwise the test's storage itself.
        """
        if storage_target is None or storage_location is None or not capabilities.shared:
            yield storage
            return
        async with storage_target.open(location=storage_location) as second:
            yield second

    @pytest.fixture
    def settle_window(self, request: pytest.FixtureRequest, storage_target: Target | None) -> float:
        """Seconds a cancelled or failed write is watched for a late landing.

        ``--checkpointkit-settle-window`` overrides ``Target.settle_window``.
        """
        option = request.config.getoption("checkpointkit_settle_window", default=None)
        if option is not None:
            return float(option)
        return DEFAULT_SETTLE_WINDOW if storage_target is None else storage_target.settle_window

    @pytest.fixture
    def cancel_bound(self, request: pytest.FixtureRequest, storage_target: Target | None) -> float:
        """Seconds within which a cancelled operation must raise ``CancelledError``.

        ``--checkpointkit-cancel-bound`` overrides ``Target.cancel_bound``.
        """
        option = request.config.getoption("checkpointkit_cancel_bound", default=None)
        if option is not None:
            return float(option)
        return DEFAULT_CANCEL_BOUND if storage_target is None else storage_target.cancel_bound

    @pytest.fixture
    def settle(
        self,
        request: pytest.FixtureRequest,
        storage: Storage,
        observer: Storage,
        settle_window: float,
        capabilities: Capabilities,
        scale: float,
    ) -> SettleWatch:
        """A `SettleWatch` reading through ``observer``."""
        return SettleWatch(
            observer,
            window=settle_window,
            settles=capabilities.settles_cancelled_writes,
            node=request.node,
            second_client=observer is not storage,
            interval=max(0.01, 0.02 / scale),
        )

    @pytest.fixture
    def backend_stall(self, storage: Storage) -> Hold:
        """The hold of this backend when the target supplies none (the earlier way in).

        ``Target(hold=...)`` is the way to supply one; a test class may
        instead override this fixture (a SQLite-like adapter returns a
        `HeldLock` that opens a write
        transaction from another connection). The default is chosen by what
        the adapter is (`default_hold`).
        """
        return default_hold(raw_storage(storage))

    @pytest.fixture
    def backend_hold(self, request: pytest.FixtureRequest, storage_target: Target | None) -> Hold:
        """What makes the backend stop answering in the held-backend tests, one copy per test.

        The target's `hold`;
        else the ``backend_stall`` fixture, if the test class overrides it;
        else the stall proxy for a target that can be proxied; else
        ``backend_stall``'s default (`holds`).
        """
        if storage_target is not None and storage_target.hold is not None:
            return copy.copy(storage_target.hold)
        owner = next(c for c in type(self).__mro__ if "backend_stall" in c.__dict__)
        overridden = owner is not StorageFixtures
        if not overridden and storage_target is not None and storage_target.proxyable:
            return ProxyHold()
        hold: Hold = request.getfixturevalue("backend_stall")
        return copy.copy(hold)

    @pytest.fixture
    def backend_outage(self, storage: Storage, storage_target: Target | None) -> Outage | None:
        """What takes the backend down in the backend-down tests, one copy per test.

        The target's (`Target.outage_for`: its `outage`,
        else the stall proxy's, else a built-in adapter's); without a target,
        a built-in adapter's (`default_outage`). A test class may override it.
        """
        if storage_target is not None:
            outage = storage_target.outage_for(storage)
        else:
            outage = default_outage(raw_storage(storage))
        return None if outage is None else copy.copy(outage)

    @pytest.fixture
    def target(self, storage_target: Target | None) -> Target:
        """The target, for tests that open more storages; skips when there is none."""
        if storage_target is None:
            pytest.skip("the test class overrides only the storage fixture, not storage_factory")
        return storage_target

    @pytest.fixture
    def capabilities(self, storage: Storage, storage_target: Target | None) -> Capabilities:
        """What the adapter declares (or what the target says it supports)."""
        if storage_target is not None and storage_target.capabilities is not None:
            return storage_target.capabilities
        declared = getattr(raw_storage(storage), "capabilities", None)
        if not isinstance(declared, Capabilities):
            return Capabilities(
                conditional_put=False, conditional_delete=False, durable=False, shared=False
            )
        return declared

    @pytest.fixture
    def supports_conditional_put(self, capabilities: Capabilities) -> bool:
        """``put`` honours ``"create"`` and ``IfMatch``."""
        return capabilities.conditional_put

    @pytest.fixture
    def supports_conditional_delete(self, capabilities: Capabilities) -> bool:
        """``delete(if_match=...)`` is atomic."""
        return capabilities.conditional_delete

    @pytest.fixture
    def supports_durable(self, capabilities: Capabilities) -> bool:
        """Data outlives the storage object that wrote it."""
        return capabilities.durable

    @pytest.fixture
    def supports_shared(self, capabilities: Capabilities) -> bool:
        """Several clients can use the same data at once."""
        return capabilities.shared

    @pytest.fixture
    def supports_ttl(self, capabilities: Capabilities) -> bool:
        """Keys can expire."""
        return capabilities.ttl

    @pytest.fixture
    def supports_indexed_list(self, capabilities: Capabilities) -> bool:
        """``list(prefix, limit=k)`` costs about a get however many keys are stored."""
        return capabilities.indexed_list

    @pytest.fixture
    def scale(self, storage_target: Target | None) -> float:
        """Multiplier of request counts in the heavier tests (``Target.scale``)."""
        return 1.0 if storage_target is None else storage_target.scale

    @pytest_asyncio.fixture(autouse=True)
    async def _conformance_hygiene(
        self, storage_target: Target | None, request: pytest.FixtureRequest
    ) -> AsyncIterator[None]:
        """Checks hygiene around every test (after the storage is closed).

        Also counts open file descriptors before and after the test (after a
        warm-up use of the target): any descriptor the test left open fails
        it, named. A model-group test's failure gives the seed that replays it.
        """
        _RUNNING[0] = storage_target
        if storage_target is not None:
            hung = _HUNG.get(storage_target.name, [])
            if len(hung) >= HUNG_STOP:
                not_exercised(
                    f"not run: the target's last {len(hung)} tests ran into their time limit "
                    f"({', '.join(hung[-HUNG_STOP:])}): its calls no longer return (a lock or "
                    "a connection that a cancelled call kept?), and every test left would "
                    "wait out its limit too. Fix that, or run those tests alone (-k) to see "
                    "where it starts"
                )
        counting = descriptors.available()
        if counting and storage_target is not None:
            await _warm_up(storage_target)
        before = descriptors.snapshot() if counting else {}
        try:
            async with hygiene():
                yield
        except HygieneError as exc:
            seed = request.node.funcargs.get("model_seed")
            if seed is not None:
                exc.add_note(_replay(seed))
            raise
        if counting:
            # A descriptor may be closing right now (a server thread in the process, a
            # thread's last call): a grace, unless descriptors this target leaked in an
            # earlier test are all still open (a persistent leak: fail fast).
            name = storage_target.name if storage_target is not None else ""
            earlier = _LEAKED.get(name, {})
            persistent = bool(earlier) and all(before.get(fd) == t for fd, t in earlier.items())
            found = await descriptors.wait_for_no_leak(
                before,
                grace=0.0 if persistent else 0.5,
                foreign=None if storage_target is None else storage_target.foreign_descriptors,
            )
            if found:
                _LEAKED[name] = {d.fd: d.target for d in found}
                raise HygieneError(
                    "hygiene check failed:\n- the test left "
                    + descriptors.describe_leak(found)
                    + " open after every storage was closed"
                )


_WARMED: set[str] = set()
_LEAKED: dict[str, dict[int, str]] = {}  # per target: what its last leaking test left open


async def _warm_up(target: Target) -> None:
    """Use ``target`` once per process, so that lazily opened process-wide
    descriptors (a library's first use) are not counted as a test's leak."""
    if target.name in _WARMED:
        return
    _WARMED.add(target.name)
    try:
        # bounded: a target whose calls never return is for the tests to report
        async with asyncio.timeout(target.time_limit or StorageFixtures.time_limit):
            await _use_once(target)
    except Exception:  # the tests will say what is wrong with the target
        return


async def _use_once(target: Target) -> None:
    """A put, a get, a listing and a delete through a fresh storage of ``target``."""
    async with target.open() as storage:
        await storage.put("warm-up/k", b"warm-up")
        await storage.get("warm-up/k")
        _ = [key async for key in storage.list("warm-up/")]
        await storage.delete("warm-up/k")


def scaled(scale: float, n: int, minimum: int = 2) -> int:
    """``n`` times ``scale``, at least ``minimum``."""
    return max(minimum, round(n * scale))


def set_small_pages(storage: Storage, size: int) -> bool:
    """Make a `StorageBase` adapter page its listings by ``size`` keys."""
    raw = raw_storage(storage)
    if isinstance(raw, StorageBase):
        raw.page_size = size  # type: ignore[misc]  # an instance override of the ClassVar
        return True
    return False
