"""The file adapter against the whole conformance suite, through the subclassing way in."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from checkpointkit.adapters.file import FileStorage
from checkpointkit.conformance import (
    FileOutage,
    StorageConformance,
    StorageFixtures,
    Target,
    new_location,
)

MODEL_BUDGET = 3.0
"""Seconds of the model group per run here (the default, 12, is for users' runs)."""


class FileFixtures(StorageFixtures):
    @pytest.fixture
    def storage_factory(self, tmp_path: Path) -> Target:
        async def file_storage(*, location: str | None = None) -> AsyncIterator[FileStorage]:
            root = tmp_path / (location or new_location())
            async with FileStorage(root) as storage:
                yield storage
            shutil.rmtree(root, ignore_errors=True)

        # Each root is a directory of the test's own: the backend-down tests may move it away.
        # The spec makes the same root of a location in the child of the durability test.
        return Target(
            file_storage,
            name="file",
            model_budget=MODEL_BUDGET,
            outage=FileOutage(),
            spec=f"{tmp_path.as_uri()}/{{location}}",
        )


class TestFileConformance(FileFixtures, StorageConformance):
    pass
