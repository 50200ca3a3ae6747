"""A checkpoint writer that the crash test kills with SIGKILL (run as a script).

Usage: ``python _crash_writer.py ROOT FIRST_SEQ``. It reads the current state,
prints ``ready``, then loops forever over random operations on a few keys,
printing ``I <seq> <op> <key>`` before and ``A <seq>`` after each one. A value
carries its length and SHA-256 before a JSON header naming its key and seq,
so a reader can tell a whole value from a torn one.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import struct
import sys

from checkpointkit import IfMatch, NotFound, PreconditionFailed
from checkpointkit.adapters.file import FileStorage

LONG = "Long" * 60  # 480 bytes encoded: a shortened name, with a sidecar
KEYS = [
    "ck/k0",
    "ck/k1",
    "ck/sub/k2",
    "ck/sub/k3",
    "ck/sub/deep/k4",
    "top",
    f"ck/{LONG}",
    f"ck/{LONG}/k5",
    f"{LONG}/{LONG}",
]


def make_value(key: str, seq: int, rng: random.Random) -> bytes:
    header = json.dumps({"key": key, "seq": seq}).encode() + b"\n"
    payload = header + rng.randbytes(rng.choice([0, 10, 1000, 50_000, 200_000]))
    return struct.pack(">Q", len(payload)) + hashlib.sha256(payload).digest() + payload


def check_value(key: str, value: bytes) -> int:
    """Return the seq of a whole value; raise AssertionError for a torn or foreign one."""
    (length,) = struct.unpack(">Q", value[:8])
    payload = value[40:]
    assert len(payload) == length, f"{key}: length {len(payload)} != {length}"
    assert hashlib.sha256(payload).digest() == value[8:40], f"{key}: checksum mismatch"
    header = json.loads(payload.split(b"\n", 1)[0])
    assert header["key"] == key, f"{key}: holds the value of {header['key']}"
    return int(header["seq"])


async def main(root: str, seq: int) -> None:
    rng = random.Random(seq)
    async with FileStorage(root) as s:
        versions: dict[str, str | None] = {}
        for key in KEYS:
            try:
                versions[key] = (await s.get(key)).version
            except NotFound:
                versions[key] = None
        print("ready", flush=True)
        while True:
            seq += 1
            key = rng.choice(KEYS)
            version = versions[key]
            if version is None:
                op = rng.choice(["create", "overwrite"])
            else:
                op = rng.choice(["overwrite", "ifmatch", "ifmatch", "delete", "delete_ifmatch"])
                op = rng.choice([op, op, op, "create_conflict"])
            print(f"I {seq} {op} {key}", flush=True)
            value = make_value(key, seq, rng)
            if op in ("create", "overwrite"):
                versions[key] = await s.put(key, value, mode=op)  # type: ignore[arg-type]
            elif op == "ifmatch":
                assert version is not None
                versions[key] = await s.put(key, value, mode=IfMatch(version))
            elif op == "create_conflict":
                try:
                    await s.put(key, value, mode="create")
                except PreconditionFailed:
                    pass
                else:
                    raise AssertionError(f"create-only put of existing {key} succeeded")
            else:
                existed = await s.delete(key, if_match=version if op == "delete_ifmatch" else None)
                assert existed, f"{key} was missing"
                versions[key] = None
            print(f"A {seq}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
