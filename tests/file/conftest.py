"""Fixtures of the file adapter's tests: a fresh storage per test, closed afterwards."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from checkpointkit.adapters.file import FileStorage
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.storage import StorageBase


@pytest.fixture(params=["memory", "file"])
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StorageBase]:
    """The storage promises hold for the reference adapter and the file adapter alike."""
    s: StorageBase
    s = MemoryStorage() if request.param == "memory" else FileStorage(tmp_path / "root")
    async with s:
        yield s


@pytest.fixture
async def fs(tmp_path: Path) -> AsyncIterator[FileStorage]:
    """A file storage on a fresh root."""
    async with FileStorage(tmp_path / "root") as s:
        yield s
