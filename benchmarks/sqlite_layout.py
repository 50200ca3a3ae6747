"""Why the SQLite adapter's table and log are laid out as they are: two measurements.

Run: ``.venv/bin/python benchmarks/sqlite_layout.py [--dir PATH]`` (scratch files go
under ``--dir``, default the system's temporary directory, and are removed).

1. **Rows in a rowid table, keys in its unique index**, against a ``WITHOUT ROWID``
   table keyed by the key: one row per commit (WAL, ``synchronous=FULL``, the version
   counter raised in the same transaction, as the adapter does), then a read of it on a
   second connection and a page of 10 keys, at 1,000 B, 64 KiB and 1 MiB. A ``WITHOUT
   ROWID`` row lives in an index B-tree, where a value longer than about a quarter of a
   page goes to overflow pages that SQLite reads and writes much more slowly.
2. **The cost of the sync that ends a commit**: ``fdatasync`` after a write that makes a
   file longer, against one that overwrites blocks the file already has (as a log that
   has started over does), at 4 KiB to 1 MiB.

Figures are medians.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import tempfile
import time

WITHOUT_ROWID = (
    "CREATE TABLE kv (key TEXT PRIMARY KEY NOT NULL, version INTEGER NOT NULL, "
    "data BLOB NOT NULL) WITHOUT ROWID"
)
ROWID = "CREATE TABLE kv (key TEXT NOT NULL UNIQUE, version INTEGER NOT NULL, data BLOB NOT NULL)"
UPSERT = (
    "INSERT INTO kv (key, version, data) VALUES (?1, ?2, ?3) "
    "ON CONFLICT (key) DO UPDATE SET version = excluded.version, data = excluded.data"
)


def layout(base: str, name: str, ddl: str, size: int, n: int) -> tuple[float, float, float]:
    """Median seconds of a put (one commit), a get and a page of 10 keys."""
    path = os.path.join(base, f"{name}-{size}.db")
    w = sqlite3.connect(path, isolation_level=None)
    w.execute("PRAGMA journal_mode=WAL")
    w.execute("PRAGMA synchronous=FULL")
    w.execute(ddl)
    w.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER) WITHOUT ROWID")
    w.execute("INSERT INTO meta VALUES ('version', 0)")
    r = sqlite3.connect(path, isolation_level=None)
    data = os.urandom(size)
    puts: list[float] = []
    gets: list[float] = []
    pages: list[float] = []
    for i in range(n):
        key = f"langgraph/c/thread-{i % 50}/x/{10**9 - i:032d}"
        t = time.perf_counter()
        w.execute("BEGIN IMMEDIATE")
        (v,) = w.execute("SELECT value FROM meta WHERE name = 'version'").fetchone()
        w.execute(UPSERT, (key, v + 1, data))
        w.execute("UPDATE meta SET value = ?1 WHERE name = 'version'", (v + 1,))
        w.execute("COMMIT")
        puts.append(time.perf_counter() - t)
        t = time.perf_counter()
        r.execute("SELECT version, data FROM kv WHERE key = ?", (key,)).fetchone()
        gets.append(time.perf_counter() - t)
        t = time.perf_counter()
        r.execute(
            "SELECT key FROM kv WHERE key >= ? ORDER BY key LIMIT 10",
            (f"langgraph/c/thread-{i % 50}/",),
        ).fetchall()
        pages.append(time.perf_counter() - t)
    r.close()
    w.close()
    skip = n // 5  # the first commits grow the tree and the log from nothing
    return tuple(statistics.median(x[skip:]) for x in (puts, gets, pages))  # type: ignore[return-value]


def sync_cost(base: str, size: int, overwrite: bool, n: int = 300) -> float:
    """Median seconds of a write of ``size`` bytes and its ``fdatasync``."""
    path = os.path.join(base, "sync-probe")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        if overwrite:
            os.write(fd, b"\0" * (size * n))
            os.fsync(fd)
        block = b"x" * size
        times: list[float] = []
        for i in range(n):
            t = time.perf_counter()
            os.pwrite(fd, block, i * size)
            os.fdatasync(fd)
            times.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        os.unlink(path)
    return statistics.median(times)


def us(seconds: float) -> str:
    return f"{seconds * 1e6:8.0f} µs"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dir", default=None, help="where to make the scratch directory")
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="sqlite-layout-", dir=args.dir)
    try:
        print("one row per commit (WAL, synchronous=FULL), medians")
        print(f"{'value':>9} {'layout':<14}{'put':>12}{'get':>12}{'10 keys':>12}")
        for size, n in ((1000, 800), (64 << 10, 200), (1 << 20, 30)):
            for name, ddl in (("WITHOUT ROWID", WITHOUT_ROWID), ("rowid", ROWID)):
                put, get, page = layout(base, name.replace(" ", "_"), ddl, size, n)
                print(f"{size:>9,} {name:<14}{us(put):>12}{us(get):>12}{us(page):>12}")
        print("\nfdatasync after a write, medians of 300")
        print(f"{'write':>9}{'file grows':>14}{'overwrite':>14}")
        for size in (4 << 10, 32 << 10, 256 << 10, 1 << 20):
            grows = sync_cost(base, size, overwrite=False)
            over = sync_cost(base, size, overwrite=True)
            print(f"{size:>9,}{us(grows):>14}{us(over):>14}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
