"""LangGraph puts on PostgreSQL: how each saver's 1 KiB put depends on what ran just before it.

Run: ``.venv/bin/python benchmarks/postgres_put_order.py [--rounds 8]``

``bench_postgres.py`` times each saver's run of 200 puts right after the other's (and
``CheckpointkitSaver``'s after the floor's inserts). This script times each saver's run of
200 puts (``aput`` of a 1 KiB checkpoint chain, one new thread a run) after each of four
things, round by round: a run of its own, a run of the other saver, 200 autocommitted
``INSERT``s of 1 KiB on another connection, and 0.1 s of sleep. Figures are medians over
the rounds, in microseconds per put, on one PostgreSQL server with its durable defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from bench_integrations import logging_quiet, put_chain
from bench_postgres import OURS, PEER, savers
from checkpointkit.conformance.servers.postgres import postgres_server

PUTS = 200


async def bench(url: str, rounds: int) -> dict[tuple[str, str], float]:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS floor (k text PRIMARY KEY, v bytea)")
        row = os.urandom(1024)

        async def inserts() -> None:
            for _ in range(PUTS):
                await conn.execute("INSERT INTO floor VALUES ($1, $2)", uuid.uuid4().hex, row)

        async with savers(url) as found:

            async def run(name: str) -> float:
                seconds, _ = await put_chain(found[name], f"order-{uuid.uuid4().hex}", 1024, PUTS)
                return seconds

            before: dict[str, Callable[[str], Awaitable[Any]]] = {
                "a run of its own": run,
                "a run of the other saver": lambda name: run(PEER if name == OURS else OURS),
                f"{PUTS} INSERTs": lambda _name: inserts(),
                "0.1 s of sleep": lambda _name: asyncio.sleep(0.1),
            }
            times: dict[tuple[str, str], list[float]] = {
                (name, what): [] for name in found for what in before
            }
            for _ in range(rounds):
                for name in found:
                    for what, first in before.items():
                        await first(name)
                        times[(name, what)].append(await run(name))
    finally:
        await conn.close()
    return {key: statistics.median(t) for key, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    logging_quiet()
    with postgres_server(fast=False) as server:
        found = asyncio.run(bench(server.url, args.rounds))
    print(f"1 KiB put, µs (median of {args.rounds} rounds of {PUTS}), after:")
    for (name, what), seconds in found.items():
        print(f"  {name:<20} after {what:<26}{seconds * 1e6:>8.0f}")


if __name__ == "__main__":
    main()
