"""File adapter benchmark: the adapter side by side with the raw system calls it makes.

Run: ``.venv/bin/python benchmarks/bench_file.py [--runs 5] [--ops 300] [--dir PATH]``

- put: one atomic 1 KiB write with fsync (file and directory), sequential,
  through ``FileStorage.put`` and through a raw Python loop doing
  temp + fdatasync + rename + directory fsync; the ratio is printed.
- get: a 1 KiB read through ``FileStorage.get`` and a raw open + read.
- put and get of 1 MiB (adapter only).
- list: the first key (``limit=1``) and the whole listing of a directory of
  10 keys and of 10,000 keys, next to a raw ``os.listdir``.

Figures are medians of ``--runs`` runs, per operation.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable

from checkpointkit.adapters.file import FileStorage

PAYLOAD = os.urandom(1024)
KEYS = 100


def raw_put_loop(dirpath: str, n: int, fsync: bool) -> float:
    """The limit: temp file, write, flush, rename, flush the directory; seconds per put."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    start = time.perf_counter()
    for i in range(n):
        tmp = f"{dirpath}/#{os.urandom(8).hex()}.tmp"
        fd = os.open(tmp, flags, 0o666)
        try:
            os.write(fd, PAYLOAD)
            if fsync:
                os.fdatasync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, f"{dirpath}/raw{i % KEYS}")
        if fsync:
            dfd = os.open(dirpath, os.O_RDONLY | os.O_DIRECTORY)
            os.fsync(dfd)
            os.close(dfd)
    return (time.perf_counter() - start) / n


def raw_get_loop(dirpath: str, n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        with open(f"{dirpath}/raw{i % KEYS}", "rb", buffering=0) as f:
            f.readall()
    return (time.perf_counter() - start) / n


async def timed(n: int, op: Callable[[int], Awaitable[object]]) -> float:
    start = time.perf_counter()
    for i in range(n):
        await op(i)
    return (time.perf_counter() - start) / n


async def first_key(s: FileStorage, prefix: str) -> list[str]:
    return [k async for k in s.list(prefix, limit=1)]


async def all_keys(s: FileStorage, prefix: str) -> list[str]:
    return [k async for k in s.list(prefix)]


def us(seconds: float) -> str:
    return f"{seconds * 1e6:9.1f} µs"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ops", type=int, default=300)
    parser.add_argument(
        "--dir",
        default=None,
        help="where to write a scratch directory (default: the system's temporary "
        "directory; removed at the end). Put it on the disk you want to measure",
    )
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix=".bench-file-", dir=args.dir)
    runs, n = args.runs, args.ops
    try:
        rows: list[tuple[str, float, float | None]] = []
        big = os.urandom(1 << 20)
        for fsync in (True, False):
            async with FileStorage(f"{base}/ckk-{fsync}", fsync=fsync) as s:
                # The raw loop writes into the adapter's own key directory, so both
                # run on the same directory of the same disk; runs alternate.
                await s.put("bench/warm", PAYLOAD)
                raw_dir = f"{s.root}/bench@"
                raw_put_loop(raw_dir, 20, fsync)
                raw_t, ours_t = [], []
                for _ in range(runs):
                    raw_t.append(raw_put_loop(raw_dir, n, fsync))
                    ours_t.append(
                        await timed(n, lambda i, s=s: s.put(f"bench/k{i % KEYS}", PAYLOAD))
                    )
                rows.append(
                    (
                        f"put 1 KiB, fsync={fsync}",
                        statistics.median(ours_t),
                        statistics.median(raw_t),
                    )
                )
                if not fsync:
                    continue
                raw_t, ours_t = [], []
                for _ in range(runs):
                    raw_t.append(raw_get_loop(raw_dir, n))
                    ours_t.append(await timed(n, lambda i, s=s: s.get(f"bench/k{i % KEYS}")))
                rows.append(("get 1 KiB", statistics.median(ours_t), statistics.median(raw_t)))
                m = max(3, n // 10)
                ours_p = statistics.median(
                    [await timed(m, lambda _i, s=s: s.put("bench/big", big)) for _ in range(runs)]
                )
                ours_r = statistics.median(
                    [await timed(m, lambda _i, s=s: s.get("bench/big")) for _ in range(runs)]
                )
                rows.append(("put 1 MiB, fsync=True", ours_p, None))
                rows.append(("get 1 MiB", ours_r, None))

        async with FileStorage(f"{base}/list", fsync=False) as s:
            for count in (10, 10_000):
                prefix = f"d{count}/"
                await asyncio.gather(*(s.put(f"{prefix}{i:06d}", b"x") for i in range(count)))
                path = f"{s.root}/d{count}@"
                m = max(3, min(n, 300_000 // count))
                raw_ls = statistics.median(
                    _time_sync(m, lambda p=path: os.listdir(p)) for _ in range(runs)
                )
                first = statistics.median(
                    [await timed(m, lambda _i, p=prefix: first_key(s, p)) for _ in range(runs)]
                )
                whole = statistics.median(
                    [
                        await timed(max(3, m // 10), lambda _i, p=prefix: all_keys(s, p))
                        for _ in range(runs)
                    ]
                )
                rows.append((f"list first key, {count:,} keys in the dir", first, raw_ls))
                rows.append((f"list all, {count:,} keys in the dir", whole, None))

        print(f"file adapter vs raw system calls; medians of {runs} runs x {n} ops; {base}")
        print(f"{'operation':<40} {'checkpointkit':>14} {'raw':>14} {'ratio':>7}")
        for name, ours, raw in rows:
            ratio = f"{ours / raw:6.2f}x" if raw else ""
            print(f"{name:<40} {us(ours):>14} {us(raw) if raw else '':>14} {ratio:>7}")
        print("raw for put: temp + write + fdatasync + rename + dir fsync, one thread, no lock;")
        print("raw for get: open + read; raw for list: os.listdir of the directory.")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _time_sync(n: int, fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


if __name__ == "__main__":
    asyncio.run(main())
