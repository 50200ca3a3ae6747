"""The SQLite adapter against checkpointkit's whole conformance suite."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from checkpointkit.conformance import (
    SQLiteOutage,
    StorageConformance,
    StorageFixtures,
    Target,
    new_location,
)
from checkpointkit.conformance.stalls import HeldLock
from checkpointkit_sqlite import SQLiteStorage


class SQLiteFixtures(StorageFixtures):
    @pytest.fixture
    def storage_factory(self, tmp_path: Path) -> Target:
        async def sqlite_storage(*, location: str | None = None) -> AsyncIterator[SQLiteStorage]:
            path = tmp_path / f"{location or new_location()}.db"
            # A short busy timeout: a write that finds the database locked by another
            # connection gives up (StorageUnavailable) after 1 s, not 5.
            async with SQLiteStorage(path, busy_timeout=1.0) as storage:
                yield storage
            _remove(path)

        # The outage: another connection holds the write lock past that busy timeout.
        return Target(sqlite_storage, name="aiosqlite", outage=SQLiteOutage())

    @pytest.fixture
    def backend_stall(self, tmp_path: Path, storage_location: str) -> HeldLock:
        """A write transaction held on a second connection: puts wait for its lock."""
        connections: list[sqlite3.Connection] = []

        def begin() -> None:
            path = tmp_path / f"{storage_location}.db"
            connections.append(sqlite3.connect(path, isolation_level=None, check_same_thread=False))
            connections[0].execute("BEGIN IMMEDIATE")

        def end() -> None:
            connections[0].execute("ROLLBACK")
            connections[0].close()

        return HeldLock(begin, end, name="a write transaction on a second connection")


def _remove(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        db.with_name(db.name + suffix).unlink(missing_ok=True)


class TestSQLiteConformance(SQLiteFixtures, StorageConformance):
    pass
