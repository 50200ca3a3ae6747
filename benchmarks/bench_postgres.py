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
autocommit), each in its own database. Each put is printed beside the floor of its size (an
autocommitted ``INSERT`` of a row of that size through asyncpg on one connection, timed
between the runs; its commit waits for the log flush, as a put's does) and the ratio. Then
the floor on the saver's own storage and its connection pool, interleaved run by run: the
server's cheapest round trip (``SELECT 1``), the adapter's own get statement sent raw, and
the adapter's ``get`` of a 1 KiB value; one autocommitted single-row ``INSERT ... ON
CONFLICT DO UPDATE`` of 1 KiB, the adapter's own put statement sent raw (with its
deadline fence), the adapter's ``put`` of 1 KiB (each of the three a new row, as a
checkpoint is), and each saver's ``aput`` of a 1 KiB checkpoint: a put layer by layer, in
the same interleaved runs. Last, ``CheckpointkitSaver``'s own part of its ``aput``: a third
run of its ``aput`` that also times the adapter's ``put`` inside it, the difference.

Figures are medians of ``--runs`` runs; the ratio is ``AsyncPostgresSaver``'s time over
checkpointkit's (above 1: checkpointkit faster). The peers are installed by the ``test``
extra only.

``--cpu 0`` runs the benchmark and its server on one core: how the two savers share the
machine's cores moves the ratios (see "Measured" in ``docs/adapters/postgres.md``).
``--switch-interval 0.0002`` sets the interpreter's thread switch interval: the graph's
plain-function nodes run in a worker thread, and a reply that arrives while that thread
holds the interpreter's lock waits for it (up to the interval) before the event loop reads
it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from bench_integrations import (
    WARM_UP,
    Chain,
    chain_of,
    fmt,
    in_turn,
    logging_quiet,
    median_interval,
    print_floors,
    put_chain,
    ratio,
    saver_rows,
    timed,
)
from checkpointkit.adapters.postgres import PostgresStorage
from checkpointkit.conformance.servers.postgres import postgres_server
from checkpointkit.integrations.langgraph import CheckpointkitSaver

PEER = "AsyncPostgresSaver"
OURS = "ckk postgres"
OWN = "CheckpointkitSaver's own part"
TARGETS = {
    "put, 1 KiB": 1.5,
    "latest, 1 KiB": 1.0,
    "latest, 64 KiB": 1.0,
    "latest, 1 MiB": 1.0,
    "put, 1 KiB, 16 threads": 3.0,
    "graph step, 10 nodes": 1.5,
}
"""Issue 19's targets: ``AsyncPostgresSaver``'s time over checkpointkit's, at least."""


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


