"""A cancelled AsyncSqliteSaver.aput_writes or adelete_thread waits for the write lock.

Standalone reproduction (langgraph-checkpoint-sqlite; no checkpointkit needed):

    pip install langgraph-checkpoint-sqlite
    python langgraph_sqlite_cancelled_write_waits_for_lock.py

While another connection holds the database's write lock (a second process
writing), each of ``aput``, ``aput_writes`` and ``adelete_thread`` is started on
its own database file and cancelled as soon as its statement has begun (seen
through the connection's trace callback, so no guessed sleep). ``aput`` raises
``CancelledError`` at once. ``aput_writes`` and ``adelete_thread`` are still
running 2 s after ``task.cancel()`` and raise ``CancelledError`` only when
SQLite's busy timeout (5 s, aiosqlite's default) gives up on the lock: they run
their statement in ``async with self.conn.cursor() as cur``, and leaving that
block awaits ``cur.close()``, which aiosqlite queues behind the statement that is
still waiting for the lock. ``aput`` runs its statement in
``async with self.conn.execute(...)``, whose entry is what waits, so no close
follows the cancel. Exit status 1 when ``aput_writes`` or ``adelete_thread`` is
still running 2 s after its cancel.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

BOUND = 2.0
"""Seconds after ``task.cancel()`` past which a call counts as not ending promptly."""


def config(thread: str, checkpoint_id: str | None = None) -> dict:
    conf = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def call(saver: AsyncSqliteSaver, method: str, checkpoint_id: str) -> Any:
    if method == "aput":
        return saver.aput(config("t"), empty_checkpoint(), {}, {})
    if method == "aput_writes":
        return saver.aput_writes(config("t", checkpoint_id), [("ch", "v")], task_id="task")
    return saver.adelete_thread("t")


async def cancel_while_locked(method: str, folder: Path) -> tuple[str, bool]:
    """Cancel ``method`` while another connection holds the write lock; (report, late)."""
    path = str(folder / f"{method}.sqlite")
    loop = asyncio.get_running_loop()
    async with AsyncSqliteSaver.from_conn_string(path) as saver:
        await saver.setup()
        first = empty_checkpoint()
        await saver.aput(config("t"), first, {}, {})  # something to write to and to delete
        started = asyncio.Event()

        def trace(sql: str) -> None:  # runs in aiosqlite's thread as a statement begins
            if sql.lstrip().upper().startswith(("INSERT", "DELETE")):
                loop.call_soon_threadsafe(started.set)

        await saver.conn.set_trace_callback(trace)
        blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        blocker.execute("BEGIN IMMEDIATE")  # another writer holds the lock
        try:
            task = asyncio.ensure_future(call(saver, method, first["id"]))
            await asyncio.wait_for(started.wait(), 30)  # its statement is waiting for the lock
            cancelled_at = loop.time()
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=BOUND)
            late = not done
            await asyncio.wait({task}, timeout=30)  # the lock is still held
            seconds = loop.time() - cancelled_at
            if not task.done():
                outcome = "was still running"
            elif task.cancelled():
                outcome = "raised CancelledError"
            elif task.exception() is not None:
                outcome = f"raised {task.exception()!r}"
            else:
                outcome = "returned"
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        await saver.conn.set_trace_callback(None)
    verdict = f"still running {BOUND:g} s after cancel; " if late else ""
    return f"{method}: {verdict}{outcome} {seconds:.2f} s after cancel", late


async def main() -> int:
    methods = ("aput", "aput_writes", "adelete_thread")
    with tempfile.TemporaryDirectory() as folder:
        results = await asyncio.gather(*(cancel_while_locked(m, Path(folder)) for m in methods))
    for line, _ in results:
        print(line)
    late = [m for m, (_, is_late) in zip(methods, results, strict=True) if is_late]
    if late:
        print(f"BUG: cancelled {', '.join(late)} did not end within {BOUND:g} s of the cancel")
        return 1
    print(f"ok: every cancelled call ended within {BOUND:g} s")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
