"""The Azure Blob adapter against the whole conformance suite, on Azurite, with the stall proxy."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
from checkpointkit.adapters.azure import AzureBlobStorage
from checkpointkit.conformance import StorageConformance, StorageFixtures, Target, new_location

MODEL_BUDGET = 3.0
"""Seconds of the model group per run here (the default, 12, is for users' runs)."""


class AzureFixtures(StorageFixtures):
    @pytest.fixture
    def storage_factory(self, azurite: str, az_container: str) -> Target:
        async def azure_storage(
            *, location: str | None = None, endpoint: tuple[str, int] | None = None
        ) -> AsyncIterator[AzureBlobStorage]:
            async with AzureBlobStorage(
                az_container,
                location or new_location(),
                connection_string=azurite,
                endpoint=endpoint,
                create=True,
                timeout=20.0,
            ) as storage:
                yield storage

        match = re.search(r"BlobEndpoint=https?://([^:/]+):(\d+)/", azurite)
        assert match is not None
        return Target(
            azure_storage,
            name="azure (Azurite)",
            upstream=(match[1], int(match[2])),
            scale=0.5,
            model_budget=MODEL_BUDGET,
        )


class TestAzureConformance(AzureFixtures, StorageConformance):
    pass
