"""The conformance suite: prove that a storage backend stays correct.

Four ways in, one set of tests:

1. subclass the test classes (like fsspec's abstract tests)::

       class MyFixtures(StorageFixtures):
           @pytest.fixture
           def storage_factory(self):
               return my_factory

       class TestMyStore(MyFixtures, StorageConformance):
           pass

2. the pytest plugin: ``pytest --checkpointkit-storage SPEC``;
3. the Python API: ``report = await checkpointkit.conformance.run(factory)``;
4. the command line: ``checkpointkit conformance SPEC``.

The test classes need pytest and pytest-asyncio
(``pip install "checkpointkit[conformance]"``); they are imported on first use,
so that importing this package stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import Progress, run
    from .bad_input import BadInputTests
    from .cancellation import CancellationTests
    from .capabilities import CapabilityTests
    from .checks import ConformanceFailure
    from .clauses import CLAUSES, Clause, checks
    from .concurrency import ConcurrencyTests
    from .faults import Fault, FaultyStorage
    from .fixtures import StorageFixtures
    from .groups import GROUPS
    from .held import HeldBackendTests
    from .histories import LinearizabilityTests
    from .holds import (
        FileLock,
        HeldLock,
        Hold,
        LargeValue,
        MemoryPause,
        PausedProcess,
        ProxyHold,
        SQLiteLock,
    )
    from .hygiene import HygieneError, HygieneReport, hygiene
    from .hygiene_rules import HygieneTests
    from .lifecycle import LifecycleTests
    from .model import ModelTests
    from .outages import FileOutage, NoBackend, Outage, ProxyOutage, SQLiteOutage
    from .proxy import StallProxy
    from .report import GroupSummary, Report, TestResult
    from .semantics import SemanticsTests
    from .settle import SettleWatch
    from .stalls import Stall
    from .suite import StorageConformance
    from .target import PrefixedStorage, Target, new_location, resolve_target
    from .timing import TimedStorage

__all__ = [
    "CLAUSES",
    "GROUPS",
    "BadInputTests",
    "CancellationTests",
    "CapabilityTests",
    "Clause",
    "ConcurrencyTests",
    "ConformanceFailure",
    "Fault",
    "FaultyStorage",
    "FileLock",
    "FileOutage",
    "GroupSummary",
    "HeldBackendTests",
    "HeldLock",
    "Hold",
    "HygieneError",
    "HygieneReport",
    "HygieneTests",
    "LargeValue",
    "LifecycleTests",
    "LinearizabilityTests",
    "MemoryPause",
    "ModelTests",
    "NoBackend",
    "Outage",
    "PausedProcess",
    "PrefixedStorage",
    "Progress",
    "ProxyHold",
    "ProxyOutage",
    "Report",
    "SQLiteLock",
    "SQLiteOutage",
    "SemanticsTests",
    "SettleWatch",
    "Stall",
    "StallProxy",
    "StorageConformance",
    "StorageFixtures",
    "Target",
    "TestResult",
    "TimedStorage",
    "checks",
    "hygiene",
    "new_location",
    "resolve_target",
    "run",
]

_WHERE = {
    "CLAUSES": "clauses",
    "Clause": "clauses",
    "checks": "clauses",
    "GROUPS": "groups",
    "BadInputTests": "bad_input",
    "CancellationTests": "cancellation",
    "CapabilityTests": "capabilities",
    "ConcurrencyTests": "concurrency",
    "ConformanceFailure": "checks",
    "Fault": "faults",
    "FaultyStorage": "faults",
    "FileLock": "holds",
    "FileOutage": "outages",
    "GroupSummary": "report",
    "HeldBackendTests": "held",
    "HeldLock": "holds",
    "Hold": "holds",
    "HygieneError": "hygiene",
    "HygieneReport": "hygiene",
    "HygieneTests": "hygiene_rules",
    "LargeValue": "holds",
    "LifecycleTests": "lifecycle",
    "LinearizabilityTests": "histories",
    "MemoryPause": "holds",
    "NoBackend": "outages",
    "Outage": "outages",
    "ProxyOutage": "outages",
    "SQLiteOutage": "outages",
    "PausedProcess": "holds",
    "ModelTests": "model",
    "PrefixedStorage": "target",
    "Progress": "api",
    "ProxyHold": "holds",
    "Report": "report",
    "SQLiteLock": "holds",
    "SemanticsTests": "semantics",
    "SettleWatch": "settle",
    "Stall": "stalls",
    "StallProxy": "proxy",
    "StorageConformance": "suite",
    "StorageFixtures": "fixtures",
    "Target": "target",
    "TestResult": "report",
    "TimedStorage": "timing",
    "hygiene": "hygiene",
    "new_location": "target",
    "resolve_target": "target",
    "run": "api",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'checkpointkit.conformance' has no attribute {name!r}")
    try:
        imported = importlib.import_module(f".{module}", __name__)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in (
            "pytest",
            "_pytest",
            "pytest_asyncio",
            "hypothesis",
        ):
            raise
        raise ModuleNotFoundError(
            f"checkpointkit.conformance.{name} needs pytest, pytest-asyncio and hypothesis "
            f"({exc}); "
            'install them with: pip install "checkpointkit[conformance]"',
            name=exc.name,
        ) from exc
    value = getattr(imported, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
