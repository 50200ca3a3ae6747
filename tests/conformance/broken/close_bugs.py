"""``aclose()`` mistakes of an adapter whose close runs on its own worker thread.

Both classes are :class:`~broken.kv_sqlite.SqliteKV` with another ``_aclose``: the
connection is closed by a job on the storage's one-thread executor, then the executor is
shut down. Only what happens when ``aclose()`` is cancelled while that job runs differs.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .kv_sqlite import SqliteKV, sqlite_target

__all__ = ["ClosesThenShutsDown", "ShutsDownInFinally", "close_target"]


class ClosesThenShutsDown(SqliteKV):
    """Bug: ``_aclose`` awaits the connection's close job on the worker thread, then shuts
    the executor down, with no ``try``/``finally``: an ``aclose()`` cancelled while the job
    runs never shuts it down, so its worker thread stays alive (and the ``aclose()`` that
    follows returns at once: the storage is already marked closed)."""

    async def _aclose(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._pool, self._close_connection)
        self._pool.shutdown(wait=True)

    def _close_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()


class ShutsDownInFinally(ClosesThenShutsDown):
    """Correct twin of :class:`ClosesThenShutsDown`: the same, with the close job shielded
    (a cancellation would otherwise cancel it while it is still queued, and the connection
    would stay open) and the shutdown in a ``finally:`` block, which waits for that job: a
    cancelled ``aclose()`` still closes the connection and stops the worker thread before
    it re-raises."""

    async def _aclose(self) -> None:
        job = asyncio.get_running_loop().run_in_executor(self._pool, self._close_connection)
        try:
            await asyncio.shield(job)
        finally:
            self._pool.shutdown(wait=True)


def close_target(cls: type[SqliteKV] = ClosesThenShutsDown) -> Any:
    """A conformance target of ``cls`` (one SQLite file per location, as `sqlite_target`)."""
    return sqlite_target(cls)
