"""A cancelled AsyncSqliteSaver.aput is stored anyway, by the saver's next call.

Standalone reproduction (langgraph-checkpoint-sqlite; no checkpointkit needed):

    pip install langgraph-checkpoint-sqlite
    python langgraph_sqlite_cancelled_aput_lands.py

While another connection holds the database's write lock (a second process
writing), an ``aput`` is cancelled once its ``INSERT`` has begun (seen through the
connection's trace callback): it raises ``CancelledError`` promptly. Then
the lock is released and the same saver puts another checkpoint. A second saver
on the same file now sees both checkpoints: the cancelled one was committed by
the next call (its INSERT ran in aiosqlite's thread after the cancel, and the
next call's COMMIT made it durable). Exit status 1 when that happens.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import tempfile
from pathlib import Path

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver


def config(thread: str, checkpoint_id: str | None = None) -> dict:
    conf = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


async def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        return await show(str(Path(folder) / "graph.sqlite"))


async def show(path: str) -> int:
    async with AsyncSqliteSaver.from_conn_string(path) as saver:
        await saver.setup()
        loop = asyncio.get_running_loop()
        started = asyncio.Event()

        def trace(sql: str) -> None:  # runs in aiosqlite's thread as a statement begins
            if sql.lstrip().upper().startswith("INSERT"):
                loop.call_soon_threadsafe(started.set)

        await saver.conn.set_trace_callback(trace)
        blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        blocker.execute("BEGIN IMMEDIATE")  # another writer holds the lock
        cancelled = empty_checkpoint()
        task = asyncio.ensure_future(saver.aput(config("t"), cancelled, {}, {}))
        await asyncio.wait_for(started.wait(), 30)  # its INSERT is waiting for the lock
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            print("aput raised CancelledError")
        blocker.execute("ROLLBACK")
        blocker.close()
        await saver.conn.set_trace_callback(None)
        after = empty_checkpoint()
        await saver.aput(config("t"), after, {}, {})  # the saver's next call
    async with AsyncSqliteSaver.from_conn_string(path) as other:
        landed = await other.aget_tuple(config("t", cancelled["id"]))
    if landed is not None:
        print(f"BUG: the cancelled checkpoint {cancelled['id']} is stored")
        return 1
    print("ok: the cancelled checkpoint is not stored")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
