"""The whole suite as one class: ``class TestMyStore(MyFixtures, StorageConformance): pass``."""

from __future__ import annotations

from .bad_input import BadInputTests
from .cancellation import CancellationTests
from .capabilities import CapabilityTests
from .concurrency import ConcurrencyTests
from .histories import LinearizabilityTests
from .hygiene_rules import HygieneTests
from .lifecycle import LifecycleTests
from .model import ModelTests
from .semantics import SemanticsTests

__all__ = ["GROUP_CLASSES", "StorageConformance"]


class StorageConformance(
    SemanticsTests,
    ConcurrencyTests,
    BadInputTests,
    CancellationTests,
    LifecycleTests,
    HygieneTests,
    CapabilityTests,
    LinearizabilityTests,
    ModelTests,
):
    """Every group of the conformance suite; subclass it and provide ``storage_factory``."""


GROUP_CLASSES = {
    "semantics": SemanticsTests,
    "concurrency": ConcurrencyTests,
    "bad-input": BadInputTests,
    "cancellation": CancellationTests,
    "lifecycle": LifecycleTests,
    "hygiene": HygieneTests,
    "capabilities": CapabilityTests,
    "linearizability": LinearizabilityTests,
    "model": ModelTests,
}
"""The mixin of each group, by group name."""
