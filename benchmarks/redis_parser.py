"""The Redis adapter's client CPU with hiredis's reply parser and with redis-py's own.

Run: ``.venv/bin/python benchmarks/redis_parser.py [--rounds 5] [--ops 500]``

redis-py reads replies with hiredis (a C parser) when the ``hiredis`` package is installed
(the ``redis`` extra installs it), and with its own pure-Python parser otherwise. One
standalone ``valkey-server`` and one 3-node Valkey Cluster on loopback ports; the client's
CPU per call (``time.process_time``: this process only, not the servers'), for each parser:

- floor: ``PING`` through the storage's own client (the cheapest round trip there is);
- ``RedisStorage.put`` of 1 KiB (a new key each time), ``get`` of 1 KiB, ``list`` of a
  page of 100 keys, on the standalone server;
- the same ``put`` on the cluster;
- a cluster storage opened and its first ``get`` (topology and command table loaded):
  what a test, or a short-lived worker, pays per storage.

``--track-origins`` runs it all with coroutine origins tracked as the conformance suite's
hygiene checks track them (``checkpointkit.conformance.hygiene.COROUTINE_ORIGIN_DEPTH`` frames):
each coroutine made then records where it was made, and redis-py's own parser makes
several per reply.

Interleaved round by round; figures are medians over the rounds of the mean CPU per call,
with the Python parser's CPU over hiredis's beside each.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from checkpointkit.adapters.redis import RedisStorage
from checkpointkit.conformance.hygiene import COROUTINE_ORIGIN_DEPTH
from checkpointkit.conformance.servers.redis import valkey_cluster, valkey_standalone
from redis._parsers import _AsyncHiredisParser, _AsyncRESP2Parser

PARSERS: dict[str, type[Any]] = {"hiredis": _AsyncHiredisParser, "python": _AsyncRESP2Parser}


def _with_parser(storage: RedisStorage, parser: type[Any]) -> RedisStorage:
    """Make every connection the storage's client opens from now on read with ``parser``."""
    client: Any = storage._client
    if storage.cluster:
        client.nodes_manager.connection_kwargs["parser_class"] = parser
    else:
        client.connection_pool.connection_kwargs["parser_class"] = parser
    return storage


async def _per_call(n: int, call: Callable[[int], Awaitable[object]]) -> float:
    start = time.process_time()
    for i in range(n):
        await call(i)
    return (time.process_time() - start) / n


async def _round(
    url: str, cluster_url: str, parser: type[Any], r: int, ops: int
) -> dict[str, float]:
    value = b"v" * 1024
    figures: dict[str, float] = {}
    async with _with_parser(RedisStorage.from_url(url, prefix=f"b{r}"), parser) as s:
        client: Any = s._client
        await s.put("page/warm", value)
        for i in range(100):
            await s.put(f"page/{i:03d}", b"x")
        figures["floor: PING"] = await _per_call(ops, lambda _i: client.ping())
        figures["put 1 KiB"] = await _per_call(ops, lambda i: s.put(f"k/{i:05d}", value))
        figures["get 1 KiB"] = await _per_call(ops, lambda i: s.get(f"k/{i:05d}"))

        async def listed(_i: int) -> list[str]:
            return [key async for key in s.list("page/", limit=100)]

        figures["list, 100 keys"] = await _per_call(max(ops // 10, 1), listed)
    async with _with_parser(RedisStorage.from_url(cluster_url, prefix=f"b{r}"), parser) as c:
        await c.put("warm", value)
        figures["put 1 KiB, cluster"] = await _per_call(ops, lambda i: c.put(f"k/{i:05d}", value))

    async def open_and_get(_i: int) -> None:
        async with _with_parser(RedisStorage.from_url(cluster_url, prefix=f"b{r}"), parser) as o:
            await o.get("warm")

    figures["cluster open + first get"] = await _per_call(max(ops // 50, 1), open_and_get)
    return figures


async def main(rounds: int, ops: int) -> None:
    with valkey_standalone() as url, valkey_cluster() as cluster_url:
        runs: dict[str, dict[str, list[float]]] = {name: {} for name in PARSERS}
        for r in range(rounds):
            order = list(PARSERS) if r % 2 == 0 else list(reversed(PARSERS))
            for name in order:
                got = await _round(url, cluster_url, PARSERS[name], r * 2 + order.index(name), ops)
                for label, cpu in got.items():
                    runs[name].setdefault(label, []).append(cpu)
    tracked = sys.get_coroutine_origin_tracking_depth()
    print(
        f"{rounds} rounds; client CPU per call (this process), median of the rounds; "
        f"coroutine origins tracked to {tracked} frames"
    )
    print(f"{'call':<28} {'hiredis':>10} {'python':>10}  python / hiredis")
    for label in runs["hiredis"]:
        fast = statistics.median(runs["hiredis"][label])
        slow = statistics.median(runs["python"][label])
        print(f"{label:<28} {fast * 1e6:8.0f} µs {slow * 1e6:8.0f} µs  {slow / fast:5.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ops", type=int, default=500)
    parser.add_argument("--track-origins", action="store_true")
    args = parser.parse_args()
    if args.track_origins:
        sys.set_coroutine_origin_tracking_depth(COROUTINE_ORIGIN_DEPTH)
    asyncio.run(main(args.rounds, args.ops))
