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
read from the storage's declared :class:`~checkpointkit.storage.Capabilities`
unless the target overrides them. Hygiene
(:func:`~checkpointkit.conformance.hygiene.hygiene`) is checked around every
test by an autouse fixture.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, ClassVar

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
from .checks import ConformanceFailure
from .faults import FaultyStorage
from .groups import GROUPS, group_of
from .hygiene import hygiene
from .styles import StorageWrapper
from .target import Factory, PrefixedStorage, Target
from .timing import TimedStorage

__all__ = ["GROUPS", "StorageFixtures", "group_of", "raw_storage"]

_WRAPPERS = (TimedStorage, PrefixedStorage, FaultyStorage, StorageWrapper)


def raw_storage(storage: Any) -> Any:
    """The adapter's own storage object under the suite's wrappers."""
    while isinstance(storage, _WRAPPERS):
        storage = storage.inner
    return storage


def _time_limited(
    fn: Callable[..., Coroutine[Any, Any, None]], group: str | None
) -> Callable[..., Coroutine[Any, Any, None]]:
    @functools.wraps(fn)
    async def test(self: StorageFixtures, *args: Any, **kwargs: Any) -> None:
        __tracebackhide__ = True
        limit = self.time_limit
        scope = asyncio.timeout(limit)
        try:
            async with scope:
                await fn(self, *args, **kwargs)
        except TimeoutError as exc:
            if not scope.expired():
                raise
            raise ConformanceFailure(
                f"{fn.__name__} did not finish within the suite's time limit of {limit:g} s: "
                "a storage operation never returned (a stalled backend or a lost reply?)"
            ) from exc

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
        """The factory of fresh storages (or a :class:`Target`); override this.

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

    @pytest_asyncio.fixture
    async def storage(self, storage_target: Target | None) -> AsyncIterator[Storage]:
        """A fresh, isolated storage for one test, timed; closed after the test.

        Raises:
            NotImplementedError: neither this nor ``storage_factory`` was overridden.
        """
        if storage_target is None:
            raise NotImplementedError(
                "override the storage_factory fixture (or the storage fixture) "
                "in your subclass of StorageFixtures"
            )
        async with storage_target.open() as opened:
            yield TimedStorage(opened)

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
    def scale(self, storage_target: Target | None) -> float:
        """Multiplier of request counts in the heavier tests (``Target.scale``)."""
        return 1.0 if storage_target is None else storage_target.scale

    @pytest_asyncio.fixture(autouse=True)
    async def _conformance_hygiene(self) -> AsyncIterator[None]:
        """Checks hygiene around every test (after the storage is closed)."""
        async with hygiene():
            yield


def scaled(scale: float, n: int, minimum: int = 2) -> int:
    """``n`` times ``scale``, at least ``minimum``."""
    return max(minimum, round(n * scale))


def set_small_pages(storage: Storage, size: int) -> bool:
    """Make a :class:`StorageBase` adapter page its listings by ``size`` keys."""
    raw = raw_storage(storage)
    if isinstance(raw, StorageBase):
        raw.page_size = size  # type: ignore[misc]  # an instance override of the ClassVar
        return True
    return False
