"""Opening an S3 storage's client: a botocore data loader of its own beside the shared one.

Run: ``.venv/bin/python benchmarks/s3_client_open.py [--rounds 9] [--opens 10]``

No request is sent: each open builds an aiobotocore S3 client (for a loopback endpoint
that nothing answers) and closes it, which is all CPU. Interleaved round by round, each
``--opens`` times:

- floor: a client from a botocore session whose data loader has every file it reads
  already parsed (the same session each time: the cheapest client there is);
- own loader: a new session with a data loader of its own, as every ``S3Storage`` had
  before: it reads and parses the S3 service model again;
- ``S3Storage``: a new storage's client as the adapter opens it (``_botocore_session``: a
  new session that shares the process's loader), then ``aclose()``.

Figures are medians over the rounds of the mean time per open; the ratio is each over the
floor's.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from aiobotocore.session import AioSession
from checkpointkit.adapters.s3 import S3Storage

ENDPOINT = "http://127.0.0.1:1"
KEYS = {"aws_access_key_id": "AKIABENCH", "aws_secret_access_key": "bench-secret"}


async def _client_of(session: AioSession) -> None:
    async with session.create_client("s3", region_name="us-east-1", endpoint_url=ENDPOINT, **KEYS):
        pass


async def _storage() -> None:
    storage = S3Storage(
        "bench",
        endpoint_url=ENDPOINT,
        access_key_id=KEYS["aws_access_key_id"],
        secret_access_key=KEYS["aws_secret_access_key"],
    )
    try:
        await storage._open()  # the client, as a first call opens it (no request)
    finally:
        await storage.aclose()


async def bench(rounds: int, opens: int) -> dict[str, float]:
    warm = AioSession()
    await _client_of(warm)  # its loader has now parsed every file a client reads
    ops: dict[str, Callable[[], Awaitable[None]]] = {
        "floor (a warm session)": lambda: _client_of(warm),
        "own loader (before)": lambda: _client_of(AioSession()),
        "S3Storage (shared loader)": _storage,
    }
    await _storage()  # the process's shared loader, as after a first storage
    times: dict[str, list[float]] = {name: [] for name in ops}
    for _ in range(rounds):
        for name, op in ops.items():
            start = time.perf_counter()
            for _ in range(opens):
                await op()
            times[name].append((time.perf_counter() - start) / opens)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--opens", type=int, default=10)
    args = parser.parse_args()
    found = asyncio.run(bench(args.rounds, args.opens))
    floor = found["floor (a warm session)"]
    print(f"{'opening an S3 client (no request)':<34}{'per open':>12}{'/ floor':>10}")
    for name, seconds in found.items():
        print(f"{name:<34}{seconds * 1e3:>9.1f} ms{seconds / floor:>9.2f}x")


if __name__ == "__main__":
    main()
