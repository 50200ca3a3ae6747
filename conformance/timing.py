"""Latency of storage operations, measured while the suite runs.

The suite hands every test its storage wrapped in `TimedStorage`, which
records the wall time of each completed ``put``, ``get``, ``delete`` and full
``list`` iteration into the active `LatencyRecorder`. The report shows
p50 and p99 per operation.

It also keeps the calls that have not returned yet (`pending`): a test that
runs out of its time limit names them, so that a hung adapter's report says
which call on which key never returned, and for how long.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import math
import threading
import time
from collections.abc import AsyncIterator, Iterable
from types import TracebackType
from typing import Any, ClassVar, Self

from ..storage import Capabilities, GetResult, PutMode, Storage, delete_many

__all__ = ["LatencyRecorder", "OpLatency", "TimedStorage", "pending", "recorder"]


class OpLatency(dict[str, float]):
    """``{"count": n, "p50_ms": ..., "p99_ms": ..., "max_ms": ...}`` for one operation."""


class LatencyRecorder:
    """Durations per operation name; thread-safe; `summary` gives percentiles."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: dict[str, list[float]] = {}

    def record(self, op: str, seconds: float) -> None:
        """Add one completed operation's duration."""
        with self._lock:
            self._samples.setdefault(op, []).append(seconds)

    def clear(self) -> None:
        """Forget every sample."""
        with self._lock:
            self._samples.clear()

    def summary(self) -> dict[str, OpLatency]:
        """Per operation: count, p50, p99 and max in milliseconds."""
        with self._lock:
            samples = {op: sorted(values) for op, values in self._samples.items()}
        out: dict[str, OpLatency] = {}
        for op in sorted(samples):
            values = samples[op]
            out[op] = OpLatency(
                count=len(values),
                p50_ms=round(_percentile(values, 50) * 1000, 3),
                p99_ms=round(_percentile(values, 99) * 1000, 3),
                max_ms=round(values[-1] * 1000, 3),
            )
        return out


def _percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


recorder = LatencyRecorder()
"""The process-wide recorder that `TimedStorage` writes to by default."""

_pending: dict[int, tuple[str, float]] = {}
"""Calls in flight through a `TimedStorage`: a token -> (the call, its start in loop time)."""
_cancelled: collections.deque[tuple[str, float, float]] = collections.deque(maxlen=64)
"""The last calls that ended by a cancellation: (the call, its start, its end), loop time."""
_tokens = itertools.count()


class _InFlight:
    """Registers one call in `_pending` while it runs (a ``with`` block); a call that ends
    by a cancellation goes to `_cancelled`."""

    __slots__ = ("_call", "_loop", "_token")

    def __init__(self, call: str) -> None:
        self._call = call
        self._token = 0
        self._loop = asyncio.get_running_loop()

    def __enter__(self) -> None:
        self._token = next(_tokens)
        _pending[self._token] = (self._call, self._loop.time())

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        entry = _pending.pop(self._token, None)
        if entry is not None and kind is not None and issubclass(kind, asyncio.CancelledError):
            _cancelled.append((*entry, self._loop.time()))


def pending(since: float, expired: float, limit: int = 5) -> list[str]:
    """The calls through a `TimedStorage` that started at or after ``since`` and were still
    running at ``expired`` (both in the event loop's time): those not returned yet, and those
    that a cancellation ended at ``expired`` or later (a time limit's). Oldest first, each
    with how long it had waited (``"get('p/k'), 60.0 s"``); at most ``limit`` of them, then
    how many more."""
    now = asyncio.get_running_loop().time()
    calls = sorted(
        [(started, call, now) for call, started in list(_pending.values()) if started >= since]
        + [
            (started, call, ended)
            for call, started, ended in list(_cancelled)
            if started >= since and ended >= expired
        ]
    )
    out = [f"{call}, {ended - started:.1f} s" for started, call, ended in calls[:limit]]
    if len(calls) > limit:
        out.append(f"{len(calls) - limit} more")
    return out


class TimedStorage:
    """Delegates to ``inner`` and records how long each completed operation took.

    A failed or cancelled operation is not recorded (a latency figure is about
    answers). ``capabilities`` mirror the inner storage's.
    """

    capabilities: ClassVar[Capabilities] = Capabilities()

    def __init__(self, inner: Storage, into: LatencyRecorder | None = None) -> None:
        self.inner = inner
        self._rec = into if into is not None else recorder
        self.__dict__["capabilities"] = inner.capabilities

    def __repr__(self) -> str:
        return f"TimedStorage({self.inner!r})"

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        start = time.perf_counter()
        with _InFlight(f"put({key!r}, mode={mode!r})"):
            version = await self.inner.put(key, data, mode=mode)
        self._rec.record("put", time.perf_counter() - start)
        return version

    async def get(self, key: str) -> GetResult:
        start = time.perf_counter()
        with _InFlight(f"get({key!r})"):
            result = await self.inner.get(key)
        self._rec.record("get", time.perf_counter() - start)
        return result

    async def delete(self, key: str, *, if_match: str | None = None) -> bool:
        start = time.perf_counter()
        with _InFlight(f"delete({key!r}, if_match={if_match!r})"):
            existed = await self.inner.delete(key, if_match=if_match)
        self._rec.record("delete", time.perf_counter() - start)
        return existed

    async def delete_many(self, keys: Iterable[str]) -> int:
        """The adapter's own ``delete_many`` (one ``delete`` per key where it has none)."""
        start = time.perf_counter()
        # the keys as given (a one-shot iterator stays one: the adapter must take it so)
        shown = f"{len(keys)} keys" if isinstance(keys, list | tuple) else type(keys).__name__
        with _InFlight(f"delete_many({shown})"):
            count = await delete_many(self.inner, keys)
        self._rec.record("delete_many", time.perf_counter() - start)
        return count

    def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> AsyncIterator[str]:
        return _TimedListing(
            self.inner.list(prefix, start_after=start_after, limit=limit),
            self._rec,
            f"list({prefix!r}, start_after={start_after!r}, limit={limit!r})",
        )

    async def aclose(self) -> None:
        with _InFlight("aclose()"):
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


class _TimedListing:
    """Records the time from the first ``__anext__`` to the end of the listing."""

    def __init__(self, keys: AsyncIterator[str], rec: LatencyRecorder, call: str) -> None:
        self._keys = keys
        self._rec = rec
        self._call = call
        self._got = 0
        self._start: float | None = None

    def __aiter__(self) -> _TimedListing:
        return self

    async def __anext__(self) -> str:
        if self._start is None:
            self._start = time.perf_counter()
        try:
            with _InFlight(f"{self._call}, after {self._got} keys"):
                key = await self._keys.__anext__()
            self._got += 1
            return key
        except StopAsyncIteration:
            self._rec.record("list", time.perf_counter() - self._start)
            raise


def unwrap(storage: Any) -> Any:
    """The innermost storage under the suite's wrappers (objects with an ``inner``)."""
    seen = 0
    while hasattr(storage, "inner") and seen < 20:
        storage = storage.inner
        seen += 1
    return storage
