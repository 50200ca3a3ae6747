"""A local Azure Blob server for tests: Azurite, from the repository's pinned npm packages.

``scripts/setup`` installs Azurite with ``npm ci`` (``package.json`` and
``package-lock.json`` at the repository root pin it). `azurite_server`
starts its blob service directly with ``node`` (never through ``npx``, whose
death would orphan the server) on 127.0.0.1 and a free port, in memory, and
stops it when the block ends. It uses Azurite's well-known development
account, ``devstoreaccount1``.

Usage::

    with azurite_server() as conn_str:
        async with AzureBlobStorage("c1", connection_string=conn_str, create=True) as storage:
            ...
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import free_port, started, stop, unavailable

__all__ = [
    "ACCOUNT_KEY",
    "ACCOUNT_NAME",
    "AZURITE_ENV",
    "azurite_main",
    "azurite_server",
    "connection_string",
]

ACCOUNT_NAME = "devstoreaccount1"
"""Azurite's development account (public, documented by Microsoft)."""
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
AZURITE_ENV = "CHECKPOINTKIT_AZURITE"
"""Environment variable naming Azurite's ``dist/src/blob/main.js``, to use another install."""

_MAIN = Path("node_modules", "azurite", "dist", "src", "blob", "main.js")
_START_TIMEOUT = 30.0


def connection_string(port: int, host: str = "127.0.0.1") -> str:
    """The connection string of the development account on Azurite at ``host:port``."""
    return (
        "DefaultEndpointsProtocol=http;"
        f"AccountName={ACCOUNT_NAME};AccountKey={ACCOUNT_KEY};"
        f"BlobEndpoint=http://{host}:{port}/{ACCOUNT_NAME};"
    )


def azurite_main() -> Path | None:
    """Where Azurite's blob server script is, or None when it is not installed."""
    explicit = os.environ.get(AZURITE_ENV)
    if explicit:
        return Path(explicit) if Path(explicit).is_file() else None
    roots = [Path(__file__).resolve().parents[2], Path.cwd()]
    for root in roots:
        candidate = root / _MAIN
        if candidate.is_file():
            return candidate
    return None


@contextmanager
def azurite_server() -> Iterator[str]:
    """Run Azurite's blob service on 127.0.0.1 and a free port; yield a connection string.

    When Node.js or the Azurite package is missing, or the server does not
    start, the test is skipped (or fails where backends are required): see
    `checkpointkit.conformance.servers.unavailable`.
    """
    node = shutil.which("node")
    if node is None:
        unavailable("Node.js is not installed (Azurite needs it)")
    main = azurite_main()
    if main is None:
        unavailable(
            "Azurite is not installed; run scripts/setup (npm ci at the repository root) "
            f"or set {AZURITE_ENV} to its dist/src/blob/main.js"
        )
    with tempfile.TemporaryDirectory(prefix="ckk-azurite-") as workdir:
        log_path = Path(workdir, "azurite.log")
        port = 0
        proc: subprocess.Popen[bytes] | None = None
        for _attempt in range(3):  # a free port can be taken by someone else before node binds it
            port = free_port()
            with open(log_path, "wb") as log:
                proc = subprocess.Popen(
                    [
                        node,
                        str(main),
                        "--blobHost",
                        "127.0.0.1",
                        "--blobPort",
                        str(port),
                        "--inMemoryPersistence",
                        "--disableTelemetry",
                        "--skipApiVersionCheck",
                        "--loose",
                        "--silent",
                    ],
                    cwd=workdir,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            if started(proc, port, _START_TIMEOUT):
                break
            stop(proc)
            proc = None
        if proc is None:
            tail = log_path.read_text(errors="replace")[-2000:]
            unavailable(f"Azurite did not start on 127.0.0.1:{port}: {tail.strip() or 'no output'}")
        try:
            yield connection_string(port)
        finally:
            stop(proc)
