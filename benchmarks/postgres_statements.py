"""What each part of the PostgreSQL adapter's put statement costs, timed op by op.

Run: ``.venv/bin/python benchmarks/postgres_statements.py [--n 2000] [--fast]``

Starts one PostgreSQL server on a loopback port (durable defaults: ``fsync`` and
``synchronous_commit`` on; ``--fast`` turns them off, as the tests' servers) and, on one
connection, sends ``--n`` times each variant of a 1 KiB put of a new row, every iteration
sending each variant once in a new random order. A put's time drifts with the disk's log
flush by more than the parts differ (the ratios of ``bench_postgres.py`` move by 15% run to
run), so timing each variant in a run of its own cannot tell a 10 µs part from the noise;
interleaved op by op, the drift falls on every variant alike. Printed: each variant's median
and its difference from the one before it.

The variants build up to the adapter's statement (``PostgresStorage``'s own text, last):

- a bare ``INSERT ... ON CONFLICT DO UPDATE`` into a ``(k text PRIMARY KEY, v bytea)`` table;
- the same into the adapter's table (``(ns, key)`` key, version, expiry), constant version;
- with the version from the adapter's sequence, then with the expiry expression;
- with ``RETURNING`` the version;
- with the deadline fence as the PL/pgSQL function it was before commit 1a2000a;
- the adapter's statement: the fence as a plain SQL ``CASE``
  (`checkpointkit.adapters.postgres.fence`).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from checkpointkit.adapters.postgres import LATE, PostgresStorage
from checkpointkit.conformance.servers.postgres import postgres_server

ROW = bytes(1024)
FAR = 1e300
"""A deadline that never passes."""

_FUNCTION = (
    "CREATE FUNCTION bench_fence(deadline float8) RETURNS float8 LANGUAGE plpgsql VOLATILE "
    "AS $f$ DECLARE now float8 := extract(epoch FROM clock_timestamp()); BEGIN "
    f"IF now >= deadline THEN RAISE EXCEPTION '{LATE}' USING ERRCODE = 'CKD01'; END IF; "
    "RETURN now; END $f$"
)
"""The fence as it was: a PL/pgSQL function (SQLSTATE CKD01 when late)."""


def variants(storage: PostgresStorage) -> dict[str, tuple[str, Callable[[str], tuple[Any, ...]]]]:
    """Each variant's statement and its arguments for a key, in build-up order."""
    sql = storage._sql
    table, seq = sql.table, sql.table[:-1] + '_version"'
    expires = "clock_timestamp() + $4::float8 * interval '1 second'"

    def upsert(version: str, expiry: str) -> str:
        return (
            f"INSERT INTO {table} AS r (ns, key, version, expires, data) "
            f"VALUES ($1, $2, {version}, {expiry}, $3) ON CONFLICT (ns, key) DO UPDATE "
            "SET version = excluded.version, expires = excluded.expires, data = excluded.data"
        )

    sequence = f"nextval('{seq}')"
    full = upsert(sequence, expires)
    return {
        "bare INSERT ... ON CONFLICT": (
            "INSERT INTO bench_bare VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
            lambda k: (k, ROW),
        ),
        "adapter's table, constant version": (upsert("1", "NULL"), lambda k: ("b", k, ROW)),
        "+ version from the sequence": (upsert(sequence, "NULL"), lambda k: ("b", k, ROW)),
        "+ expiry expression": (full, lambda k: ("b", k, ROW, None)),
        "+ RETURNING version": (f"{full} RETURNING r.version", lambda k: ("b", k, ROW, None)),
        "+ fence, PL/pgSQL function": (
            f"{full} RETURNING r.version, bench_fence($5)",
            lambda k: ("b", k, ROW, None, FAR),
        ),
        "+ fence, SQL CASE (the adapter's)": (sql.overwrite, lambda k: ("b", k, ROW, None, FAR)),
    }


async def bench(url: str, n: int) -> dict[str, float]:
    import asyncpg

    storage = PostgresStorage.from_url(url, prefix="bench")
    try:
        await storage.put("bench/created", b"")  # the adapter's table, sequence and meta
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("CREATE TABLE bench_bare (k text PRIMARY KEY, v bytea)")
            await conn.execute(_FUNCTION)
            found = variants(storage)
            prepared = {name: await conn.prepare(q) for name, (q, _) in found.items()}
            times: dict[str, list[float]] = {name: [] for name in found}
            names, run = list(found), uuid.uuid4().hex
            for i in range(n):
                random.shuffle(names)
                for j, name in enumerate(names):
                    args = found[name][1](f"bench/{run}/{j}/{n - i:09d}")  # a new row each
                    start = time.perf_counter()
                    await prepared[name].fetch(*args)
                    times[name].append(time.perf_counter() - start)
        finally:
            await conn.close()
    finally:
        await storage.aclose()
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="iterations (each sends every variant)")
    parser.add_argument("--fast", action="store_true", help="a server without fsync")
    args = parser.parse_args()
    with postgres_server(fast=args.fast) as server:
        medians = asyncio.run(bench(server.url, args.n))
    what = "without fsync" if args.fast else "durable (fsync on)"
    print(f"\nA 1 KiB put of a new row, {args.n} iterations op by op, server {what} (medians)")
    previous = None
    for name, seconds in medians.items():
        step = "" if previous is None else f"{(seconds - previous) * 1e6:+6.0f} µs"
        print(f"{name:<36}{seconds * 1e6:8.0f} µs  {step}")
        if not name.startswith("+ fence, PL"):
            previous = seconds
    print("(each difference is from the line above; the adapter's fence from RETURNING version)")


if __name__ == "__main__":
    main()
