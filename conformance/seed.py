"""The seed of the suite's random histories: light, so the pytest plugin can import it."""

from __future__ import annotations

import os
import secrets

import pytest

from ..errors import ConfigurationError

__all__ = ["SEED_ENV", "SEED_KEY", "resolve_seed"]

SEED_ENV = "CHECKPOINTKIT_SEED"
"""The environment variable that fixes the seed of the random histories."""

SEED_KEY = pytest.StashKey[int]()
"""Where the session's seed is kept in ``config.stash`` (set by the plugin)."""


def resolve_seed(option: object = None, environ: dict[str, str] | None = None) -> int:
    """The seed to use: ``option``, else ``$CHECKPOINTKIT_SEED``, else a fresh random one.

    Raises:
        ConfigurationError: the option or the variable is not a non-negative integer.
    """
    env = os.environ if environ is None else environ
    for value, where in ((option, "--checkpointkit-seed"), (env.get(SEED_ENV), SEED_ENV)):
        if value is None or value == "":
            continue
        try:
            seed = int(str(value))
        except ValueError:
            raise ConfigurationError(
                f"{where} must be a non-negative integer seed, not {value!r}"
            ) from None
        if seed < 0:
            raise ConfigurationError(f"{where} must be a non-negative integer seed, not {seed}")
        return seed
    return secrets.randbelow(2**32)

