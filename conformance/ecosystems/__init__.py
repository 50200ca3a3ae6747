"""The conformance suite for LangGraph checkpointers and agent-framework checkpoint storages.

The same kinds of checks as for a storage (cancellation watched through a
second instance, concurrency, isolation, durability, hygiene), plus the
ecosystem's own semantics and its real runner, for the interfaces that most
backend authors implement:

- a LangGraph ``BaseCheckpointSaver``:
  `SaverConformance`,
  ``checkpointkit conformance langgraph:MODULE:ATTR``;
- an agent-framework ``CheckpointStorage``:
  `CheckpointStorageConformance`,
  ``checkpointkit conformance agent-framework:MODULE:ATTR``.

Every instance the suite opens is a coverage probe
(`checkpointkit.conformance.ecosystems.coverage`): the report shows which cells
of the saver's or storage's methods the run exercised, as for a storage.

The pytest plugin takes the same SPECs (``--checkpointkit-storage``), and
`checkpointkit.conformance.run` too. This package imports nothing
optional: the group modules import LangGraph or agent-framework.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .groups import ECOSYSTEM_GROUPS
    from .target import ECOSYSTEMS, EcosystemTarget, ecosystem_of, resolve_ecosystem_target

__all__ = [
    "ECOSYSTEMS",
    "ECOSYSTEM_GROUPS",
    "EcosystemTarget",
    "ecosystem_of",
    "resolve_ecosystem_target",
]

_WHERE = {
    "ECOSYSTEMS": "target",
    "ECOSYSTEM_GROUPS": "groups",
    "EcosystemTarget": "target",
    "ecosystem_of": "target",
    "resolve_ecosystem_target": "target",
}


def __getattr__(name: str) -> Any:
    # Imported on first use: the pytest plugin reads .groups in every pytest session.
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
