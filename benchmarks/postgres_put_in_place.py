"""Where a ``CheckpointkitSaver.aput`` of 1 KiB on ``postgres://`` spends its time, in place.

Run: ``.venv/bin/python benchmarks/postgres_put_in_place.py [--rounds 6] [--n 400]``

Starts one PostgreSQL server on a loopback port with its durable defaults (``fsync`` and
``synchronous_commit`` on) and puts ``--n`` checkpoints of a 1 KiB chain (`chain_of`, as
``bench_postgres.py``) on a new thread, ``--rounds`` times. Each ``aput`` is cut at four
points, with ``time.perf_counter_ns`` as it runs: where the saver calls the storage's
``put``, where the adapter hands its statement to the driver (asyncpg's ``fetch``), where
the driver returns the reply, and where the storage's ``put`` returns. Printed per round,
medians of the ``aput``s (the thread's first put, which may look for an old head, left
out): the whole ``aput``; the saver's part before its put (LangGraph's serializer, the
record, its envelope and key); the adapter's part before the statement (checks, pool,
deadline, timeout); the statement's round trip in the driver (the server's work and its
log flush, the loopback, the driver); the adapter's part after it; the saver's after; and
the record's size and key length.

Timed between statements, as in use: the process sleeps while the server works, and what
runs after the reply runs with cold caches (in a loop on the memory storage the same saver
code costs about half).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import statistics
import time
import uuid
from typing import Any

from bench_integrations import chain_of, logging_quiet
from checkpointkit.adapters.postgres import PostgresStorage
from checkpointkit.conformance.servers.postgres import postgres_server
from checkpointkit.integrations.langgraph import CheckpointkitSaver

POINTS = ("start", "put", "send", "reply", "put end", "end")


async def measure(url: str, rounds: int, n: int) -> None:
    storage = PostgresStorage(url)
    saver = CheckpointkitSaver(storage)
    marks: dict[str, list[int]] = {}
    sizes: list[tuple[int, int]] = []

    def mark(point: str) -> None:
        marks.setdefault(point, []).append(time.perf_counter_ns())

    await storage.put("warm-up", b"x")
    pool = await storage._ready()
    conn = pool.take()
    assert conn is not None
    pool.release(conn)
    driver = type(conn)
    fetch = driver.fetch

    async def timed_fetch(self: Any, *args: Any, **kwargs: Any) -> Any:
        mark("send")
        try:
            return await fetch(self, *args, **kwargs)
        finally:
            mark("reply")

    put = storage.put

    async def timed_put(key: str, data: bytes, **options: Any) -> str:
        mark("put")
        sizes.append((len(data), len(key)))
        try:
            return await put(key, data, **options)
        finally:
            mark("put end")

    driver.fetch = timed_fetch  # type: ignore[method-assign]
    storage.put = timed_put  # type: ignore[method-assign]
    try:
        print(
            f"{'aput':>6}{'saver before':>14}{'adapter before':>16}{'round trip':>12}"
            f"{'adapter after':>15}{'saver after':>13}{'record':>8}{'key':>5}   (µs, bytes)"
        )
        for _ in range(rounds):
            chain = chain_of(saver, 1 << 10, n)
            config: Any = {"configurable": {"thread_id": uuid.uuid4().hex, "checkpoint_ns": ""}}
            gc.collect()
            marks.clear()
            sizes.clear()
            for checkpoint, metadata, new_versions in chain:
                mark("start")
                config = await saver.aput(config, checkpoint, metadata, new_versions)
                mark("end")
            # The first aput may look for an old head: one statement more; leave it out.
            parts = [
                statistics.median(
                    (b - a) / 1000 for a, b in zip(marks[x][1:], marks[y][1:], strict=True)
                )
                for x, y in (("start", "end"), *itertools.pairwise(POINTS))
            ]
            record = statistics.median(s for s, _ in sizes)
            key = statistics.median(k for _, k in sizes)
            print(
                f"{parts[0]:>6.0f}{parts[1]:>14.0f}{parts[2]:>16.0f}{parts[3]:>12.0f}"
                f"{parts[4]:>15.0f}{parts[5]:>13.0f}{record:>8.0f}{key:>5.0f}"
            )
    finally:
        driver.fetch = fetch  # type: ignore[method-assign]
        del storage.put  # the class's method again
        await storage.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--n", type=int, default=400, help="puts per round")
    args = parser.parse_args()
    logging_quiet()
    with postgres_server(fast=False) as server:
        asyncio.run(measure(server.url, args.rounds, args.n))


if __name__ == "__main__":
    main()
