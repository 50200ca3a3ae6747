"""The write-ahead log stays bounded under writers in several processes (issue 20).

The figure in docs/adapters/sqlite.md comes from ``benchmarks/sqlite_wal_growth.py``;
this test holds the bound, generously: under 32 MiB (four times the size the log is cut
back to) where passive checkpoints let it grow by about 20 MiB a second without end.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

from checkpointkit.adapters.sqlite import LOG_LIMIT, SQLiteStorage

WRITERS = 4
SECONDS = 4.0
BOUND = 4 * LOG_LIMIT


def _writer(path: str, index: int, start: Any, done: Any) -> None:
    async def go() -> int:
        count = 0
        async with SQLiteStorage(path, fsync=False) as storage:
            start.wait(30)
            end = time.monotonic() + SECONDS
            while time.monotonic() < end:
                keys = [f"w{index}/{(count + i) % 500}" for i in range(8)]
                await asyncio.gather(*(storage.put(key, os.urandom(1024)) for key in keys))
                count += 8
        return count

    done.put(asyncio.run(go()))


def test_log_stays_bounded_under_four_writer_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "store.db")
    SQLiteStorage(path)
    ctx = multiprocessing.get_context("spawn")
    start, done = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(path, i, start, done)) for i in range(WRITERS)]
    for p in procs:
        p.start()
    largest = 0
    try:
        while done.qsize() < WRITERS and any(p.is_alive() for p in procs):
            start.set()  # the writers start together, each once it has opened the database
            try:
                largest = max(largest, os.path.getsize(path + "-wal"))
            except FileNotFoundError:
                pass
            time.sleep(0.02)
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
                p.join()
    puts = [done.get(timeout=5) for _ in procs]
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    assert sum(puts) > 0
    assert largest < BOUND, (
        f"the -wal grew to {largest / 2**20:.1f} MiB under {WRITERS} writer processes "
        f"({sum(puts)} puts in {SECONDS:g} s); bound {BOUND / 2**20:.0f} MiB"
    )
