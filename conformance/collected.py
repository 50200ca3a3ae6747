"""The module that the pytest plugin and `run` collect.

It holds one test class, running every group against the target that the
session was given (``--checkpointkit-storage SPEC``, or the factory passed to
``run``). It is not meant to be imported by users: subclass
`StorageConformance` instead.

pytest imports this file by its path, under a module name that it derives
from the directories around it: ``checkpointkit.conformance.collected`` in a
wheel or a strict editable install, but ``conformance.collected`` in a plain
editable install of a source checkout (where the package's directory is
``conformance/``). So this module imports by absolute name only: a relative
import would climb out of ``conformance`` and fail.
"""

from __future__ import annotations

import pytest
from checkpointkit.conformance.plugin import TARGET_KEY
from checkpointkit.conformance.suite import StorageConformance
from checkpointkit.conformance.target import Target

__all__ = ["TestStorageConformance"]


class TestStorageConformance(StorageConformance):
    """The suite against the session's target."""

    @pytest.fixture
    def storage_factory(self, request: pytest.FixtureRequest) -> Target:
        target = request.config.stash.get(TARGET_KEY, None)
        if target is None:
            pytest.fail(
                "no conformance target: run pytest with --checkpointkit-storage SPEC",
                pytrace=False,
            )
        return target
