"""Run a test's concurrent calls at once; the first to fail ends the others.

``asyncio.gather`` raises the first failure and leaves the other calls running: a
reader that finds a torn value fails the test while its writer goes on writing, and
the hygiene check after the test then reports the suite's own writer, and the storage
call it is in, as left behind by the storage. `together` cancels the others and waits
for them (each up to `TOGETHER_FINISH` seconds) before it raises.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

__all__ = ["TOGETHER_FINISH", "together"]

TOGETHER_FINISH = 30.0
"""How long `together` waits for the calls it cancelled after one failed (a storage that
ignores the cancellation is the cancellation group's to report, not this test's)."""


async def together(*calls: Awaitable[Any]) -> list[Any]:
    """The results of ``calls``, run at once, in their order. When one raises (or the
    caller is cancelled), the others are cancelled and awaited, then the error is raised."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        running = [task for task in tasks if not task.done()]
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=TOGETHER_FINISH)
        for task in tasks:  # their errors are the first failure's consequences
            if task.done() and not task.cancelled():
                task.exception()
