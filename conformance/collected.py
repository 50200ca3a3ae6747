"""The module that the pytest plugin and :func:`~checkpointkit.conformance.run` collect.

It holds one test class, running every group against the target that the
session was given (``--checkpointkit-storage SPEC``, or the factory passed to
``run``). It is not meant to be imported by users: subclass
:class:`~checkpointkit.conformance.StorageConformance` instead.
"""

from __future__ import annotations

import pytest

from .plugin import TARGET_KEY
from .suite import StorageConformance
from .target import Target

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
