"""First-run edges (issue 12, problem 8): a clear error for a run that exists, every
optional import naming its extra, and an ``[all]`` extra that holds everything."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from checkpointkit import CheckpointkitError, RunExists, Workflow, step
from checkpointkit.adapters.memory import MemoryStorage

PYPROJECT = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())


@step(name="fetch")
async def fetch(url: str) -> str:
    return f"page of {url}"


async def crawl(url: str) -> str:
    return await fetch(url)


async def test_starting_a_stored_run_again_raises_run_exists() -> None:
    async with MemoryStorage() as storage:
        wf = Workflow(crawl, storage=storage)
        await wf.run("https://example.invalid/a", run_id="crawl-1")
        with pytest.raises(RunExists) as caught:
            await wf.run("https://example.invalid/b", run_id="crawl-1")
    error = caught.value
    assert isinstance(error, CheckpointkitError) and isinstance(error, ValueError)
    assert error.run_id == "crawl-1"
    assert "run 'crawl-1' exists already" in str(error) and "resume()" in str(error)
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is RunExists and str(again) == str(error)


BLOCKED_IMPORT = """
import sys

class Missing:
    def find_spec(self, name, path=None, target=None):
        if name == sys.argv[1] or name.startswith(sys.argv[1] + "."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Missing())
try:
    __import__(sys.argv[2])
except ModuleNotFoundError as exc:
    print(type(exc).__name__, exc.name, exc, sep="|")
"""


@pytest.mark.parametrize(
    ("missing", "module", "extra"),
    [
        ("langchain_core", "checkpointkit.integrations.langgraph", "langgraph"),
        ("langgraph", "checkpointkit.integrations.langgraph", "langgraph"),
        ("agent_framework", "checkpointkit.integrations.agent_framework", "agent-framework"),
    ],
)
def test_importing_an_integration_without_its_extra_names_the_extra(
    missing: str, module: str, extra: str
) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", BLOCKED_IMPORT, missing, module],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stderr
    kind, name, message = proc.stdout.strip().split("|")
    assert kind == "ModuleNotFoundError" and name.split(".")[0] == missing
    assert f'pip install "checkpointkit[{extra}]"' in message and module in message


@pytest.mark.parametrize("missing", ["pytest_asyncio", "pytest"])
@pytest.mark.parametrize(
    "statement",
    [
        "from checkpointkit.conformance import StorageConformance",
        "import asyncio; from checkpointkit.conformance import run; asyncio.run(run('memory'))",
    ],
)
def test_the_conformance_suite_without_its_extra_names_the_extra(
    missing: str, statement: str
) -> None:
    module = "checkpointkit.conformance"
    code = BLOCKED_IMPORT.replace("__import__(sys.argv[2])", statement)
    proc = subprocess.run(
        [sys.executable, "-c", code, missing, module],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stderr
    kind, name, message = proc.stdout.strip().split("|")
    assert kind == "ModuleNotFoundError" and name.split(".")[0] == missing
    assert 'pip install "checkpointkit[conformance]"' in message


def _extras_of(requirement: str) -> set[str]:
    inside = requirement.split("[", 1)[1].split("]", 1)[0]
    return {e.strip() for e in inside.split(",")}


def test_the_all_extra_holds_every_extra_a_user_installs() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    # bench: the peers that benchmarks/ measures against, not a feature of checkpointkit
    user_facing = set(extras) - {"all", "test", "dev", "bench"}
    (requirement,) = extras["all"]
    assert _extras_of(requirement) == user_facing
    assert {"conformance", "langgraph", "agent-framework", "crypto"} <= user_facing


def test_the_base_install_depends_on_msgspec_and_zstandard_only() -> None:
    names = {
        dep.split(">")[0].split("=")[0].split("<")[0].strip()
        for dep in PYPROJECT["project"]["dependencies"]
    }
    assert names == {"msgspec", "zstandard"}
