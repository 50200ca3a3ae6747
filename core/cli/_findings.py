"""What the integrations' checks share: findings and bounded concurrency."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from ..errors import CheckpointCorrupted, DecryptionError
from ..verify import Finding, FindingKind, Progress

__all__ = ["CONCURRENCY", "Ticker", "damage_of", "finding", "gather", "unknown_key"]

CONCURRENCY = 16
"""Records read at once."""

T = TypeVar("T")


async def gather(items: Iterable[T], work: Callable[[T], Awaitable[Any]]) -> list[Any]:
    """``work`` on every item, `CONCURRENCY` at a time; results in order; the first error
    is raised as it is (the others are cancelled and awaited)."""
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(item: T) -> Any:
        async with gate:
            return await work(item)

    tasks = [asyncio.ensure_future(one(item)) for item in items]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def finding(key: str, kind: FindingKind, severity: Any, message: str) -> Finding:
    """A `Finding` about the record at ``key``."""
    return Finding(key=key, kind=kind, severity=severity, message=message)


def unknown_key(key: str, what: str) -> Finding:
    """A warning: ``key`` lies where a layout's keys are, but is not ``what``."""
    return finding(key, "unknown", "warning", f"the key {key!r} is not {what}")


def damage_of(key: str, exc: Exception) -> Finding:
    """The finding of a record that does not open or decode (``exc`` says why)."""
    kind: FindingKind
    if isinstance(exc, DecryptionError):
        kind = "plaintext" if "not encrypted" in str(exc) else "undecryptable"
    elif isinstance(exc, CheckpointCorrupted):
        kind = "misplaced" if "does not belong" in str(exc) else "corrupted"
    elif isinstance(exc, ValueError) and "codec tag" in str(exc):
        kind = "mismatch"
    else:
        kind = "undecodable"
    return finding(key, kind, "damage", str(exc))


class Ticker:
    """Tells ``verify``'s progress callback after each key checked.

    Args:
        total: Keys to check.
        findings: The findings so far (their number is reported as problems).
        progress: The callback, or None.
    """

    def __init__(
        self, total: int, findings: list[Finding], progress: Callable[[Progress], None] | None
    ) -> None:
        self.total = total
        self.done = 0
        self.findings = findings
        self.progress = progress

    def tick(self) -> None:
        """One key checked."""
        self.done += 1
        if self.progress is not None:
            self.progress(Progress(self.done, self.total, problems=len(self.findings)))

    def each(self, work: Callable[[T], Awaitable[None]]) -> Callable[[T], Awaitable[None]]:
        """``work``, then a tick (also when it fails)."""

        async def run(item: T) -> None:
            try:
                await work(item)
            finally:
                self.tick()

        return run
