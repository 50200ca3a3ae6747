"""Fixtures of the Azure Blob adapter's tests: Azurite (from npm), started once per session.

Tests share one container and isolate themselves by a fresh prefix.
:class:`LateRelay` stands in for a server that applies a write it has received
late (see the cancellation tests).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from checkpointkit.adapters.azure import AzureBlobStorage
from checkpointkit.conformance.relay import LateRelay
from checkpointkit.conformance.servers.azure import azurite_server

MiB = 1024 * 1024

SMALL = {"block_threshold": 1 * MiB, "block_size": 512 * 1024, "page_size": 3}
"""Test settings: blocks above 1 MiB (512 KiB each), 3 names per list page."""


@pytest.fixture(scope="session")
def azurite() -> Iterator[str]:
    """The connection string of an Azurite blob server for the whole session."""
    with azurite_server() as conn_str:
        yield conn_str


@pytest.fixture(scope="session")
def az_container() -> str:
    """A container shared by the session's tests (created by the first storage)."""
    return f"ckk-tests-{secrets.token_hex(6)}"


@pytest.fixture
def az_prefix() -> str:
    """A prefix no other test uses."""
    return f"t-{secrets.token_hex(6)}"


@pytest.fixture
def make_az(azurite: str, az_container: str, az_prefix: str) -> Callable[..., AzureBlobStorage]:
    """Build a storage on the session's container and this test's prefix; keywords override."""

    def make(**overrides: Any) -> AzureBlobStorage:
        options: dict[str, Any] = {
            **SMALL,
            "container": az_container,
            "prefix": az_prefix,
            "connection_string": azurite,
            "create": True,
            "timeout": 20.0,
        }
        options.update(overrides)
        return AzureBlobStorage(**options)

    return make


@pytest.fixture
async def az(make_az: Callable[..., AzureBlobStorage]) -> AsyncIterator[AzureBlobStorage]:
    """A fresh storage: the session's container, this test's prefix, small thresholds."""
    async with make_az() as storage:
        yield storage


@pytest.fixture
def late_relay(azurite: str) -> Callable[[float], LateRelay]:
    """Make a :class:`LateRelay` to the session's Azurite: ``late_relay(delay)``."""
    match = re.search(r"BlobEndpoint=https?://([^:/]+):(\d+)/", azurite)
    assert match is not None
    upstream = (match[1], int(match[2]))
    return lambda delay: LateRelay(upstream, delay)
