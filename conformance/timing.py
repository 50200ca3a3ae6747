"""Latency of storage operations, measured while the suite runs.

The suite hands every test its storage wrapped in `TimedStorage`, which
records the wall time of each completed ``put``, ``get``, ``delete`` and full
``list`` iteration into the active `LatencyRecorder`. The report shows
p50 and p99 per operation.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import AsyncIterator, Iterable
from types import TracebackType
from typing import Any, ClassVar, Self

from ..storage import Capabilities, GetResult, PutMode, Storage, delete_many

__all__ = ["LatencyRecorder", "OpLatency", "TimedStorage", "recorder"]


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
        version = await self.inner.put(key, data, mode=mode)
        self._rec.record("put", time.perf_counter() - start)
        return version

    async def get(self, key: str) -> GetResult:
        start = time.perf_counter()
        result = await self.inner.get(key)
        self._rec.record("get", time.perf_counter() - start)
        return result

    async def delete(self, key: str, *, if_match: str | None = None) -> bool:
        start = time.perf_counter()
        existed = await self.inner.delete(key, if_match=if_match)
        self._rec.record("delete", time.perf_counter() - start)
        return existed

    async def delete_many(self, keys: Iterable[str]) -> int:
        """The adapter's own ``delete_many`` (one ``delete`` per key where it has none)."""
        start = time.perf_counter()
        count = await delete_many(self.inner, keys)
        self._rec.record("delete_many", time.perf_counter() - start)
        return count

    def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> AsyncIterator[str]:
        return _TimedListing(
            self.inner.list(prefix, start_after=start_after, limit=limit), self._rec
        )

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


class _TimedListing:
    """Records the time from the first ``__anext__`` to the end of the listing."""

    def __init__(self, keys: AsyncIterator[str], rec: LatencyRecorder) -> None:
        self._keys = keys
        self._rec = rec
        self._start: float | None = None

    def __aiter__(self) -> _TimedListing:
        return self

    async def __anext__(self) -> str:
        if self._start is None:
            self._start = time.perf_counter()
        try:
            return await self._keys.__anext__()
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
