"""Late landings: storage wrappers that give writes the unknown outcomes of a real network.

Over TCP, a write that is cancelled, times out or loses its connection after
its request left may still take effect later (see "Writes whose outcome is
unknown" in `checkpointkit.storage`). These wrappers make that happen on
purpose, over any storage, so that the layers above can be tested against it:

- `LateLanding`: a write whose caller is cancelled while it is in
  flight is applied anyway, ``0`` to ``max_delay`` seconds later; and the first
  attempt of some writes "times out": it raises
  `OutcomeUnknown` and lands later (or not at all).
- `LateReply`: every write lands at once, and its reply arrives up to
  ``max_delay`` seconds later; a caller cancelled meanwhile sees
  ``CancelledError`` for a write that happened; the first attempt of some
  writes lands and then raises ``OutcomeUnknown``.

Both are seeded (``seed``) and keep a log of what they did (`events`).
``settle()`` lands every write still pending; ``aclose()`` settles first, so
nothing is left running. Neither declares ``settles_cancelled_writes``.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from types import TracebackType
from typing import Any, ClassVar, Self

from ..errors import CheckpointkitError, OutcomeUnknown
from ..storage import Capabilities, GetResult, PutMode, Storage

__all__ = ["LateLanding", "LateReply"]


class _Unknowns:
    """Shared by both wrappers: the seeded choices, the log and the pending landings."""

    capabilities: ClassVar[Capabilities] = Capabilities()

    def __init__(
        self,
        inner: Storage,
        *,
        seed: int = 0,
        max_delay: float = 0.2,
        unknown_rate: float = 0.2,
        keys: Callable[[str], bool] | None = None,
    ) -> None:
        if max_delay < 0 or not 0 <= unknown_rate <= 1:
            raise ValueError(
                f"max_delay must be >= 0 and unknown_rate in [0, 1], "
                f"not {max_delay!r} and {unknown_rate!r}"
            )
        self.inner = inner
        self.max_delay = max_delay
        self.unknown_rate = unknown_rate
        self.keys = keys
        self.rng = random.Random(seed)
        self.events: list[str] = []
        """What happened, in order: ``"late put KEY"``, ``"unknown delete KEY"``, ..."""
        self._tried: set[tuple[str, str, Any]] = set()
        self._late: set[asyncio.Task[None]] = set()
        self.__dict__["capabilities"] = replace(inner.capabilities, settles_cancelled_writes=False)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    def _applies(self, key: str) -> bool:
        return self.keys is None or self.keys(key)

    def _first_unknown(self, op: str, key: str, arg: Any) -> bool:
        """Whether this write's first attempt gets an unknown outcome (its retries never do)."""
        attempt = (op, key, arg)
        if attempt in self._tried:
            return False
        self._tried.add(attempt)
        return self.rng.random() < self.unknown_rate

    def _land_later(self, what: str, write: Callable[[], Awaitable[Any]]) -> None:
        delay = self.rng.uniform(0, self.max_delay)

        async def land() -> None:
            await asyncio.sleep(delay)
            try:
                await write()
            except CheckpointkitError:
                self.events.append(f"late {what} refused")  # its precondition failed: harmless
            else:
                self.events.append(f"late {what} landed after {delay:.3f} s")

        task = asyncio.get_running_loop().create_task(land())
        self._late.add(task)
        task.add_done_callback(self._late.discard)

    async def settle(self) -> None:
        """Wait until every write that is due to land late has landed (or been refused)."""
        while self._late:
            await asyncio.wait(set(self._late))

    # -- reads pass through -------------------------------------------------------------
    async def get(self, key: str) -> GetResult:
        return await self.inner.get(key)

    def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> AsyncIterator[str]:
        return self.inner.list(prefix, start_after=start_after, limit=limit)

    async def aclose(self) -> None:
        try:
            await self.settle()
        finally:
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


class LateLanding(_Unknowns):
    """Cancelled and timed-out writes land later: ``0`` to ``max_delay`` seconds after.

    Args:
        inner: the storage that finally receives the writes.
        seed: seeds every random choice.
        max_delay: the longest a late write waits before it lands.
        unknown_rate: the share of writes whose first attempt raises
            ``OutcomeUnknown`` (and lands later, or never).
        keys: only keys for which this returns true are affected.
        in_flight: seconds a write stays in flight before it reaches ``inner``
            (the window in which a cancellation makes it late).
    """

    def __init__(self, inner: Storage, *, in_flight: float = 0.002, **options: Any) -> None:
        super().__init__(inner, **options)
        self.in_flight = in_flight

    async def _write(self, op: str, key: str, arg: Any, write: Callable[[], Awaitable[Any]]) -> Any:
        if not self._applies(key):
            return await write()
        if self._first_unknown(op, key, arg):
            if self.rng.random() < 0.75:
                self._land_later(f"{op} {key}", write)
                self.events.append(f"unknown {op} {key} (lands later)")
            else:
                self.events.append(f"unknown {op} {key} (never lands)")
            raise OutcomeUnknown(f"injected: the {op} of {key!r} timed out after sending")
        try:
            await asyncio.sleep(self.in_flight)  # the request is on its way
        except asyncio.CancelledError:
            self._land_later(f"{op} {key}", write)
            self.events.append(f"cancelled {op} {key} (lands later)")
            raise
        return await write()

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        result: str = await self._write(
            "put", key, (data, mode), lambda: self.inner.put(key, data, mode=mode)
        )
        return result

    async def delete(self, key: str, *, if_match: str | None = None) -> bool:
        result: bool = await self._write(
            "delete", key, if_match, lambda: self.inner.delete(key, if_match=if_match)
        )
        return result


class LateReply(_Unknowns):
    """Every write lands at once; its reply arrives up to ``max_delay`` seconds later.

    A caller cancelled while waiting for the reply gets ``CancelledError`` for
    a write that happened. The first attempt of some writes lands and then
    raises ``OutcomeUnknown`` (the connection dropped before the reply).

    Args: as for `LateLanding` (``max_delay`` bounds the reply's delay).
    """

    async def _write(self, op: str, key: str, arg: Any, write: Callable[[], Awaitable[Any]]) -> Any:
        if not self._applies(key):
            return await write()
        result = await write()
        if self._first_unknown(op, key, arg):
            self.events.append(f"unknown {op} {key} (landed)")
            raise OutcomeUnknown(f"injected: the reply to the {op} of {key!r} was lost")
        try:
            await asyncio.sleep(self.rng.uniform(0, self.max_delay))
        except asyncio.CancelledError:
            self.events.append(f"cancelled {op} {key} (landed)")
            raise
        return result

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        result: str = await self._write(
            "put", key, (data, mode), lambda: self.inner.put(key, data, mode=mode)
        )
        return result

    async def delete(self, key: str, *, if_match: str | None = None) -> bool:
        result: bool = await self._write(
            "delete", key, if_match, lambda: self.inner.delete(key, if_match=if_match)
        )
        return result
