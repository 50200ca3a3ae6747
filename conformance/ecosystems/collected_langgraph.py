"""The module that the pytest plugin and `run` collect
for a ``langgraph:MODULE:ATTR`` target.

Not meant to be imported by users: subclass
`SaverConformance`
instead. Imports are absolute, for the reason given in
`checkpointkit.conformance.collected`.
"""

from __future__ import annotations

import pytest
from checkpointkit.conformance.ecosystems.langgraph import SaverConformance
from checkpointkit.conformance.ecosystems.target import EcosystemTarget
from checkpointkit.conformance.plugin import session_ecosystem_target

__all__ = ["TestSaverConformance"]


class TestSaverConformance(SaverConformance):
    """The saver groups against the session's target."""

    @pytest.fixture
    def saver_factory(self, request: pytest.FixtureRequest) -> EcosystemTarget:
        return session_ecosystem_target(request.config)
