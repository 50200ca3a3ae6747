"""A worker process for the SQLite adapter's multi-process and crash tests (run as a script).

Usage:

- ``python _worker.py DB race WORKER_ID create N KEY`` or ``... race WORKER_ID cas TASKS TIMES
  KEY``: prints ``ready``, waits for a line on stdin (so that every worker starts at once),
  runs, and prints one JSON line with its results.
- ``python _worker.py DB crash FIRST_SEQ [WRITERS]``: reads the current state, prints
  ``ready``, then loops forever over random operations on a few keys, several at once (so
  that they share commits; ``WRITERS``, such as ``2``, runs only those writers of the four,
  for one process per writer), printing ``I <seq> <op> <key>`` before and ``A <seq>``
  after each one. A value carries its length and SHA-256 before a JSON header naming its
  key and seq.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import struct
import sys

from checkpointkit import IfMatch, NotFound, PreconditionFailed
from checkpointkit.adapters.sqlite import SQLiteStorage

KEYS = [f"ck/w{w}/k{i}" for w in range(4) for i in range(3)]


async def create_race(s: SQLiteStorage, wid: str, n: int, key: str) -> dict[str, object]:
    results = await asyncio.gather(
        *(s.put(key, f"{wid}-{i}".encode(), mode="create") for i in range(n)),
        return_exceptions=True,
    )
    wins = [[f"{wid}-{i}", r] for i, r in enumerate(results) if isinstance(r, str)]
    errors = [repr(r) for r in results if isinstance(r, BaseException)]
    losses = sum(isinstance(r, PreconditionFailed) for r in results)
    return {"wins": wins, "losses": losses, "other": len(errors) - losses, "errors": errors[:3]}


async def cas_counter(s: SQLiteStorage, tasks: int, times: int, key: str) -> dict[str, object]:
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


def make_value(key: str, seq: int, rng: random.Random) -> bytes:
    header = json.dumps({"key": key, "seq": seq}).encode() + b"\n"
    payload = header + rng.randbytes(rng.choice([0, 10, 1000, 50_000, 200_000]))
    return struct.pack(">Q", len(payload)) + hashlib.sha256(payload).digest() + payload


async def crash_loop(s: SQLiteStorage, seq: int, writers: list[int]) -> None:
    """Writers (of four), each on its own keys, so their operations share commits."""
    versions: dict[str, str | None] = {}
    for key in KEYS:
        try:
            versions[key] = (await s.get(key)).version
        except NotFound:
            versions[key] = None
    print("ready", flush=True)
    counter = [seq]

    async def writer(w: int) -> None:
        rng = random.Random(seq * 10 + w)
        mine = [k for k in KEYS if k.startswith(f"ck/w{w}/")]
        while True:
            counter[0] += 1
            n = counter[0]
            key = rng.choice(mine)
            version = versions[key]
            if version is None:
                op = rng.choice(["create", "overwrite"])
            else:
                op = rng.choice(["overwrite", "ifmatch", "ifmatch", "delete", "delete_ifmatch"])
            print(f"I {n} {op} {key}", flush=True)
            value = make_value(key, n, rng)
            if op in ("create", "overwrite"):
                versions[key] = await s.put(key, value, mode=op)  # type: ignore[arg-type]
            elif op == "ifmatch":
                assert version is not None
                versions[key] = await s.put(key, value, mode=IfMatch(version))
            else:
                existed = await s.delete(key, if_match=version if op == "delete_ifmatch" else None)
                assert existed, f"{key} was missing"
                versions[key] = None
            print(f"A {n}", flush=True)

    await asyncio.gather(*(writer(w) for w in writers))


async def main(argv: list[str]) -> None:
    db, mode, *rest = argv
    async with SQLiteStorage(db) as s:
        if mode == "crash":
            writers = [int(w) for w in rest[1].split(",")] if len(rest) > 1 else [0, 1, 2, 3]
            await crash_loop(s, int(rest[0]), writers)
            return
        wid, what, *nums, key = rest
        print("ready", flush=True)
        sys.stdin.readline()
        if what == "create":
            result = await create_race(s, wid, int(nums[0]), key)
        else:
            result = await cas_counter(s, int(nums[0]), int(nums[1]), key)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
