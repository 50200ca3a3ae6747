"""The module that the pytest plugin and `run` collect
for an ``agent-framework:MODULE:ATTR`` target.

Not meant to be imported by users: subclass
`CheckpointStorageConformance`
instead. Imports are absolute, for the reason given in
`checkpointkit.conformance.collected`.
"""

from __future__ import annotations

import pytest
from checkpointkit.conformance.ecosystems.agent_framework import CheckpointStorageConformance
from checkpointkit.conformance.ecosystems.target import EcosystemTarget
from checkpointkit.conformance.plugin import session_ecosystem_target

__all__ = ["TestCheckpointStorageConformance"]


class TestCheckpointStorageConformance(CheckpointStorageConformance):
    """The storage groups against the session's target."""

    @pytest.fixture
    def checkpoint_storage_factory(self, request: pytest.FixtureRequest) -> EcosystemTarget:
        return session_ecosystem_target(request.config)
