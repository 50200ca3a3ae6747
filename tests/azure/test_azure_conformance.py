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
            *,
            location: str | None = None,
            endpoint: tuple[str, int] | None = None,
            timeout: float = 20.0,
        ) -> AsyncIterator[AzureBlobStorage]:
            async with AzureBlobStorage(
                az_container,
                location or new_location(),
                connection_string=azurite,
                endpoint=endpoint,
                create=True,
                timeout=timeout,
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
            max_value=16 * 1024 * 1024,  # the size sweep (the default, 64 MiB, for users' runs)
            # past 256 keys a blob batch and S3's 1000 (the default, 65,537, for users' runs)
            max_batch=1025,
            keys=_azurite_orders,
        )


def _azurite_orders(key: str) -> bool:
    """Azurite lists by UTF-16 code units: keys with U+E000 to U+FFFD would list out of
    code-point order beside keys with characters above U+FFFF (docs/adapters/azure.md)."""
    return not any("\ue000" <= c <= "\ufffd" for c in key)


class TestAzureConformance(AzureFixtures, StorageConformance):
    pass
