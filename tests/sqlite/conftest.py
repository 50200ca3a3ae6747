"""Fixtures of the SQLite adapter's tests: a fresh database per test, closed afterwards."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from checkpointkit.adapters.sqlite import SQLiteStorage


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[SQLiteStorage]:
    """A SQLite storage on a fresh database file."""
    async with SQLiteStorage(tmp_path / "ck.db") as s:
        yield s
