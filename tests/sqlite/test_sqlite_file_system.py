"""SQLite on a file system that is full or read-only (issue 20, item 7).

Both on a real file system: a small tmpfs mounted for the test (this needs the right to
mount, which the project's CI machine gives its root user; elsewhere the tests skip and
say why). A full disk fails the write with `StorageUnavailable` that chains SQLite's
error, loses nothing already stored and lets the next write succeed once there is room;
a database on a read-only file system opens for reading (``read_only=True``) and a
writer is refused with a message that says the file system is read-only.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from checkpointkit import ConfigurationError, StorageUnavailable
from checkpointkit.adapters.sqlite import SQLiteStorage


def _mount(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)


@contextlib.contextmanager
def small_file_system(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``where`` for the block (unmounted after it)."""
    where.mkdir()
    mounted = _mount("-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where))
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30)


async def test_a_full_disk_fails_the_write_with_its_cause_and_loses_nothing(
    tmp_path: Path,
) -> None:
    with small_file_system(tmp_path / "fs", "3m") as fs:
        stored: dict[str, bytes] = {}
        async with SQLiteStorage(fs / "store.db") as storage:
            failure: StorageUnavailable | None = None
            for i in range(64):  # 64 x 128 KiB: twice what the file system holds
                value = os.urandom(128 * 1024)
                try:
                    await storage.put(f"v/{i:03d}", value)
                except StorageUnavailable as exc:
                    failure = exc
                    break
                stored[f"v/{i:03d}"] = value
            assert failure is not None, "64 puts of 128 KiB fit in a 3 MiB file system"
            assert isinstance(failure.__cause__, sqlite3.Error), repr(failure.__cause__)
            assert "full" in str(failure), str(failure)
            assert stored, "not one put fitted"
            for key, value in stored.items():  # nothing acknowledged is lost
                assert (await storage.get(key)).data == value
            # room again: the same storage writes
            grown = _mount("-o", "remount,size=16m", str(fs))
            assert grown.returncode == 0, grown.stderr
            await storage.put("after", b"room again")
            assert (await storage.get("after")).data == b"room again"
        async with SQLiteStorage(fs / "store.db") as reopened:
            assert [k async for k in reopened.list("v/")] == sorted(stored)


async def test_a_database_on_a_read_only_file_system_opens_for_reading_only(
    tmp_path: Path,
) -> None:
    with small_file_system(tmp_path / "fs", "8m") as fs:
        path = fs / "store.db"
        async with SQLiteStorage(path) as writer:
            await writer.put("k", b"value")
        assert not (fs / "store.db-wal").exists() or (fs / "store.db-wal").stat().st_size == 0
        frozen = _mount("-o", "remount,ro", str(fs))
        assert frozen.returncode == 0, frozen.stderr
        async with SQLiteStorage(path, read_only=True) as reader:
            assert (await reader.get("k")).data == b"value"
            assert [k async for k in reader.list("")] == ["k"]
        with pytest.raises((ConfigurationError, StorageUnavailable)) as caught:
            async with SQLiteStorage(path) as storage:
                await storage.put("k", b"other")
        assert "read-only file system" in str(caught.value), str(caught.value)
