"""Integrations with other workflow libraries.

Each module needs its library, installed with an extra of checkpointkit:
``checkpointkit.integrations.langgraph`` (``pip install "checkpointkit[langgraph]"``)
and ``checkpointkit.integrations.agent_framework``
(``pip install "checkpointkit[agent-framework]"``). Importing one without its
extra raises `ModuleNotFoundError` whose message names the extra.
"""

from __future__ import annotations

from typing import Any

from ..storage import Capabilities

__all__ = ["keeps_heads", "missing_extra"]


def keeps_heads(storage: Any) -> bool:
    """Whether an integration keeps a head record (the newest checkpoint's name) on ``storage``.

    A head needs compare-and-swap (``conditional_put``), and pays only where a
    listing is dear: with ``indexed_list``, ``list(limit=1)`` finds the newest
    checkpoint as cheaply as a get of the head.
    """
    capabilities = getattr(storage, "capabilities", Capabilities())
    return bool(capabilities.conditional_put) and not capabilities.indexed_list


def missing_extra(module: str, extra: str, exc: ImportError) -> ModuleNotFoundError:
    """The error to raise when ``module`` cannot import what its ``extra`` installs.

    Args:
        module: the integration module (``__name__``).
        extra: the name of checkpointkit's extra that installs the dependency.
        exc: the original import error (chain it with ``raise ... from exc``).
    """
    return ModuleNotFoundError(
        f"{module} needs {exc.name or 'a package'!s} ({exc}); "
        f'install it with: pip install "checkpointkit[{extra}]"',
        name=exc.name,
    )
