"""How long the SQLite adapter's write-ahead log grows under writers in several processes.

Run: ``.venv/bin/python benchmarks/sqlite_wal_growth.py [--writers 4] [--seconds 20]
[--dir PATH]`` (scratch files go under ``--dir``, default the system's temporary
directory, and are removed).

Each writer is its own process with its own ``SQLiteStorage`` on one database file,
putting 1 KiB values (``fsync=False``, to write as fast as the lock allows) without a
pause for ``--seconds``. The parent samples the ``-wal`` file's size every 20 ms and
prints the largest and the last size, the puts done, and the floor beside them: the
adapter's checkpoint threshold (``CHECKPOINT_BYTES``), the size the log would stay near
if it started over at every checkpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import shutil
import tempfile
import time
from typing import Any

from checkpointkit.adapters.sqlite import CHECKPOINT_BYTES, SQLiteStorage


def writer(path: str, index: int, seconds: float, start: Any, done: Any) -> None:
    async def go() -> int:
        count = 0
        async with SQLiteStorage(path, fsync=False) as storage:
            start.wait()
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                keys = [f"w{index}/{(count + i) % 500}" for i in range(8)]
                await asyncio.gather(*(storage.put(key, os.urandom(1024)) for key in keys))
                count += 8
        return count

    done.put(asyncio.run(go()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    base = tempfile.mkdtemp(dir=args.dir, prefix="ck-wal-")
    try:
        path = os.path.join(base, "store.db")
        SQLiteStorage(path)  # creates it
        ctx = multiprocessing.get_context("spawn")
        start, done = ctx.Event(), ctx.Queue()
        procs = [
            ctx.Process(target=writer, args=(path, i, args.seconds, start, done))
            for i in range(args.writers)
        ]
        for p in procs:
            p.start()
        time.sleep(2.0)  # let every process import and open the database
        start.set()
        largest = 0
        while any(p.is_alive() for p in procs):
            try:
                largest = max(largest, os.path.getsize(path + "-wal"))
            except FileNotFoundError:
                pass
            time.sleep(0.02)
        for p in procs:
            p.join()
        puts = sum(done.get() for _ in procs)
        last = os.path.getsize(path + "-wal") if os.path.exists(path + "-wal") else 0
        mib = 1 << 20
        print(
            f"{args.writers} writer processes, {args.seconds:g} s, {puts} puts of 1 KiB: "
            f"-wal largest {largest / mib:.1f} MiB, last {last / mib:.1f} MiB "
            f"(floor: checkpoint threshold {CHECKPOINT_BYTES / mib:.0f} MiB)"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
