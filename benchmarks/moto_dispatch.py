"""The test S3 server against moto's own: CPU per request, client and server together.

Run: ``.venv/bin/python benchmarks/moto_dispatch.py [--rounds 5] [--puts 300]``

Both servers run in this process, as the tests run theirs (a thread), so
``time.process_time`` counts the client's and the server's CPU of each request:

- floor: ``head_bucket`` through the same client to the test server (the cheapest
  request there is on it);
- moto's ``ThreadedMotoServer``: 1 KiB ``S3Storage.put`` calls. Its dispatcher finds the
  service of each request by listing moto's package directory (``list_of_moto_modules``:
  about 180 ``stat`` calls a request, moto 5.2.5);
- the test server (`checkpointkit.conformance.servers.s3.s3_server`): the same puts; its
  dispatcher hands every request to moto's S3 app, and it checks each body whole first.
  Having read the body whole, it keeps the connection for the next request; werkzeug's
  server under moto closes it after every response, so the client opens a TCP connection
  per request there.

Beside each figure, the TCP connections the client opened per request (counted in
aiohttp's connector).

Interleaved round by round; figures are medians over the rounds of the mean CPU per request,
each with its ratio to the floor.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp.connector
from checkpointkit.adapters.s3 import S3Storage
from checkpointkit.conformance.servers.s3 import (
    create_bucket,
    s3_server,
    serving,
    storage_options,
    unique_bucket_name,
)

OPENED = [0]
"""TCP connections the client has opened so far."""


def _count_connections() -> None:
    create = aiohttp.connector.TCPConnector._create_direct_connection

    async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        OPENED[0] += 1
        return await create(self, *args, **kwargs)

    aiohttp.connector.TCPConnector._create_direct_connection = counted  # type: ignore[method-assign]


@contextmanager
def _motos_own() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    with serving(ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)) as url:
        yield url


async def _per_call(n: int, call: Callable[[int], Awaitable[object]], opened: list[float]) -> float:
    before = OPENED[0]
    start = time.process_time()
    for i in range(n):
        await call(i)
    took = (time.process_time() - start) / n
    opened.append((OPENED[0] - before) / n)
    return took


async def main(rounds: int, puts: int) -> None:
    _count_connections()
    with s3_server() as ours_url, _motos_own() as stock_url:
        stores = {}
        for name, url in (("ours", ours_url), ("stock", stock_url)):
            bucket = unique_bucket_name("bench")
            create_bucket(url, bucket)
            stores[name] = S3Storage(bucket, "b", **storage_options(url))
        figures: dict[str, list[float]] = {"floor": [], "stock": [], "ours": []}
        opened: dict[str, list[float]] = {"floor": [], "stock": [], "ours": []}
        value = b"v" * 1024
        async with stores["ours"] as ours, stores["stock"] as stock:
            client = await ours._open()  # the storage's own aiobotocore client
            await ours.put("warm", value)
            await stock.put("warm", value)
            calls: dict[str, Callable[[int, int], Awaitable[object]]] = {
                "floor": lambda _r, _i: client.head_bucket(Bucket=ours.bucket),
                "stock": lambda r, i: stock.put(f"k/{r}/{i:05d}", value),
                "ours": lambda r, i: ours.put(f"k/{r}/{i:05d}", value),
            }
            for r in range(rounds):
                for name, call in calls.items():
                    figures[name].append(
                        await _per_call(puts, lambda i, r=r, call=call: call(r, i), opened[name])
                    )
    floor = statistics.median(figures["floor"])
    print(f"{rounds} rounds of {puts} requests each; CPU per request (client and server)")
    labels = {
        "floor": "floor: head_bucket, test server",
        "stock": "1 KiB put, moto's ThreadedMotoServer",
        "ours": "1 KiB put, the test server",
    }
    for name, label in labels.items():
        cpu = statistics.median(figures[name])
        fresh = statistics.median(opened[name])
        print(
            f"{label:<40} {cpu * 1e3:6.2f} ms  {cpu / floor:5.2f}x the floor  "
            f"{fresh:4.2f} connections opened per request"
        )
    stock_cpu, ours_cpu = statistics.median(figures["stock"]), statistics.median(figures["ours"])
    print(f"the test server's put takes {ours_cpu / stock_cpu:.2f} of the CPU of moto's own")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--puts", type=int, default=300)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.puts))
