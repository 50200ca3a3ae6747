"""Fault injection around any storage: stall or fail chosen operations.

`FaultyStorage` wraps every adapter the same way, so the cancellation
and lifecycle tests can make "the backend" stop answering at a chosen point:

- ``when="before"``: the fault hits before the inner call; a stalled put that
  is then cancelled never reached the backend (it did not happen);
- ``when="after"``: the inner call completed, then its answer is held (or
  replaced by an error); a stalled put that is then cancelled did happen.

Example::

    faulty = FaultyStorage(storage)
    stall = faulty.stall("put", when="before")
    task = asyncio.create_task(faulty.put("k", b"v"))
    await stall.entered.wait()        # the put is now provably stuck
    task.cancel()

A fault matches the operation name (``"put"``, ``"get"``, ``"delete"``,
``"list"``, or ``"*"``) and optionally a key predicate, and fires ``times``
times (None: for ever) until removed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import ClassVar, Literal, Self

from ..errors import StorageUnavailable
from ..storage import Capabilities, GetResult, PutMode, Storage

__all__ = ["Fault", "FaultyStorage"]

Op = Literal["put", "get", "delete", "list", "*"]
When = Literal["before", "after"]


@dataclass(eq=False)
class Fault:
    """One injected fault; keep it to wait on or release it.

    Attributes:
        op: the operation it applies to, or ``"*"``.
        when: ``"before"`` or ``"after"`` the inner call.
        action: ``"stall"`` (wait until `release`) or ``"fail"`` (raise ``error``).
        error: raised by a failing fault.
        key: a predicate on the key (None: every key).
        times: how many calls it hits (None: every call until removed).
        entered: set when a call reaches the fault (a stall is then in progress).
        hits: keys of the calls it hit, in order.
        cancelled: keys of stalled calls that were cancelled while waiting.
    """

    op: Op
    when: When
    action: Literal["stall", "fail"]
    error: BaseException | None = None
    key: Callable[[str], bool] | None = None
    times: int | None = 1
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    hits: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    _released: asyncio.Event = field(default_factory=asyncio.Event)

    def release(self) -> None:
        """Let every stalled call (and later matching ones) go on."""
        self._released.set()

    def _matches(self, op: str, key: str) -> bool:
        if self.times is not None and len(self.hits) >= self.times:
            return False
        if self._released.is_set() and self.action == "stall":
            return False
        if self.op != "*" and self.op != op:
            return False
        return self.key is None or self.key(key)

    async def _fire(self, key: str) -> None:
        self.hits.append(key)
        self.entered.set()
        if self.action == "fail":
            assert self.error is not None
            raise self.error
        try:
            await self._released.wait()
        except asyncio.CancelledError:
            self.cancelled.append(key)
            raise


class FaultyStorage:
    """Delegates to ``inner``, hitting the registered faults on the way.

    ``capabilities`` mirror the inner storage's. Closing it closes ``inner``.
    """

    capabilities: ClassVar[Capabilities] = Capabilities()

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.faults: list[Fault] = []
        self.__dict__["capabilities"] = inner.capabilities

    def __repr__(self) -> str:
        return f"FaultyStorage({self.inner!r})"

    # -- configuring ------------------------------------------------------------------
    def stall(
        self,
        op: Op = "put",
        *,
        when: When = "before",
        key: Callable[[str], bool] | None = None,
        times: int | None = 1,
    ) -> Fault:
        """Hold matching calls until the returned fault is released.

        Args:
            op: operation to stall.
            when: before or after the inner call.
            key: only keys for which this returns true.
            times: how many calls to stall (None: all until released).
        """
        fault = Fault(op, when, "stall", key=key, times=times)
        self.faults.append(fault)
        return fault

    def fail(
        self,
        op: Op = "put",
        *,
        when: When = "before",
        error: BaseException | None = None,
        key: Callable[[str], bool] | None = None,
        times: int | None = 1,
    ) -> Fault:
        """Make matching calls raise ``error`` (default: ``StorageUnavailable``).

        With ``when="after"`` the inner call happens and its answer is lost,
        as when a backend applies a write and the connection drops.
        """
        if error is None:
            error = StorageUnavailable(f"fault injected into {op} ({when} the backend call)")
        fault = Fault(op, when, "fail", error=error, key=key, times=times)
        self.faults.append(fault)
        return fault

    def clear(self) -> None:
        """Release and remove every fault."""
        for fault in self.faults:
            fault.release()
        self.faults.clear()

    async def _hit(self, op: str, when: When, key: str) -> None:
        for fault in list(self.faults):
            if fault.when == when and fault._matches(op, key):
                await fault._fire(key)

    # -- the protocol -------------------------------------------------------------------
    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        await self._hit("put", "before", key)
        version = await self.inner.put(key, data, mode=mode)
        await self._hit("put", "after", key)
        return version

    async def get(self, key: str) -> GetResult:
        await self._hit("get", "before", key)
        result = await self.inner.get(key)
        await self._hit("get", "after", key)
        return result

    async def delete(self, key: str, *, if_match: str | None = None) -> bool:
        await self._hit("delete", "before", key)
        existed = await self.inner.delete(key, if_match=if_match)
        await self._hit("delete", "after", key)
        return existed

    def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> AsyncIterator[str]:
        return _FaultyListing(
            self, self.inner.list(prefix, start_after=start_after, limit=limit), prefix
        )

    async def aclose(self) -> None:
        for fault in self.faults:
            fault.release()
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


class _FaultyListing:
    def __init__(self, owner: FaultyStorage, keys: AsyncIterator[str], prefix: str) -> None:
        self._owner = owner
        self._keys = keys
        self._prefix = prefix
        self._started = False

    def __aiter__(self) -> _FaultyListing:
        return self

    async def __anext__(self) -> str:
        if not self._started:
            self._started = True
            await self._owner._hit("list", "before", self._prefix)
        try:
            return await self._keys.__anext__()
        except StopAsyncIteration:
            await self._owner._hit("list", "after", self._prefix)
            raise
