"""How often a cancelled S3 or Azure Blob write still takes effect, and when: measured.

Run: ``.venv/bin/python benchmarks/late_landings.py [--trials 12] [--grace 0.25] [--only s3|azure]``

Neither adapter declares ``settles_cancelled_writes``: over HTTP a write whose
request has reached the server may take effect although the caller got
``CancelledError``. This script counts it, per backend and per situation, on
moto and Azurite (loopback only), each trial on a fresh key holding an old
value, the new value 1 KiB:

- ``reply stalled``: a proxy forwards the request and holds the reply (a server
  that applied the write, then stopped answering); cancelled once the reply is
  held. The write has happened before the cancellation: it is reported as
  "took effect" (visible when ``CancelledError`` returns).
- ``request held past the grace``: a relay hands the request to the server
  ``grace + 0.5`` s late, whatever the client does (a server that holds the
  whole request and applies it late); cancelled once the relay holds the body.
  Every such write lands *after* ``CancelledError``: a late landing.
- ``network stalls mid-request``: a proxy forwards half the request, then holds
  the rest; cancelled then. After the grace the connection is reset, the held
  bytes are dropped, and the server discards the cut body: never lands.
- ``random moment, healthy server``: no proxy; cancelled after a random delay
  of 0 to 2 typical put latencies. A write on the wire settles within the grace.

For each trial: is the new value visible right when ``CancelledError`` returns,
or only later (read again once the relay has answered, or after 1 s)?
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from checkpointkit.adapters.azure import AzureBlobStorage
from checkpointkit.adapters.s3 import S3Storage
from checkpointkit.conformance.proxy import StallProxy
from checkpointkit.conformance.relay import LateRelay
from checkpointkit.conformance.servers.azure import azurite_server
from checkpointkit.conformance.servers.s3 import create_bucket, s3_server, storage_options
from checkpointkit.errors import NotFound
from checkpointkit.storage import StorageBase

Make = Callable[..., StorageBase]


@dataclass
class Tally:
    trials: int = 0
    at_return: int = 0  # visible when CancelledError returned: took effect before it
    later: int = 0  # absent then, present afterwards: a late landing

    def row(self, backend: str, situation: str) -> str:
        never = self.trials - self.at_return - self.later
        return (
            f"| {backend} | {situation} | {self.at_return + self.later} in {self.trials} "
            f"| {self.later} in {self.trials} | {never} in {self.trials} |"
        )


async def read(storage: StorageBase, key: str) -> bytes | None:
    try:
        return (await storage.get(key)).data
    except NotFound:
        return None


async def cancelled_put(
    storage: StorageBase, key: str, data: bytes, ready: Callable[[], Any]
) -> None:
    """Start ``storage.put``, wait for ``ready()``, cancel, wait for ``CancelledError``."""
    task = asyncio.create_task(storage.put(key, data))
    try:
        await asyncio.wait_for(ready(), 10)
    finally:
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def trial(
    direct: StorageBase,
    key: str,
    run: Callable[[bytes], Any],
    settle: Callable[[], Any],
    tally: Tally,
) -> None:
    new = key.encode().ljust(1024, b".")
    await direct.put(key, b"old")
    await run(new)
    now = await read(direct, key)
    await settle()
    after = await read(direct, key)
    tally.trials += 1
    if now == new:
        tally.at_return += 1
    elif after == new:
        tally.later += 1


async def measure(
    backend: str,
    make: Make,
    upstream: tuple[str, int],
    trials: int,
    grace: float,
) -> list[str]:
    rows: list[str] = []
    async with make() as direct:
        # reply stalled
        tally = Tally()
        async with StallProxy(upstream) as proxy, make(endpoint=proxy.address) as s:
            for i in range(trials):
                proxy.stall("response", partial=False)

                key = f"reply-{i}"

                async def run(new: bytes, s: StorageBase = s, key: str = key) -> None:
                    await cancelled_put(s, key, new, proxy.stalled.wait)
                    proxy.resume()

                await trial(direct, key, run, lambda: asyncio.sleep(1.0), tally)
        rows.append(tally.row(backend, "reply stalled"))

        # request held past the grace
        tally = Tally()
        async with LateRelay(upstream, grace + 0.5) as relay, make(endpoint=relay.address) as s:
            for i in range(trials):
                key = f"held-{i}"

                async def run(new: bytes, s: StorageBase = s, key: str = key) -> None:
                    relay.answered.clear()
                    await cancelled_put(s, key, new, lambda: relay.holding(new))

                async def answered() -> None:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(relay.answered.wait(), 5)

                await trial(direct, key, run, answered, tally)
        rows.append(tally.row(backend, f"request held past the grace ({grace + 0.5:g} s)"))

        # network stalls mid-request
        tally = Tally()
        async with StallProxy(upstream) as proxy, make(endpoint=proxy.address) as s:
            for i in range(trials):
                proxy.stall("request", partial=True)

                key = f"cut-{i}"

                async def run(new: bytes, s: StorageBase = s, key: str = key) -> None:
                    await cancelled_put(s, key, new, proxy.stalled.wait)
                    await asyncio.sleep(0.05)  # the reset reaches the proxy, which drops the rest
                    proxy.resume()

                await trial(direct, key, run, lambda: asyncio.sleep(1.0), tally)
        rows.append(tally.row(backend, "network stalls mid-request"))

        # random moment, healthy server
        tally = Tally()
        async with make() as s:
            started = time.perf_counter()
            for i in range(5):
                await s.put(f"warm-{i}", b"x" * 1024)
            typical = (time.perf_counter() - started) / 5
            for i in range(trials):
                key, delay = f"random-{i}", random.uniform(0, 2 * typical)

                async def run(
                    new: bytes, s: StorageBase = s, key: str = key, d: float = delay
                ) -> None:
                    await cancelled_put(s, key, new, lambda: asyncio.sleep(d))

                await trial(direct, key, run, lambda: asyncio.sleep(1.0), tally)
        situation = f"random moment, healthy server (put {typical * 1e3:.0f} ms)"
        rows.append(tally.row(backend, situation))
    return rows


async def main(trials: int, grace: float, only: str | None) -> None:
    rows: list[str] = []
    if only in (None, "s3"):
        with s3_server() as url:
            create_bucket(url, "ckk-late")
            parts = urlsplit(url)
            assert parts.hostname is not None and parts.port is not None

            def make_s3(**kw: Any) -> StorageBase:
                return S3Storage(
                    "ckk-late", "late", **storage_options(url), cancel_grace=grace, **kw
                )

            rows += await measure("S3 (moto)", make_s3, (parts.hostname, parts.port), trials, grace)
    if only in (None, "azure"):
        with azurite_server() as conn:
            port = int(conn.split("BlobEndpoint=http://127.0.0.1:")[1].split("/")[0])
            async with AzureBlobStorage("ckk-late", connection_string=conn, create=True) as az:
                await az.put("made", b"")

            def make_az(**kw: Any) -> StorageBase:
                return AzureBlobStorage(
                    "ckk-late", "late", connection_string=conn, cancel_grace=grace, **kw
                )

            rows += await measure("Azure (Azurite)", make_az, ("127.0.0.1", port), trials, grace)
    print(f"cancel_grace={grace:g} s, {trials} trials per row\n")
    print(
        "| backend | situation | took effect although cancelled | of which visible only "
        "after CancelledError returned (late landing) | never took effect |"
    )
    print("| --- | --- | --- | --- | --- |")
    for row in rows:
        print(row)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--grace", type=float, default=0.25)
    parser.add_argument("--only", choices=("s3", "azure"))
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    asyncio.run(main(args.trials, args.grace, args.only))
