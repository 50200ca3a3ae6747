"""The memory adapter against the whole conformance suite, through the subclassing way in."""

from __future__ import annotations

import pytest
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.conformance import (
    BadInputTests,
    CancellationTests,
    CapabilityTests,
    ConcurrencyTests,
    HygieneTests,
    LifecycleTests,
    ModelTests,
    SemanticsTests,
    StorageFixtures,
    Target,
)


class MemoryFixtures(StorageFixtures):
    @pytest.fixture
    def storage_factory(self) -> Target:
        return Target(MemoryStorage, name="memory")


class MemoryModelFixtures(StorageFixtures):
    @pytest.fixture
    def storage_factory(self) -> Target:
        return Target(MemoryStorage, name="memory", model_budget=3.0)


class TestMemorySemantics(MemoryFixtures, SemanticsTests):
    pass


class TestMemoryConcurrency(MemoryFixtures, ConcurrencyTests):
    pass


class TestMemoryBadInput(MemoryFixtures, BadInputTests):
    pass


class TestMemoryCancellation(MemoryFixtures, CancellationTests):
    pass


class TestMemoryLifecycle(MemoryFixtures, LifecycleTests):
    pass


class TestMemoryHygiene(MemoryFixtures, HygieneTests):
    pass


class TestMemoryCapabilities(MemoryFixtures, CapabilityTests):
    pass


class TestMemoryModel(MemoryModelFixtures, ModelTests):
    pass
