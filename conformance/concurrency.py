"""Group ``concurrency``: many writers, races with exactly one winner, atomic reads.

Request counts scale with ``Target.scale`` (a local moto server answers about
100 requests a second: give it ``scale=0.2``).
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from ..errors import NotFound, PreconditionFailed
from ..storage import IfMatch, Storage
from .checks import describe, expect, expect_keys, expect_value, fail, get_or_none
from .clauses import checks
from .fixtures import StorageFixtures, scaled
from .semantics import _need

__all__ = ["ConcurrencyTests"]


class ConcurrencyTests(StorageFixtures):
    """Concurrent writers and readers on one storage."""

    conformance_group: ClassVar[str | None] = "concurrency"

    @checks("put.round-trip")
    async def test_concurrent_puts_to_distinct_keys_are_all_readable(
        self, storage: Storage, scale: float
    ) -> None:
        n = scaled(scale, 100)
        keys = [f"many/{i:04d}" for i in range(n)]
        await asyncio.gather(*(storage.put(k, k.encode()) for k in keys))
        results = await asyncio.gather(*(get_or_none(storage, k) for k in keys))
        for key, got in zip(keys, results, strict=True):
            if got is None or got.data != key.encode():
                fail(
                    f"{n} concurrent puts to distinct keys must all be readable",
                    key=key,
                    expected=f"it to hold {describe(key.encode())}",
                    observed=f"it holds {describe(None if got is None else got.data)}",
                )
        await expect_keys(
            storage, keys, prefix="many/", promise=f"{n} concurrent puts must all be listed"
        )

    @checks("put.conditional.one-winner", "put.create.existing")
    async def test_create_only_race_has_one_winner(
        self, storage: Storage, scale: float, supports_conditional_put: bool
    ) -> None:
        _need(supports_conditional_put, "conditional_put")
        n = scaled(scale, 20)

        async def create(i: int) -> str | None:
            try:
                return await storage.put("race", f"writer {i}".encode(), mode="create")
            except PreconditionFailed:
                return None

        outcomes = await asyncio.gather(*(create(i) for i in range(n)))
        winners = [i for i, v in enumerate(outcomes) if v is not None]
        expect(
            len(winners) == 1,
            f"{n} concurrent create-only puts of one key must have exactly one winner",
            key="race",
            expected="1 writer to succeed and the others to get PreconditionFailed",
            observed=f"{len(winners)} succeeded (writers {winners[:10]})",
        )
        w = winners[0]
        await expect_value(
            storage,
            "race",
            f"writer {w}".encode(),
            version=outcomes[w],
            promise="the winner's value must be stored",
        )

    @checks("put.conditional.one-winner", "put.if-match.stale")
    async def test_cas_race_has_one_winner(
        self, storage: Storage, scale: float, supports_conditional_put: bool
    ) -> None:
        _need(supports_conditional_put, "conditional_put")
        n = scaled(scale, 20)
        base = await storage.put("cas", b"base")

        async def swap(i: int) -> str | None:
            try:
                return await storage.put("cas", f"writer {i}".encode(), mode=IfMatch(base))
            except PreconditionFailed:
                return None

        outcomes = await asyncio.gather(*(swap(i) for i in range(n)))
        winners = [i for i, v in enumerate(outcomes) if v is not None]
        expect(
            len(winners) == 1,
            f"{n} concurrent if-match puts on one version must have exactly one winner",
            key="cas",
            expected="1 writer to succeed",
            observed=f"{len(winners)} succeeded (writers {winners[:10]})",
        )
        w = winners[0]
        await expect_value(
            storage,
            "cas",
            f"writer {w}".encode(),
            version=outcomes[w],
            promise="the compare-and-swap winner's value must be stored",
        )

    @checks("put.conditional.one-winner")
    async def test_cas_counter_ends_exact_under_concurrent_increments(
        self, storage: Storage, scale: float, supports_conditional_put: bool
    ) -> None:
        _need(supports_conditional_put, "conditional_put")
        workers, each = 10, scaled(scale, 3, minimum=1)
        await storage.put("counter", b"0")
        attempts = 0

        async def worker() -> None:
            nonlocal attempts
            for _ in range(each):
                for _ in range(workers * 50):
                    attempts += 1
                    got = await storage.get("counter")
                    value = int(got.data)
                    try:
                        await storage.put(
                            "counter", str(value + 1).encode(), mode=IfMatch(got.version)
                        )
                        break
                    except PreconditionFailed:
                        await asyncio.sleep(0)
                else:
                    raise AssertionError("a counter increment never succeeded")

        await asyncio.gather(*(worker() for _ in range(workers)))
        total = workers * each
        got = await storage.get("counter")
        expect(
            got.data == str(total).encode(),
            f"a compare-and-swap counter incremented by {workers} concurrent workers "
            "must end exact",
            key="counter",
            expected=f"{total} ({workers} workers x {each} increments)",
            observed=f"it ended at {got.data.decode(errors='replace')} "
            f"after {attempts} attempts (lost updates)",
        )

    @checks("put.atomic")
    async def test_concurrent_reader_sees_only_whole_values(
        self, storage: Storage, scale: float
    ) -> None:
        size = 256 * 1024
        values = [bytes([65 + i]) * size for i in range(3)]
        await storage.put("atomic", values[0])
        writes = scaled(scale, 12)
        done = asyncio.Event()
        reads = 0

        async def writer() -> None:
            try:
                for i in range(writes):
                    await storage.put("atomic", values[(i + 1) % len(values)])
            finally:
                done.set()

        async def reader() -> None:
            nonlocal reads
            while not done.is_set() or reads == 0:
                try:
                    got = await storage.get("atomic")
                except NotFound:
                    fail(
                        "a put must be atomic: a concurrent reader sees the old or the new value",
                        key="atomic",
                        expected="every read to find a whole value",
                        observed=f"read {reads + 1} found the key missing during an overwrite",
                    )
                reads += 1
                if got.data not in values:
                    fail(
                        "a put must be atomic: a concurrent reader sees the old or the new "
                        "value, never a part",
                        key="atomic",
                        expected=f"one of the {len(values)} whole values of {size} bytes",
                        observed=f"read {reads} got {describe(got.data, reference=values)}",
                    )
                await asyncio.sleep(0)

        await asyncio.gather(writer(), reader(), reader())

    @checks("put.atomic", "put.overwrite")
    async def test_concurrent_overwrites_leave_one_whole_value(
        self, storage: Storage, scale: float
    ) -> None:
        n = scaled(scale, 10)
        values = [f"{i:03d}".encode() * 1000 for i in range(n)]
        versions = await asyncio.gather(*(storage.put("last", v) for v in values))
        got = await storage.get("last")
        expect(
            got.data in values,
            f"{n} concurrent overwrites must leave one whole value",
            key="last",
            expected="one of the written values",
            observed=f"it holds {describe(got.data, reference=values)}",
        )
        i = values.index(got.data)
        expect(
            got.version == versions[i],
            "the stored version must be the one returned to the writer of the stored value",
            key="last",
            expected=f"version {versions[i]!r}",
            observed=f"get reports {got.version!r}",
        )
