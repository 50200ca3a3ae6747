"""The groups of the conformance suite: names only, importable without pytest.

The pytest plugin imports this module when pytest starts, in every project
that has checkpointkit installed, so it imports nothing optional.
"""

from __future__ import annotations

from typing import Any

__all__ = ["GROUPS", "group_of"]

GROUPS = (
    "semantics",
    "concurrency",
    "bad-input",
    "cancellation",
    "lifecycle",
    "hygiene",
    "capabilities",
    "linearizability",
    "model",
)
"""Every group of the suite, in the order the report lists them."""


def group_of(function: Any) -> str | None:
    """The conformance group of a test function of the suite (None if not one)."""
    return getattr(function, "__conformance_group__", None)
