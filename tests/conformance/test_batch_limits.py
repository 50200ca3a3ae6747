"""The batch limits that docs/conformance.md quotes for the ``batches`` matrix, measured on
this machine's servers by ``scripts/batch-limits``."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_batch_limits_the_docs_quote_hold_on_the_servers_here() -> None:
    done = subprocess.run(
        [str(ROOT / "scripts" / "batch-limits")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for line in (
        "asyncpg, 32767 arguments: ok",
        "asyncpg, 32768 arguments: InterfaceError",
        "psycopg, 65535 parameters: ok",
        "psycopg, 65536 parameters: OperationalError",
        "moto, DeleteObjects of 1001 keys: ok",
        "seaweedfs, DeleteObjects of 1000 keys: ok",
        "seaweedfs, DeleteObjects of 1001 keys: ClientError",
    ):
        assert line in out, out
