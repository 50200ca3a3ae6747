"""The floor of a durable write on each local backend: its cheapest commit of a given size.

A benchmark that times a durable write prints the floor beside it, measured in the same run
on the same disk, and the ratio (its time over the floor's): what is left above the ratio's 1
is checkpointkit's (and its peer's) own work, the rest is the disk.

- SQLite: one ``INSERT`` of a ``size``-byte row and its ``COMMIT``, WAL, ``synchronous=FULL``
  (the log synced at each commit), the log started over (the same pragmas as checkpointkit's
  SQLite storage and LangGraph's ``AsyncSqliteSaver``);
- file: write a temporary file, ``fdatasync`` it, rename it over the key's file, ``fsync``
  the directory (what the file adapter does for one put).

Each is timed in the calling thread and from an event loop through one worker thread
(``run_in_executor``), as the savers do: the difference is the two thread wake-ups.

Run on its own: ``.venv/bin/python benchmarks/floors.py [--dir PATH]``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import itertools
import os
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "Floor",
    "Floors",
    "file_commit",
    "file_floor",
    "measure",
    "sqlite_commit",
    "sqlite_floor",
]


@dataclass(frozen=True)
class Floor:
    """Seconds of one durable commit: in the calling thread, and from a loop via a thread."""

    inline: float
    via_thread: float


def measure(commit: Callable[[], None], n: int, runs: int) -> Floor:
    """Medians of ``runs`` runs of ``n`` calls of ``commit``, inline then via a worker thread."""

    async def via(pool: concurrent.futures.ThreadPoolExecutor) -> float:
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        for _ in range(n):
            await loop.run_in_executor(pool, commit)
        return (time.perf_counter() - start) / n

    inline: list[float] = []
    hopped: list[float] = []
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        for _ in range(runs):
            start = time.perf_counter()
            for _ in range(n):
                commit()
            inline.append((time.perf_counter() - start) / n)
            hopped.append(asyncio.run(via(pool)))
    return Floor(statistics.median(inline), statistics.median(hopped))


def sqlite_commit(path: str, size: int) -> tuple[Callable[[], None], Callable[[], None]]:
    """One SQLite commit of a ``size``-byte row with its log sync, and the closer of its
    database at ``path``; the log has started over before it is returned."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, data BLOB)")
        row = random.Random(size).randbytes(size)
        counter = itertools.count()

        def commit() -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO kv VALUES (?, ?)", (f"k/{next(counter):012d}", row))
            conn.execute("COMMIT")

        for _ in range(max(20, min(600, (4 << 20) // max(size, 1)))):  # the log starts over
            commit()
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    except BaseException:
        conn.close()
        raise
    return commit, conn.close


def file_commit(where: str, size: int) -> tuple[Callable[[], None], Callable[[], None]]:
    """One atomic, durable write of a ``size``-byte file in the folder ``where``, and the
    closer of the folder's descriptor; 20 writes have been made before it is returned."""
    os.makedirs(where, exist_ok=True)
    data = random.Random(size).randbytes(size)
    counter = itertools.count()
    dir_fd = os.open(where, os.O_RDONLY)

    def commit() -> None:
        i = next(counter)
        tmp = os.path.join(where, f".tmp-{i}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
            os.fdatasync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, os.path.join(where, f"k{i % 64}"))
        os.fsync(dir_fd)

    try:
        for _ in range(20):
            commit()
    except BaseException:
        os.close(dir_fd)
        raise
    return commit, lambda: os.close(dir_fd)


def sqlite_floor(directory: str, size: int, *, n: int = 200, runs: int = 3) -> Floor:
    """One SQLite commit of a ``size``-byte row with its log sync (see the module docstring)."""
    commit, close = sqlite_commit(os.path.join(directory, f"floor-{size}.db"), size)
    try:
        return measure(commit, max(4, min(n, (64 << 20) // max(size, 1))), runs)
    finally:
        close()


def file_floor(directory: str, size: int, *, n: int = 200, runs: int = 3) -> Floor:
    """One atomic, durable file write of ``size`` bytes (see the module docstring)."""
    commit, close = file_commit(os.path.join(directory, f"floor-{size}"), size)
    try:
        return measure(commit, max(4, min(n, (64 << 20) // max(size, 1))), runs)
    finally:
        close()


class Floors:
    """Floors measured between a benchmark's own runs, interleaved with them, in its event loop.

    ``await floors.sqlite(size, n)`` is the seconds of one SQLite commit of ``size`` bytes
    made from this event loop through a worker thread, as a saver makes it (mean of ``n``);
    ``floors.file(size, n)`` the same for a durable file write. Connections and files
    stay open between calls, and each log has started over before the first is timed.
    """

    def __init__(self, directory: str) -> None:
        self.directory = os.path.join(directory, "floors")
        os.makedirs(self.directory, exist_ok=True)
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="floor")
        self._commits: dict[tuple[str, int], Callable[[], None]] = {}
        self._closers: list[Callable[[], None]] = []

    def _sqlite_commit(self, size: int) -> Callable[[], None]:
        commit, close = sqlite_commit(os.path.join(self.directory, f"sqlite-{size}.db"), size)
        self._closers.append(close)
        return commit

    def _file_commit(self, size: int) -> Callable[[], None]:
        commit, close = file_commit(os.path.join(self.directory, f"file-{size}"), size)
        self._closers.append(close)
        return commit

    async def _timed(self, kind: str, size: int, n: int) -> float:
        commit = self._commits.get((kind, size))
        if commit is None:
            make = self._sqlite_commit if kind == "sqlite" else self._file_commit
            commit = self._commits[kind, size] = make(size)
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        for _ in range(n):
            await loop.run_in_executor(self._pool, commit)
        return (time.perf_counter() - start) / n

    async def sqlite(self, size: int, n: int) -> float:
        """Seconds of one SQLite commit of ``size`` bytes via a worker thread (mean of ``n``)."""
        return await self._timed("sqlite", size, n)

    async def file(self, size: int, n: int) -> float:
        """Seconds of one durable file write of ``size`` bytes via a worker thread."""
        return await self._timed("file", size, n)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for close in self._closers:
            close()
        self._closers.clear()


def _fmt(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds >= 0.01 else f"{seconds * 1e6:.0f} µs"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dir", default=None, help="where to make a scratch directory")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix=".bench-floors-", dir=args.dir)
    try:
        print(
            f"{'size':>8} {'sqlite inline':>14} {'sqlite thread':>14} {'file inline':>12} "
            f"{'file thread':>12}"
        )
        for size in (1 << 10, 64 << 10, 1 << 20):
            s = sqlite_floor(base, size, runs=args.runs)
            f = file_floor(base, size, runs=args.runs)
            print(
                f"{size:>8} {_fmt(s.inline):>14} {_fmt(s.via_thread):>14} "
                f"{_fmt(f.inline):>12} {_fmt(f.via_thread):>12}"
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
