"""The runner's demo (`checkpointkit demo --storage URL`) fails, resumes and replays on every
backend, through the command line alone: URLs and the standard environment variables."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from .conftest import BACKENDS, _require_adapter


def _url_and_env(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> tuple[str, dict[str, str]]:
    name = f"demo{uuid.uuid4().hex[:10]}"
    env = dict(os.environ)
    if backend == "memory":
        pytest.skip("a memory storage does not outlive one command")
    if backend == "file":
        return f"file://{tmp_path / name}", env
    if backend == "sqlite":
        return str(tmp_path / f"{name}.db"), env  # a plain path: the embedded default
    _require_adapter(backend)
    if backend == "redis":
        return f"{request.getfixturevalue('redis_server')}?prefix={name}", env
    if backend == "postgres":
        return f"{request.getfixturevalue('postgres_url')}?prefix={name}", env
    if backend == "s3":
        from checkpointkit.conformance.servers.s3 import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY

        endpoint, bucket = request.getfixturevalue("s3_server")
        env.update(AWS_ACCESS_KEY_ID=ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY=SECRET_ACCESS_KEY)
        return f"s3://{bucket}/{name}?endpoint_url={endpoint}&region={REGION}", env
    env["AZURE_STORAGE_CONNECTION_STRING"] = request.getfixturevalue("azure_server")
    return f"az://{name}?create=true", env


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "memory"])
def test_demo_fails_resumes_and_replays_on_every_backend(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url, env = _url_and_env(backend, request, tmp_path)
    env["COLUMNS"] = "200"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from checkpointkit.cli import main; main()",
            "demo",
            "--storage",
            url,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "failed: the flaky source timed out" in out
    assert out.count("replayed from checkpoint") == 3, out  # the three fetches that succeeded
    assert "completed: 4 sources" in out
