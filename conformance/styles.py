"""Save styles: storage wrappers that change *how* a put runs, not what it stores.

The runner's guarantees must hold whatever the storage does inside ``put``:

- `Inline`: the put is awaited directly (a pass-through).
- `TaskSpawning`: the put runs in a task that the storage itself creates
  and awaits.
- `Gathering`: the put gathers several backend writes (the data to the
  primary and a mirror copy), as replicating storages do.

`PutGate` holds chosen puts in flight until the test releases them, so
tests can cancel or fail things while a save is provably in progress.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any, ClassVar, Self

from ..adapters.memory import MemoryStorage
from ..storage import Capabilities, GetResult, PutMode, Storage

__all__ = ["STYLES", "Gathering", "Inline", "PutGate", "StorageWrapper", "TaskSpawning"]


class StorageWrapper:
    """Delegates every operation to ``inner``; subclasses override what they change."""

    capabilities: ClassVar[Capabilities] = Capabilities()

    def __init__(self, inner: Storage) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        return await self.inner.put(key, data, mode=mode)

    async def get(self, key: str) -> GetResult:
        return await self.inner.get(key)

    async def delete(self, key: str, *, if_match: str | None = None) -> bool:
        return await self.inner.delete(key, if_match=if_match)

    def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> AsyncIterator[str]:
        return self.inner.list(prefix, start_after=start_after, limit=limit)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class Inline(StorageWrapper):
    """The put is awaited directly by the caller."""


class TaskSpawning(StorageWrapper):
    """The put runs in a task that this storage creates, then awaits."""

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        task = asyncio.ensure_future(self.inner.put(key, data, mode=mode))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            # Cancelled by our caller: cancel our own child too, and wait for it,
            # so that nothing of ours is left pending.
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise


class Gathering(StorageWrapper):
    """The put gathers two writes: the data to ``inner`` and a copy to ``mirror``."""

    def __init__(self, inner: Storage, mirror: Storage | None = None) -> None:
        super().__init__(inner)
        self.mirror: Storage = mirror if mirror is not None else MemoryStorage()

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        version, _ = await asyncio.gather(
            self.inner.put(key, data, mode=mode), self.mirror.put(key, data)
        )
        return version

    async def aclose(self) -> None:
        try:
            await self.inner.aclose()
        finally:
            await self.mirror.aclose()


STYLES: dict[str, Callable[[Storage], StorageWrapper]] = {
    "inline": Inline,
    "task-spawning": TaskSpawning,
    "gather": Gathering,
}
"""Save styles by name, each a function from a storage to its wrapped form."""


class PutGate(StorageWrapper):
    """Holds the puts whose key matches ``hold`` until `release` (or forever).

    Attributes:
        entered: set once a held put is waiting at the gate.
        finished: set once a held put has been answered by ``inner`` (a version, or an
            error such as ``OutcomeUnknown``), unless its caller was cancelled.
        keys: every key whose put was held, in order.
    """

    def __init__(self, inner: Storage, hold: Callable[[str], bool] = lambda key: True) -> None:
        super().__init__(inner)
        self._hold = hold
        self._open = asyncio.Event()
        self.entered = asyncio.Event()
        self.finished = asyncio.Event()
        self.keys: list[str] = []
        self.cancelled: list[str] = []

    def release(self) -> None:
        """Let every held put (and every later one) go through."""
        self._open.set()

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        if not self._open.is_set() and self._hold(key):
            self.keys.append(key)
            self.entered.set()
            try:
                await self._open.wait()
            except asyncio.CancelledError:
                self.cancelled.append(key)
                raise
            try:
                return await self.inner.put(key, data, mode=mode)
            except asyncio.CancelledError:
                raise
            finally:
                if not asyncio.current_task().cancelling():  # type: ignore[union-attr]
                    self.finished.set()  # answered: a version, or an error (maybe unknown)
        return await self.inner.put(key, data, mode=mode)


def wrap_all(storage: Storage, *wrappers: Callable[[Storage], Any]) -> Any:
    """Apply wrappers innermost first: ``wrap_all(s, A, B)`` is ``B(A(s))``."""
    for wrapper in wrappers:
        storage = wrapper(storage)
    return storage
