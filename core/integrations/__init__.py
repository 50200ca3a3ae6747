"""Integrations with other workflow libraries.

Each module needs its library, installed with an extra of checkpointkit:
``checkpointkit.integrations.langgraph`` (``pip install "checkpointkit[langgraph]"``)
and ``checkpointkit.integrations.agent_framework``
(``pip install "checkpointkit[agent-framework]"``). Importing one without its
extra raises `ModuleNotFoundError` whose message names the extra.
"""

from __future__ import annotations

import sys
from typing import Any

from ..storage import Capabilities

__all__ = ["NETWORK_COMPRESS_THRESHOLD", "compress_threshold_for", "keeps_heads", "missing_extra"]

NETWORK_COMPRESS_THRESHOLD = 16 * 1024
"""Records longer than this are zstd-compressed by default on a storage that is not local."""


def keeps_heads(storage: Any) -> bool:
    """Whether an integration keeps a head record (the newest checkpoint's name) on ``storage``.

    A head needs compare-and-swap (``conditional_put``), and pays only where a
    listing is dear: with ``indexed_list``, ``list(limit=1)`` finds the newest
    checkpoint as cheaply as a get of the head.
    """
    capabilities = getattr(storage, "capabilities", Capabilities())
    return bool(capabilities.conditional_put) and not capabilities.indexed_list


def compress_threshold_for(storage: Any, compress_threshold: int | None) -> int:
    """The compression threshold an integration uses on ``storage``.

    ``None`` chooses by the storage: on a `Capabilities.local` one (memory,
    file, SQLite) nothing is compressed, because zstd costs at least what
    the bytes it saves cost there (1 MiB of text: 3.2 ms to compress at level
    1, about what a SQLite commit saves by writing 0.58 MB less, and more than
    a file write saves; and 0.75 ms to decompress on every read); elsewhere
    records longer than
    `NETWORK_COMPRESS_THRESHOLD` are compressed, which saves transfer. An
    int is used as given. Records are readable whatever the choice: the
    envelope says whether each one is compressed.
    """
    if compress_threshold is not None:
        return compress_threshold
    capabilities = getattr(storage, "capabilities", Capabilities())
    return sys.maxsize if capabilities.local else NETWORK_COMPRESS_THRESHOLD


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
