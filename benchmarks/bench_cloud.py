"""Cloud adapters benchmark: S3 and Azure Blob side by side with their raw clients, one run.

Run: ``.venv/bin/python benchmarks/bench_cloud.py [--runs 5] [--ops 60] [--only s3|azure]``

It starts moto's S3 server (in this process) and Azurite (``node``, from the
repository's ``node_modules``) on free loopback ports, then measures, one
operation at a time, put+get of 1 KiB and of 1 MiB:

- raw: the SDK's client as an application would use it (aioboto3
  ``put_object`` + ``get_object`` and read; ``ContainerClient``
  ``upload_blob(overwrite=True)`` + ``download_blob().readall()``);
- adapter: ``S3Storage`` / ``AzureBlobStorage`` ``put`` + ``get`` of the same
  bytes (overwrite mode), the mode of a checkpoint's payload;
- adapter, create-only: ``put(mode="create")`` of a fresh key + ``get``;
- through the checkpoint store: ``CheckpointStore.save_step`` of a step record
  of that size (encoded once, as the runner does when the step completes: a
  create-only put) + ``get`` and ``decode_step`` of the record.

Raw and adapter alternate every two operations, so that both see the same load
on a shared machine; figures are medians over all those chunks (``--runs`` times
``--ops`` operations per side and size). Targets: the
adapter costs at most 1.3x the raw client at 1 KiB, 1.1x at 1 MiB. moto answers
about 100 requests a second, so these are figures of a local emulator: they
measure the adapter's own overhead, not S3's or Azure's latency.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aioboto3
from azure.storage.blob.aio import ContainerClient
from checkpointkit.adapters.azure import AzureBlobStorage
from checkpointkit.adapters.s3 import S3Storage
from checkpointkit.conformance.servers.azure import azurite_server
from checkpointkit.conformance.servers.s3 import create_bucket, s3_server, storage_options
from checkpointkit.storage import Storage
from checkpointkit.store import CheckpointStore, StepRecord

KiB = 1024
MiB = 1024 * KiB

Op = Callable[[int], Awaitable[None]]


async def timed(n: int, op: Op, start_at: int) -> float:
    """Seconds spent running ``op(i)`` for ``n`` consecutive values of ``i``."""
    start = time.perf_counter()
    for i in range(start_at, start_at + n):
        await op(i)
    return time.perf_counter() - start


async def compare(sides: list[Op], n: int, runs: int) -> list[float]:
    """Median seconds per call of each side, over many short alternating chunks.

    The sides take turns every two calls, so that a burst of load from
    elsewhere on the machine hits all of them alike; the median over the
    chunks ignores the bursts.
    """
    counters = [0] * len(sides)
    for j, side in enumerate(sides):  # warm: connections, client creation, first request
        await timed(3, side, counters[j])
        counters[j] += 3
    chunk = 2
    samples: list[list[float]] = [[] for _ in sides]
    for _ in range(runs * max(1, n // chunk)):
        for j, side in enumerate(sides):
            samples[j].append(await timed(chunk, side, counters[j]) / chunk)
            counters[j] += chunk
    return [statistics.median(s) for s in samples]


def through_store(storage: Storage, size: int) -> Op:
    """encode + save_step + get + decode of a step record whose envelope is about ``size`` bytes.

    Each op stores the record in its own run: a record is bound to its key, so
    it is encoded per op (microseconds, against the milliseconds of a request).
    """
    store = CheckpointStore(storage, namespace=f"bench{size}")
    # random bytes do not compress: the envelope is the payload plus its header
    record = StepRecord(step="s", result=os.urandom(size - 100))

    async def op(i: int) -> None:
        run = f"run{i}"
        await store.save_step(run, "s", store.encode_step(record, run_id=run))
        key = store.step_key(run, "s")
        got, _ = await storage.get(key)
        assert store.decode_step(got, key=key).step == "s"

    return op


async def bench_s3(endpoint: str, sizes: list[tuple[int, int]], runs: int) -> list[Any]:
    bucket = "ckk-bench"
    create_bucket(endpoint, bucket)
    opts = storage_options(endpoint)
    session = aioboto3.Session(
        aws_access_key_id=opts["access_key_id"],
        aws_secret_access_key=opts["secret_access_key"],
        region_name=opts["region"],
    )
    rows = []
    async with (
        session.client("s3", endpoint_url=endpoint) as raw,
        S3Storage(bucket, "adapter", **opts) as storage,
    ):
        for size, n in sizes:
            data = os.urandom(size)

            async def raw_op(i: int, data: bytes = data) -> None:
                key = f"raw/k{i % 20}"
                await raw.put_object(Bucket=bucket, Key=key, Body=data)
                resp = await raw.get_object(Bucket=bucket, Key=key)
                async with resp["Body"] as body:
                    got = await body.read()
                assert len(got) == len(data)

            async def ours(i: int, data: bytes = data) -> None:
                key = f"runs/bench/k{i % 20}"
                await storage.put(key, data)
                assert len((await storage.get(key)).data) == len(data)

            async def ours_create(i: int, data: bytes = data, size: int = size) -> None:
                key = f"runs/bench/s{size}/{i}"
                await storage.put(key, data, mode="create")
                assert len((await storage.get(key)).data) == len(data)

            sides = [raw_op, ours, ours_create, through_store(storage, size)]
            rows.append(("S3 (moto)", size, *await compare(sides, n, runs)))
    return rows


async def bench_azure(conn_str: str, sizes: list[tuple[int, int]], runs: int) -> list[Any]:
    container = "ckk-bench"
    rows = []
    async with (
        ContainerClient.from_connection_string(conn_str, container) as raw,
        AzureBlobStorage(container, "adapter", connection_string=conn_str, create=True) as storage,
    ):
        await storage.put("warm", b"")  # creates the container
        for size, n in sizes:
            data = os.urandom(size)

            async def raw_op(i: int, data: bytes = data) -> None:
                blob = raw.get_blob_client(f"raw/k{i % 20}")
                await blob.upload_blob(data, overwrite=True)
                got = await (await blob.download_blob()).readall()
                assert len(got) == len(data)

            async def ours(i: int, data: bytes = data) -> None:
                key = f"runs/bench/k{i % 20}"
                await storage.put(key, data)
                assert len((await storage.get(key)).data) == len(data)

            async def ours_create(i: int, data: bytes = data, size: int = size) -> None:
                key = f"runs/bench/s{size}/{i}"
                await storage.put(key, data, mode="create")
                assert len((await storage.get(key)).data) == len(data)

            sides = [raw_op, ours, ours_create, through_store(storage, size)]
            rows.append(("Azure (Azurite)", size, *await compare(sides, n, runs)))
    return rows


def report(rows: list[Any]) -> None:
    def ms(seconds: float) -> str:
        return f"{seconds * 1e3:8.2f} ms"

    print(
        f"{'backend':<16} {'size':>6} {'raw client':>11} {'adapter':>11} {'ratio':>6}"
        f" {'create-only':>12} {'ratio':>6} {'store':>11} {'ratio':>6}  target"
    )
    for backend, size, raw, ours, create, store in rows:
        label = "1 KiB" if size == KiB else "1 MiB"
        target = "1.3x" if size == KiB else "1.1x"
        print(
            f"{backend:<16} {label:>6} {ms(raw)} {ms(ours)} {ours / raw:5.2f}x"
            f" {ms(create):>12} {create / raw:5.2f}x {ms(store)} {store / raw:5.2f}x  {target}"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ops", type=int, default=60, help="put+get pairs per run at 1 KiB")
    parser.add_argument("--only", choices=["s3", "azure"], default=None)
    args = parser.parse_args()
    logging.getLogger("azure").setLevel(logging.WARNING)
    sizes = [(KiB, args.ops), (MiB, max(10, args.ops // 3))]
    rows: list[Any] = []
    if args.only in (None, "s3"):
        with s3_server() as endpoint:
            print(f"moto S3 at {endpoint}; medians of {args.runs} runs", flush=True)
            rows += await bench_s3(endpoint, sizes, args.runs)
    if args.only in (None, "azure"):
        with azurite_server() as conn_str:
            print(f"Azurite; medians of {args.runs} runs", flush=True)
            rows += await bench_azure(conn_str, sizes, args.runs)
    report(rows)


if __name__ == "__main__":
    asyncio.run(main())