class Floor:
    """An autocommitted ``INSERT`` of a new row of a given size, on one asyncpg connection."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    @classmethod
    @contextlib.asynccontextmanager
    async def on(cls, url: str) -> AsyncIterator[Floor]:
        import asyncpg

        conn = await asyncpg.connect(url)
        try:
            await conn.execute("CREATE TABLE IF NOT EXISTS floor (k text PRIMARY KEY, v bytea)")
            yield cls(conn)
        finally:
            await conn.close()

    async def per_commit(self, size: int, n: int) -> float:
        row = os.urandom(size)
        run = uuid.uuid4().hex
        return await timed(
            n, lambda i: self.conn.execute("INSERT INTO floor VALUES ($1, $2)", f"{run}-{i}", row)
        )


async def floor(
    storage: PostgresStorage, runs: int, n: int, savers: dict[str, Any]
) -> dict[str, float]:
    """Seconds per operation: the cheapest statements through the storage's own pool beside
    the storage's get and put of 1 KiB, and each saver's ``aput`` of a 1 KiB checkpoint
    (medians of ``runs`` interleaved runs, in turn as `in_turn` orders them): a put layer by
    layer."""
    pool = await storage._ready()  # the adapter's pool: the same connections as its operations
    table = f'"{storage.table}_floor"'
    row = bytes(1024)

    async def on_pool(sql: str, *args: Any) -> None:
        conn = pool.take() or await pool.acquire(10)
        try:
            await conn.execute(sql, *args)
        except BaseException:
            pool.discard(conn)
            raise
        pool.release(conn)

    await on_pool(f"CREATE TABLE IF NOT EXISTS {table} (k text PRIMARY KEY, v bytea)")
    await storage.put("floor/get", row)
    upsert = f"INSERT INTO {table} VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = excluded.v"
    sql, ns, far = storage._sql, storage.prefix, 1e300  # the adapter's statements, raw
    # Writes of a new row each, as a checkpoint's put is: an overwrite of a row with the
    # same bytes would log only the changed part of the row (a few hundred bytes).
    upsert_key, raw_key, put_key = _new_keys("u", n), _new_keys("r", n), _new_keys("p", n)
    ops: dict[str, Callable[[int], Awaitable[object]]] = {
        "SELECT 1": lambda _i: on_pool("SELECT 1"),
        "get statement, raw": lambda _i: on_pool(sql.get, ns, "floor/get"),
        "get": lambda _i: storage.get("floor/get"),
        "INSERT ... ON CONFLICT": lambda i: on_pool(upsert, upsert_key(i), row),
        "put statement, raw": lambda i: on_pool(sql.overwrite, ns, raw_key(i), row, None, far),
        "put (new key)": lambda i: storage.put(put_key(i), row),
    }
    for name, saver in savers.items():
        ops[f"{name} aput"] = _Aputs(saver, n)
    inside = _Aputs(savers[OURS], n, timing=storage)
    ops[f"{OURS} aput, put timed inside"] = inside
    times: dict[str, list[float]] = {name: [] for name in ops}
    own: list[float] = []
    for run in range(runs):
        for name, op in in_turn(ops, run):
            if isinstance(op, _Aputs):
                op.prepare()
            times[name].append(await timed(n, op))
        own.append(times[f"{OURS} aput, put timed inside"][-1] - statistics.fmean(inside.puts))
    found = {name: statistics.median(t) for name, t in times.items()}
    found[OWN] = statistics.median(own)
    return found


def print_paired(per_run: dict[str, dict[str, list[float]]]) -> None:
    """Each run's ratio (the peer's run over checkpointkit's run beside it), against the
    targets: the median of the runs' ratios, with a distribution-free interval for it
    (`median_interval`), and how many runs reached the target. A target is shown met when
    the whole interval, of at least 95% confidence (6 runs or more), is at or above it;
    "median only" when the median is and the interval is not."""
    print(
        "\nRatios run by run (the peer's run over checkpointkit's run beside it): the median "
        "and its distribution-free interval"
    )
    print(
        f"{'operation':<24}{'runs':>5}{'lowest':>8}{'interval of the median':>30}"
        f"{'highest':>9}{'target':>8}  verdict"
    )
    for op, target in TARGETS.items():
        figures = per_run.get(op)
        if not figures or OURS not in figures or PEER not in figures:
            continue
        ratios = [p / o for p, o in zip(figures[PEER], figures[OURS], strict=True)]
        low, median, high, confidence = median_interval(ratios)
        reached = sum(r >= target for r in ratios)
        interval = f"{low:.2f} <= {median:.2f} <= {high:.2f} ({confidence:.1%})"
        if confidence < 0.95:
            verdict = "too few runs for a 95% interval"
        else:
            verdict = "met" if low >= target else "median only" if median >= target else "not met"
        verdict += f" ({reached} of {len(ratios)} runs at it)"
        print(
            f"{op:<24}{len(ratios):>5}{min(ratios):>7.2f}x{interval:>30}{max(ratios):>8.2f}x"
            f"{target:>7.1f}x  {verdict}"
        )


def _new_keys(tag: str, n: int) -> Callable[[int], str]:
    """Call ``i`` gives a key never used before, in descending order within a run of ``n``
    (as a thread's checkpoint keys); a new run starts when ``i`` is 0."""
    run = [""]

    def key(i: int) -> str:
        if i == 0:
            run[0] = uuid.uuid4().hex
        return f"floor/{tag}/{run[0]}/{n - i:09d}"

    return key


class _Aputs:
    """An operation for `timed`: call ``i`` puts checkpoint ``i`` of a 1 KiB chain of ``n``.
    `prepare` makes the next run's chain and thread before its clock starts (making the
    chain costs about 10 µs a checkpoint, which timed with the puts added to both savers).

    With ``timing`` (the saver's storage), each call also times the storage's ``put``
    inside the ``aput`` (in `puts`, seconds): the ``aput`` less its ``put`` is the saver's
    own part, run between statements as it is in use."""

    def __init__(self, saver: Any, n: int, timing: PostgresStorage | None = None) -> None:
        self.saver, self.n, self.timing = saver, n, timing
        self.chain: Chain = []
        self.config: Any = None
        self.puts: list[float] = []

    def prepare(self) -> None:
        self.chain = chain_of(self.saver, 1 << 10, self.n)
        self.config = {"configurable": {"thread_id": uuid.uuid4().hex, "checkpoint_ns": ""}}
        self.puts = []
        gc.collect()  # as `put_chain`: the chain's garbage is nobody's to collect

    async def __call__(self, i: int) -> None:
        checkpoint, metadata, new_versions = self.chain[i]
        storage = self.timing
        if storage is None:
            self.config = await self.saver.aput(self.config, checkpoint, metadata, new_versions)
            return
        put = storage.put

        async def timed_put(key: str, data: bytes, **options: Any) -> str:
            start = time.perf_counter()
            try:
                return await put(key, data, **options)
            finally:
                self.puts.append(time.perf_counter() - start)

        storage.put = timed_put  # type: ignore[method-assign]
        try:
            self.config = await self.saver.aput(self.config, checkpoint, metadata, new_versions)
        finally:
            del storage.put  # the class's method again


async def bench(url: str, runs: int, quick: bool) -> None:
    counts = {"1 KiB": 200, "64 KiB": 60, "1 MiB": 12}
    if quick:
        counts = {k: max(4, v // 4) for k, v in counts.items()}
    async with Floor.on(url) as commits:

        async def insert_of(size: int, n: int) -> dict[str, float]:
            return {"floor postgres": await commits.per_commit(size, n)}

        per_run: dict[str, dict[str, list[float]]] = {}
        async with savers(url) as found:
            rows = await saver_rows(found, runs, counts, insert_of, per_run)
            storage = found[OURS].storage
            assert isinstance(storage, PostgresStorage)
            floors = await floor(storage, runs, counts["1 KiB"], found)
    print(f"\nLangGraph on one PostgreSQL server: CheckpointkitSaver vs {PEER}")
    print(f"{'operation':<24}{OURS:>14}{PEER:>20}{'ratio':>10}")
    for op, figures in rows:
        ours, peer = figures.get(OURS), figures.get(PEER)
        print(f"{op:<24}{fmt(ours):>14}{fmt(peer):>20}{ratio(peer, ours):>10}")
    print("\nThe floor, 1 KiB, on the adapter's own pool (interleaved with its get and put)")
    print(f"{'cheapest statement':<34}{'adapter statement, raw':>24}{'adapter':>26}")
    for cheapest, raw, ours in (
        ("SELECT 1", "get statement, raw", "get"),
        ("INSERT ... ON CONFLICT", "put statement, raw", "put (new key)"),
    ):
        print(
            f"{cheapest:<22}{fmt(floors[cheapest]):>12}{fmt(floors[raw]):>24}"
            f"{ours:>16}{fmt(floors[ours]):>10}  ({floors[ours] / floors[cheapest]:.2f}x)"
        )
    layers = [
        ("INSERT ... ON CONFLICT", floors["INSERT ... ON CONFLICT"]),
        ("the adapter's statement, raw", floors["put statement, raw"]),
        ("the adapter's put", floors["put (new key)"]),
        ("CheckpointkitSaver.aput", floors[f"{OURS} aput"]),
    ]
    peer = floors[f"{PEER} aput"]
    print(
        "A 1 KiB put layer by layer (the same runs): "
        + " -> ".join(f"{name} {fmt(t).strip()}" for name, t in layers)
        + f"; {PEER}.aput {fmt(peer).strip()} (ratio {peer / layers[-1][1]:.2f}x; "
        f"1.5x would be {fmt(peer / 1.5).strip()})"
    )
    own = fmt(floors[OWN]).strip()
    print(f"{OWN} of its aput (the aput less the adapter's put timed inside it): {own}")
    print_paired(per_run)
    print_floors(
        rows,
        [(OURS, "floor postgres"), (PEER, "floor postgres")],
        how="(an autocommitted INSERT of a row of that size, asyncpg, one connection)",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="fewer operations per run")
    parser.add_argument(
        "--cpu",
        type=lambda text: {int(c) for c in text.split(",")},
        help="run the benchmark and its server on these CPUs only (say 0: one core for both)",
    )
    parser.add_argument(
        "--switch-interval",
        type=float,
        help="the interpreter's thread switch interval, seconds (sys.setswitchinterval; "
        "default 0.005): how long the event loop may wait for a node's worker thread",
    )
    args = parser.parse_args()
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
        print(f"switch interval {sys.getswitchinterval() * 1e3:g} ms")
    if args.cpu is not None:
        os.sched_setaffinity(0, args.cpu)  # the server, started below, inherits it
        print(f"on CPU {', '.join(map(str, sorted(args.cpu)))} only (client and server)")
    logging_quiet()
    with postgres_server(fast=False) as server:
        asyncio.run(bench(server.url, args.runs, args.quick))


if __name__ == "__main__":
    main()
