"""LangGraph on PostgreSQL: ``CheckpointkitSaver`` on ``postgres://`` beside ``AsyncPostgresSaver``.

Run: ``.venv/bin/python benchmarks/bench_postgres.py [--runs 5] [--quick]``

Starts one PostgreSQL server on a loopback port with its durable defaults
(``fsync`` and ``synchronous_commit`` on: ``conformance.servers.postgres``,
``fast=False``) and measures, on that one server, interleaved run by run:

- ``put``: ``aput`` of the next checkpoint of a thread, 1 KiB / 64 KiB / 1 MiB of state;
- ``latest``: ``aget_tuple`` without a checkpoint id, on a thread of 50 checkpoints;
- ``put, 1 KiB, 16 threads``: 16 threads putting at once (wall time per put);
- ``graph step``: a 10-node ``StateGraph`` run with ``ainvoke``, per step;

for ``CheckpointkitSaver.from_url("postgres://...")`` and LangGraph's
``AsyncPostgresSaver`` (``langgraph-checkpoint-postgres``, psycopg 3, one connection,
autocommit), each in its own database. The floor printed beside them is the server's
cheapest round trip (``SELECT 1``) and one autocommitted ``INSERT`` of a 1 KiB row (its
commit waits for the log flush), both through asyncpg on one connection; each put is also
printed beside the floor of its size (an ``INSERT`` of a row of that size, timed between
the runs) and the ratio.

Figures are medians of ``--runs`` runs; the ratio is ``AsyncPostgresSaver``'s time over
checkpointkit's (above 1: checkpointkit faster). The peers are installed by the ``test``
extra only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

from bench_integrations import (
    WARM_UP,
    fmt,
    logging_quiet,
    print_floors,
    put_chain,
    ratio,
    saver_rows,
    timed,
)
from checkpointkit.conformance.servers.postgres import postgres_server
from checkpointkit.integrations.langgraph import CheckpointkitSaver

PEER = "AsyncPostgresSaver"
OURS = "ckk postgres"


async def _database(admin_url: str, name: str) -> str:
    import asyncpg

    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return admin_url.rsplit("/", 1)[0] + f"/{name}"


@contextlib.asynccontextmanager
async def savers(url: str) -> AsyncIterator[dict[str, Any]]:
    import psycopg
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg.rows import dict_row

    ours_url = await _database(url, "ckk")
    peer_url = await _database(url, "peer")
    async with contextlib.AsyncExitStack() as stack:
        found: dict[str, Any] = {}
        found[OURS] = await stack.enter_async_context(CheckpointkitSaver.from_url(ours_url))
        conn = await psycopg.AsyncConnection.connect(
            peer_url, autocommit=True, prepare_threshold=0, row_factory=dict_row
        )
        await stack.enter_async_context(conn)
        peer = AsyncPostgresSaver(conn)
        await peer.setup()
        found[PEER] = peer
        for saver in found.values():
            await put_chain(saver, f"warm-up-{uuid.uuid4().hex[:6]}", 1 << 10, WARM_UP)
        yield found


async def floor(url: str, n: int) -> tuple[float, float]:
    """Seconds of one ``SELECT 1`` and of one autocommitted 1 KiB ``INSERT``."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS floor (k text PRIMARY KEY, v bytea)")
        row = bytes(1024)
        select = await timed(n, lambda _i: conn.fetchval("SELECT 1"))
        insert = await timed(
            n,
            lambda i: conn.execute(
                "INSERT INTO floor VALUES ($1, $2)", f"{uuid.uuid4().hex}-{i}", row
            ),
        )
    finally:
        await conn.close()
    return select, insert


async def bench(url: str, runs: int, quick: bool) -> None:
    counts = {"1 KiB": 200, "64 KiB": 60, "1 MiB": 12}
    if quick:
        counts = {k: max(4, v // 4) for k, v in counts.items()}
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS floor (k text PRIMARY KEY, v bytea)")

        async def insert_of(size: int, n: int) -> dict[str, float]:
            row = os.urandom(size)
            seconds = await timed(
                n,
                lambda i: conn.execute(
                    "INSERT INTO floor VALUES ($1, $2)", f"{uuid.uuid4().hex}-{i}", row
                ),
            )
            return {"floor postgres": seconds}

        async with savers(url) as found:
            rows = await saver_rows(found, runs, counts, insert_of)
    finally:
        await conn.close()
    select, insert = await floor(url, 200)
    print(f"\nLangGraph on one PostgreSQL server: CheckpointkitSaver vs {PEER}")
    print(f"{'operation':<24}{OURS:>14}{PEER:>20}{'ratio':>10}")
    for op, figures in rows:
        ours, peer = figures.get(OURS), figures.get(PEER)
        print(f"{op:<24}{fmt(ours):>14}{fmt(peer):>20}{ratio(peer, ours):>10}")
    print(
        f"floor on this server (asyncpg, one connection): SELECT 1 {fmt(select)}, "
        f"one autocommitted 1 KiB INSERT {fmt(insert)}"
    )
    print_floors(
        rows,
        [(OURS, "floor postgres"), (PEER, "floor postgres")],
        how="(an autocommitted INSERT of a row of that size, asyncpg, one connection)",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="fewer operations per run")
    args = parser.parse_args()
    logging_quiet()
    with postgres_server(fast=False) as server:
        asyncio.run(bench(server.url, args.runs, args.quick))


if __name__ == "__main__":
    main()
