"""Client CPU of S3 calls for new keys, with botocore's endpoint rules evaluated per key or
per bucket.

Run: ``.venv/bin/python benchmarks/s3_endpoint_rules.py [--rounds 6] [--keys 200]``

botocore caches the endpoint its S3 rules give for each set of parameters, and the set it
passes includes ``Key``, which the rules never read: so each new key evaluates the rules
again. ``S3Storage`` passes only the parameters the rules read (see
``_resolve_endpoints_per_bucket`` in ``checkpointkit/adapters/s3.py``). This runs one
storage against a SeaweedFS server (a process of its own, so ``time.process_time`` counts
the client alone), and swaps the client's parameter table round by round:

- floor: ``head_bucket`` through the same client (the cheapest request there is);
- botocore's parameters: a 1 KiB ``put``, its ``get`` and a ``list`` of its prefix, each of
  a new key, with every parameter the rules declare passed (botocore 1.40.61 as it is);
- the adapter's: the same calls with only the parameters the rules read.

Interleaved round by round; figures are medians over the rounds of the mean CPU per call.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from checkpointkit.adapters.s3 import S3Storage
from checkpointkit.conformance.servers.s3 import create_bucket, storage_options, unique_bucket_name
from checkpointkit.conformance.servers.seaweedfs import seaweedfs_server


async def _per_call(n: int, calls: int, run: Callable[[int], Awaitable[object]]) -> float:
    start = time.process_time()
    for i in range(n):
        await run(i)
    return (time.process_time() - start) / (n * calls)


async def main(rounds: int, keys: int) -> None:
    with seaweedfs_server() as url:
        bucket = unique_bucket_name("bench")
        create_bucket(url, bucket)
        async with S3Storage(bucket, "b", **storage_options(url)) as storage:
            client = await storage._open()
            resolver = client._ruleset_resolver
            tables: dict[str, dict[str, Any]] = {
                "adapter": resolver._param_definitions,
                # botocore's own table, which its resolver is made with
                "botocore": resolver._provider.ruleset.parameters,
            }
            print(
                "parameters botocore passes and the adapter does not: "
                + ", ".join(sorted(set(tables["botocore"]) - set(tables["adapter"])))
            )
            value = b"v" * 1024
            await storage.put("warm", value)

            async def each(prefix: str, i: int) -> None:
                key = f"{prefix}/r{i:05d}/step"
                await storage.put(key, value)
                await storage.get(key)
                [k async for k in storage.list(key)]

            figures: dict[str, list[float]] = {"floor": [], "botocore": [], "adapter": []}
            for r in range(rounds):
                figures["floor"].append(
                    await _per_call(keys, 1, lambda _i: client.head_bucket(Bucket=bucket))
                )
                for name in ("botocore", "adapter"):
                    resolver._param_definitions = tables[name]
                    figures[name].append(
                        await _per_call(keys, 3, lambda i, p=f"{name}/{r}": each(p, i))
                    )
            resolver._param_definitions = tables["adapter"]
    floor = statistics.median(figures["floor"])
    print(f"{rounds} rounds of {keys} new keys each; client CPU per call (SeaweedFS)")
    labels = {
        "floor": "floor: head_bucket",
        "botocore": "put/get/list, botocore's parameters",
        "adapter": "put/get/list, the adapter's",
    }
    for name, label in labels.items():
        cpu = statistics.median(figures[name])
        print(f"{label:<40} {cpu * 1e6:6.0f} µs  {cpu / floor:5.2f}x the floor")
    ratio = statistics.median(figures["adapter"]) / statistics.median(figures["botocore"])
    print(f"the adapter's calls take {ratio:.2f} of the CPU with botocore's parameters")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--keys", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.keys))
