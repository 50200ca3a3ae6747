"""The groups of the ecosystem suites: names only, importable without pytest."""

from __future__ import annotations

__all__ = ["ECOSYSTEM_GROUPS"]

ECOSYSTEM_GROUPS = (
    "semantics",
    "cancellation",
    "concurrency",
    "isolation",
    "durability",
    "hygiene",
    "scenarios",
)
"""Every group of a LangGraph or agent-framework run, in the order the report lists them."""
