"""The suite's timing settings and outcome markers: importable without pytest.

The pytest plugin imports this module when pytest starts, in every project
that has checkpointkit installed, so it imports nothing optional.
"""

from __future__ import annotations

import math

from ..errors import ConfigurationError

__all__ = [
    "DEFAULT_CANCEL_BOUND",
    "DEFAULT_MODEL_BUDGET",
    "DEFAULT_SETTLE_WINDOW",
    "INDETERMINATE",
    "NOT_EXERCISED",
    "check_count",
    "check_seconds",
]

DEFAULT_SETTLE_WINDOW = 2.0
"""Seconds a cancelled or failed write is watched for a late landing, by default."""

DEFAULT_CANCEL_BOUND = 0.5
"""Seconds within which a cancelled operation must raise ``CancelledError``, by default."""

DEFAULT_MODEL_BUDGET = 12.0
"""Seconds the ``model`` group draws and runs random programs, by default."""

INDETERMINATE = "checkpointkit_indeterminate"
"""The ``user_properties`` name under which a test records an indeterminate outcome."""

NOT_EXERCISED = "not exercised: "
"""How the reason of a skip starts when the test could not exercise what it checks (no hold).

The report lists such tests apart from the skips of undeclared capabilities,
and none may be left for the level ``full``."""


def check_count(name: str, value: object, *, least: int, what: str) -> int:
    """``value`` as a whole number of at least ``least``, or a `ConfigurationError` naming
    ``name`` and ``what`` it must be ("a positive number of bytes")."""
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ConfigurationError(f"{name} must be {what}, not {value!r}")
    return value


def check_seconds(name: str, value: object, *, zero: bool = False) -> float:
    """``value`` as seconds, or a `ConfigurationError` naming ``name``.

    Args:
        name: the setting, for the message.
        value: a number of seconds.
        zero: whether 0 is allowed.

    Raises:
        ConfigurationError: not a finite number, negative, or zero when that is not allowed.
    """
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not zero):  # type: ignore[operator]
        least = "zero or more" if zero else "more than zero"
        raise ConfigurationError(f"{name} must be a number of seconds, {least}, not {value!r}")
    return float(value)  # type: ignore[arg-type]
