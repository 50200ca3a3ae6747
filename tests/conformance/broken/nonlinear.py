"""A register that is correct one call at a time and not linearizable under concurrency.

:class:`CheckThenWrite` checks a put's precondition (``create``, ``IfMatch``)
and a delete's ``if_match``, then waits for its simulated I/O, then writes
without checking again: two concurrent compare-and-swaps on one version can
both succeed. Every sequential test passes; only overlapping writes show it.
Its correct twin is :class:`~.adapters.IOMemoryStorage`, which waits first and
then checks and writes in one step.
"""

from __future__ import annotations

import asyncio

from checkpointkit.errors import PreconditionFailed
from checkpointkit.storage import PutMode

from .adapters import IOMemoryStorage

IO_TURNS = 3
"""Turns of the event loop that a call's simulated I/O takes."""


class CheckThenWrite(IOMemoryStorage):
    """Bug: a conditional write checks, awaits I/O, then writes on what it checked before."""

    async def _io(self) -> None:
        # Turns of the event loop rather than a timer: whether two writers' windows overlap
        # then follows from the order they run in, not from the machine's load (a 0.5 ms
        # timer let one CI run under load pass seed 3: its writers' windows never met).
        for _ in range(IO_TURNS):
            await asyncio.sleep(0)

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        self._check(key, mode)
        await self._io()  # another writer can change the key here
        return self._store(key, data)

    async def _delete(self, key: str, if_match: str | None) -> bool:
        current = self._data.values.get(key)
        if current is not None and if_match is not None and current[1] != if_match:
            raise PreconditionFailed(f"key {key!r} is not at version {if_match}")
        await self._io()  # another writer can change the key here
        if key not in self._data.values:
            return False
        del self._data.values[key]
        self._data.keys.remove(key)
        return current is not None
