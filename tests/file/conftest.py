"""Fixtures of the file adapter's tests: a fresh storage per test, closed afterwards."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from checkpointkit.adapters.file import FileStorage
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.adapters.sqlite import SQLiteStorage
from checkpointkit.storage import StorageBase


@pytest.fixture(params=["memory", "file", "sqlite"])
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StorageBase]:
    """The storage promises hold for the reference adapter and the embedded ones alike."""
    s: StorageBase
    if request.param == "memory":
        s = MemoryStorage()
    elif request.param == "file":
        s = FileStorage(tmp_path / "root")
    else:
        s = SQLiteStorage(tmp_path / "root.db")
    async with s:
        yield s


@pytest.fixture
async def fs(tmp_path: Path) -> AsyncIterator[FileStorage]:
    """A file storage on a fresh root."""
    async with FileStorage(tmp_path / "root") as s:
        yield s
