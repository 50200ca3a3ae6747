"""The file adapter against the whole conformance suite, through the subclassing way in."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from checkpointkit.adapters.file import FileStorage
from checkpointkit.conformance import StorageConformance, StorageFixtures, Target, new_location
from checkpointkit.storage import Storage


class FileFixtures(StorageFixtures):
    @pytest.fixture
    def storage_factory(self, tmp_path: Path) -> Target:
        async def file_storage(*, location: str | None = None) -> AsyncIterator[FileStorage]:
            root = tmp_path / (location or new_location())
            async with FileStorage(root) as storage:
                yield storage
            shutil.rmtree(root, ignore_errors=True)

        return Target(file_storage, name="file")


class TestFileConformance(FileFixtures, StorageConformance):
    pass

    @pytest.mark.xfail(
        strict=True,
        reason="the file adapter percent-encodes a segment to 3 bytes per byte and caps file "
        "names at 255 bytes, so a valid key with a 200-byte segment of uppercase or non-ASCII "
        "characters is refused (keys are meant to be portable between adapters)",
    )
    async def test_200_byte_segment_keys_round_trip(self, storage: Storage) -> None:
        await super().test_200_byte_segment_keys_round_trip(storage)
