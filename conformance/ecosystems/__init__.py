"""The conformance suite for LangGraph checkpointers and agent-framework checkpoint storages.

The same kinds of checks as for a storage (cancellation watched through a
second instance, concurrency, isolation, durability, hygiene), plus the
ecosystem's own semantics and its real runner, for the interfaces that most
backend authors implement:

- a LangGraph ``BaseCheckpointSaver``:
  :class:`~checkpointkit.conformance.ecosystems.langgraph.SaverConformance`,
  ``checkpointkit conformance langgraph:MODULE:ATTR``;
- an agent-framework ``CheckpointStorage``:
  :class:`~checkpointkit.conformance.ecosystems.agent_framework.CheckpointStorageConformance`,
  ``checkpointkit conformance agent-framework:MODULE:ATTR``.

The pytest plugin takes the same SPECs (``--checkpointkit-storage``), and
:func:`checkpointkit.conformance.run` too. This package imports nothing
optional: the group modules import LangGraph or agent-framework.
"""

from __future__ import annotations

from .groups import ECOSYSTEM_GROUPS
from .target import ECOSYSTEMS, EcosystemTarget, ecosystem_of, resolve_ecosystem_target

__all__ = [
    "ECOSYSTEMS",
    "ECOSYSTEM_GROUPS",
    "EcosystemTarget",
    "ecosystem_of",
    "resolve_ecosystem_target",
]
