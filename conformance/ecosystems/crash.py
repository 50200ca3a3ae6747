"""The subprocess of the SIGKILL test: ``python -m checkpointkit.conformance.ecosystems.crash``.

Arguments: the ecosystem, the target's ``MODULE:ATTR`` and a location. It
opens the target at the location and writes checkpoints in a loop (on thread
or workflow ``crash``), printing ``ID N`` after each call returned, until it
is killed.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

__all__ = ["main"]


async def _write(ecosystem: str, spec: str, location: str) -> None:
    from .target import resolve_ecosystem_target

    target = resolve_ecosystem_target(f"{ecosystem}:{spec}")
    async with target.open(location=location) as instance:
        n = 0
        while True:
            n += 1
            checkpoint_id = await _one(ecosystem, instance, n)
            sys.stdout.write(f"{checkpoint_id} {n}\n")
            sys.stdout.flush()


async def _one(ecosystem: str, instance: Any, n: int) -> str:
    if ecosystem == "langgraph":
        from .langgraph import put

        return await put(instance, "crash", {"n": n, "pad": "x" * 4096}, step=n)
    from .agent_framework import save_one

    return await save_one(instance, "crash", {"n": n, "pad": "x" * 4096})


def main(argv: list[str] | None = None) -> None:
    """Write checkpoints until killed."""
    ecosystem, spec, location = (sys.argv[1:] if argv is None else argv)[:3]
    asyncio.run(_write(ecosystem, spec, location))


if __name__ == "__main__":
    main()
