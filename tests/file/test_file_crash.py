"""Crash safety: a writer killed with SIGKILL at random moments never leaves a torn value."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import signal
import struct
import sys
import time
from pathlib import Path

import pytest
from checkpointkit.adapters.file import FileStorage

WRITER = Path(__file__).with_name("_crash_writer.py")
KILLS = 50


def check_value(key: str, value: bytes) -> int:
    """The seq of a whole value (the same check as the writer's)."""
    (length,) = struct.unpack(">Q", value[:8])
    payload = value[40:]
    assert len(payload) == length, f"{key}: torn value, length {len(payload)} != {length}"
    assert hashlib.sha256(payload).digest() == value[8:40], f"{key}: torn value, bad checksum"
    header = json.loads(payload.split(b"\n", 1)[0])
    assert header["key"] == key, f"{key} holds the value of {header['key']}"
    return int(header["seq"])


def check_sidecars(root: Path) -> None:
    """Every shortened name has its sidecar, whole: the invariant that listing relies on."""
    for path in root.rglob("*!*"):
        digest = path.name.rstrip("@").rsplit("!", 1)[1]
        sidecar = path.parent / f"#{digest}.name"
        assert sidecar.is_file(), f"{path} has no sidecar"
        assert hashlib.sha256(sidecar.read_bytes()).hexdigest()[:32] == digest, sidecar


def orphan_sidecars(root: Path) -> list[Path]:
    """Sidecars that no shortened name in their directory needs."""
    return [p for p in root.rglob("#*.name") if not any(p.parent.glob(f"*!{p.name[1:33]}*"))]


def apply(state: dict[str, int], op: str, key: str, seq: int) -> dict[str, int]:
    after = dict(state)
    if op in ("create", "overwrite", "ifmatch"):
        after[key] = seq
    elif op in ("delete", "delete_ifmatch"):
        after.pop(key, None)
    return after


@pytest.mark.slow
async def test_sigkill_never_leaves_a_torn_or_lost_value(tmp_path: Path) -> None:
    root = tmp_path / "root"
    rng = random.Random(2024)
    model: dict[str, int] = {}  # key -> seq of its value, as the storage should hold it
    in_flight_kills = 0
    debris_seen = 0
    started = time.monotonic()
    async with FileStorage(root) as reader:
        for round_ in range(KILLS):
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                str(WRITER),
                str(root),
                str(round_ * 1_000_000),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            assert proc.stdout is not None
            ready = await proc.stdout.readline()
            if ready != b"ready\n":
                _, err = await proc.communicate()
                pytest.fail(f"the writer did not start: {err.decode()}")
            await asyncio.sleep(rng.uniform(0.0, 0.06))  # a random moment to kill it
            proc.kill()  # SIGKILL
            out, err = await asyncio.wait_for(proc.communicate(), 30)
            assert proc.returncode == -signal.SIGKILL, err.decode()

            # What the writer confirmed, and the one operation it may have had in flight.
            pending: tuple[str, str, int] | None = None
            for line in out.decode().splitlines(keepends=True):
                if not line.endswith("\n"):
                    break
                parts = line.split()
                if parts[0] == "I":
                    pending = (parts[2], parts[3], int(parts[1]))
                else:
                    assert pending is not None
                    assert int(parts[1]) == pending[2]
                    model = apply(model, *pending)
                    pending = None
            allowed = [model] if pending is None else [model, apply(model, *pending)]
            in_flight_kills += pending is not None

            check_sidecars(root)
            keys = [k async for k in reader.list()]
            assert all("#" not in k for k in keys), keys
            actual = {k: check_value(k, (await reader.get(k)).data) for k in keys}
            assert actual in allowed, (round_, pending, actual, allowed)
            model = actual
            debris_seen = len(list(root.rglob("#*.tmp")))

        debris = len(list(root.rglob("#*.tmp")))
        sidecars = len(list(root.rglob("#*.name")))
        removed = await reader.sweep_temp_files(older_than=0)
        assert not list(root.rglob("#*.tmp"))
        assert not orphan_sidecars(root)
        assert removed == debris + sidecars - len(list(root.rglob("#*.name")))
        check_sidecars(root)
        assert [k async for k in reader.list()] == sorted(model)
        for k in [k async for k in reader.list()]:
            check_value(k, (await reader.get(k)).data)
    assert in_flight_kills >= KILLS // 2, "the writer was rarely killed mid-operation"
    assert time.monotonic() - started < 60
    print(f"kills={KILLS} mid-operation={in_flight_kills} temp files left={debris_seen}")
