"""The module that the pytest plugin and :func:`~checkpointkit.conformance.run` collect
for an ``agent-framework:MODULE:ATTR`` target.

Not meant to be imported by users: subclass
:class:`~checkpointkit.conformance.ecosystems.agent_framework.CheckpointStorageConformance`
instead. Imports are absolute, for the reason given in
:mod:`checkpointkit.conformance.collected`.
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
