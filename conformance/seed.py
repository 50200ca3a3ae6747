"""The seed of the suite's random histories: light, so the pytest plugin can import it."""

from __future__ import annotations

import os
import secrets

import pytest

from ..errors import ConfigurationError

__all__ = ["MODEL_SEED_ENV", "MODEL_SEED_KEY", "SEED_ENV", "SEED_KEY", "resolve_seed"]

SEED_ENV = "CHECKPOINTKIT_SEED"
"""The environment variable that fixes the seed of the random histories."""

SEED_KEY = pytest.StashKey[int]()
"""Where the session's seed is kept in ``config.stash`` (set by the plugin)."""

MODEL_SEED_ENV = "CHECKPOINTKIT_MODEL_SEED"
"""The environment variable that fixes the seed of the model group's programs."""

MODEL_SEED_KEY = pytest.StashKey[int]()
"""Where the session's model seed is kept in ``config.stash`` (set by the plugin)."""


def resolve_seed(
    option: object = None,
    environ: dict[str, str] | None = None,
    *,
    option_name: str = "--checkpointkit-seed",
    env: str = SEED_ENV,
) -> int:
    """The seed to use: ``option``, else ``$CHECKPOINTKIT_SEED``, else a fresh random one.

    Args:
        option: the command line's value, if any.
        environ: the environment (default: ``os.environ``).
        option_name: the option's name, for messages.
        env: the environment variable to read.

    Raises:
        ConfigurationError: the option or the variable is not a non-negative integer.
    """
    variables = os.environ if environ is None else environ
    for value, where in ((option, option_name), (variables.get(env), env)):
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
