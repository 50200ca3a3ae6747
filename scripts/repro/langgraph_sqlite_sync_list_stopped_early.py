"""AsyncSqliteSaver: a sync ``list`` stopped early fails to close its cursor.

Standalone reproduction (langgraph-checkpoint-sqlite; no checkpointkit needed):

    pip install langgraph-checkpoint-sqlite
    python langgraph_sqlite_sync_list_stopped_early.py

``AsyncSqliteSaver.list`` (the synchronous listing, for code that runs in a worker
thread while the saver's event loop runs elsewhere) drives its ``alist`` async
generator one item at a time, from the calling thread, with
``run_coroutine_threadsafe(anext(...), loop)``. A caller that stops early (takes the
first checkpoint, a ``for`` loop that breaks) leaves that async generator suspended inside
its ``async with`` of the database cursor. Its first ``anext`` ran in the calling thread,
which has no asyncio hooks, so nothing hands it back to the saver's loop: when it is
collected, Python closes it right there, in the worker thread, and the cursor's
``close`` (aiosqlite asks for the thread's event loop) raises ``RuntimeError: There is no
current event loop``. Python reports it as an unraisable exception ("Exception ignored
in: <async_generator ...>"), and the cursor is left to the garbage collector. Its lock is
let go, so the saver's next call still answers. The control: the same listing read to its end. Exit
status 1 when stopping early gives an unraisable exception.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import tempfile
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

THREAD = {"configurable": {"thread_id": "t"}}


async def listing(stop_early: bool) -> tuple[str, list[str], int]:
    """List a thread of three checkpoints through the sync ``list`` in a worker thread,
    taking the first only (``stop_early``) or all; then collect garbage and list again
    with ``alist``. Returns what the worker took, the unraisable exceptions, and how many
    checkpoints the next ``alist`` found."""
    unraisable: list[str] = []
    previous = sys.unraisablehook

    def hook(info: Any) -> None:
        unraisable.append(f"{info.exc_type.__name__}: {info.exc_value}")

    sys.unraisablehook = hook
    try:
        path = os.path.join(tempfile.mkdtemp(), "checkpoints.db")
        async with AsyncSqliteSaver.from_conn_string(path) as saver:
            config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            for step in range(3):
                config = await saver.aput(config, empty_checkpoint(), {"step": step}, {})

            def worker() -> str:
                taken = 0
                for _ in saver.list(THREAD):
                    taken += 1
                    if stop_early:
                        break
                return f"{taken} of 3"

            took = await asyncio.to_thread(worker)
            await asyncio.to_thread(gc.collect)  # collected where the listing was left
            after = len([t async for t in saver.alist(THREAD)])
    finally:
        sys.unraisablehook = previous
    return took, unraisable, after


async def main() -> int:
    for stop_early, what in ((False, "read to its end"), (True, "stopped after the first")):
        took, unraisable, after = await listing(stop_early)
        print(
            f"sync list in a worker thread, {what} ({took} taken): "
            f"{len(unraisable)} unraisable exception(s)"
            + (f", {unraisable[0]}" if unraisable else "")
            + f"; the next alist found {after} of 3"
        )
    if unraisable:
        print(
            "BUG: a sync list stopped early is closed in the caller's thread, outside the "
            "saver's event loop, where its cursor's close raises"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
