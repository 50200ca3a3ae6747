"""A worker process for the file adapter's multi-process tests (run as a script).

Usage: ``python _race_worker.py ROOT WORKER_ID create N KEY`` or ``... cas TASKS TIMES KEY``.
It prints ``ready``, waits for a line on stdin (so that every worker starts at
once), runs, and prints one JSON line with its results.
"""

from __future__ import annotations

import asyncio
import json
import sys

from checkpointkit import IfMatch, PreconditionFailed
from checkpointkit.adapters.file import FileStorage


async def create_race(s: FileStorage, wid: str, n: int, key: str) -> dict[str, object]:
    results = await asyncio.gather(
        *(s.put(key, f"{wid}-{i}".encode(), mode="create") for i in range(n)),
        return_exceptions=True,
    )
    wins = [[f"{wid}-{i}", r] for i, r in enumerate(results) if isinstance(r, str)]
    errors = [repr(r) for r in results if isinstance(r, BaseException)]
    losses = sum(isinstance(r, PreconditionFailed) for r in results)
    return {"wins": wins, "losses": losses, "other": len(errors) - losses, "errors": errors[:3]}


async def cas_counter(s: FileStorage, tasks: int, times: int, key: str) -> dict[str, object]:
    conflicts = 0

    async def bump() -> None:
        nonlocal conflicts
        for _ in range(times):
            while True:
                cur = await s.get(key)
                try:
                    await s.put(key, b"%d" % (int(cur.data) + 1), mode=IfMatch(cur.version))
                    break
                except PreconditionFailed:
                    conflicts += 1

    await asyncio.gather(*(bump() for _ in range(tasks)))
    return {"conflicts": conflicts}


async def main(argv: list[str]) -> None:
    root, wid, what, *nums, key = argv
    async with FileStorage(root) as s:
        print("ready", flush=True)
        sys.stdin.readline()
        if what == "create":
            result = await create_race(s, wid, int(nums[0]), key)
        else:
            result = await cas_counter(s, int(nums[0]), int(nums[1]), key)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
