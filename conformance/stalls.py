"""The earlier names of the holds (:mod:`~checkpointkit.conformance.holds`), kept working.

A ``Stall`` is now a :class:`~checkpointkit.conformance.holds.Hold`, and
``default_stall`` is :func:`~checkpointkit.conformance.holds.default_hold`;
a test class that overrides the ``backend_stall`` fixture still supplies its
hold that way (``Target(hold=...)`` is the new way).
"""

from __future__ import annotations

from .holds import FileLock, HeldLock, Hold, LargeValue, default_hold

__all__ = ["FileLock", "HeldLock", "LargeValue", "Stall", "default_stall"]

Stall = Hold
"""The earlier name of :class:`~checkpointkit.conformance.holds.Hold`."""

default_stall = default_hold
"""The earlier name of :func:`~checkpointkit.conformance.holds.default_hold`."""
