"""The SQLite adapter against the whole conformance suite, through the subclassing way in."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

import pytest
from checkpointkit.adapters.sqlite import SQLiteStorage
from checkpointkit.conformance import StorageConformance, StorageFixtures, Target, new_location

MODEL_BUDGET = 3.0
"""Seconds of the model group per run here (the default, 12, is for users' runs)."""


class SQLiteFixtures(StorageFixtures):
    @pytest.fixture
    def storage_factory(self, tmp_path: Path) -> Target:
        async def sqlite_storage(*, location: str | None = None) -> AsyncIterator[SQLiteStorage]:
            path = tmp_path / f"{location or new_location()}.db"
            async with SQLiteStorage(path) as storage:
                yield storage

        # The spec makes the same database file of a location in the child of the durability
        # test (sqlite:////absolute/path: SQLAlchemy's four slashes).
        spec = f"sqlite:///{quote(str(tmp_path))}/{{location}}.db"
        return Target(sqlite_storage, name="sqlite", model_budget=MODEL_BUDGET, spec=spec)


class TestSQLiteConformance(SQLiteFixtures, StorageConformance):
    pass
