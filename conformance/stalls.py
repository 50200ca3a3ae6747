"""The earlier names of the holds (`holds`), kept working.

A ``Stall`` is now a `Hold`, and
``default_stall`` is `default_hold`;
a test class that overrides the ``backend_stall`` fixture still supplies its
hold that way (``Target(hold=...)`` is the new way).
"""

from __future__ import annotations

from .holds import FileLock, HeldLock, Hold, LargeValue, default_hold

__all__ = ["FileLock", "HeldLock", "LargeValue", "Stall", "default_stall"]

Stall = Hold
"""The earlier name of `Hold`."""

default_stall = default_hold
"""The earlier name of `default_hold`."""
