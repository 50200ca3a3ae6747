"""The SQLite adapter against checkpointkit's whole conformance suite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from checkpointkit.conformance import StorageConformance, StorageFixtures, Target, new_location
from checkpointkit_sqlite import SQLiteStorage


class SQLiteFixtures(StorageFixtures):
    @pytest.fixture
    def storage_factory(self, tmp_path: Path) -> Target:
        async def sqlite_storage(*, location: str | None = None) -> AsyncIterator[SQLiteStorage]:
            path = tmp_path / f"{location or new_location()}.db"
            async with SQLiteStorage(path) as storage:
                yield storage
            _remove(path)

        return Target(sqlite_storage, name="sqlite")


def _remove(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        db.with_name(db.name + suffix).unlink(missing_ok=True)


class TestSQLiteConformance(SQLiteFixtures, StorageConformance):
    pass
