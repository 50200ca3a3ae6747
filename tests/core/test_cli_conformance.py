"""``checkpointkit conformance`` and the pytest plugin at their edges (issue 12).

Exit statuses, directories never created, no level for a partial run, a JSON
document on stdout, progress off a terminal, a plugin that loads nothing
optional, and failures that show the test's line rather than the suite's helpers.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from checkpointkit.cli import Output, invoke
from checkpointkit.conformance.cli import ProgressLines
from checkpointkit.conformance.report import TestResult

BROKEN = Path(__file__).parents[1] / "conformance"  # holds the broken.adapters module
CLI = [sys.executable, "-c", "from checkpointkit.cli import main; main()", "conformance"]


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "COLUMNS": "200", **env}
    environ["PYTHONPATH"] = str(BROKEN) + os.pathsep + environ.get("PYTHONPATH", "")
    return subprocess.run(args, cwd=cwd, env=environ, capture_output=True, text=True, timeout=300)


def _invoke(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = invoke(list(args), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_conformance_of_a_missing_directory_exits_two_and_creates_nothing(tmp_path: Path) -> None:
    where = tmp_path / "not" / "there"
    spec = f"file://{where}"
    code, out, err = _invoke("conformance", spec)
    assert code == 2, out + err
    assert "does not exist" in err and str(where) in err
    assert not (tmp_path / "not").exists()


def test_conformance_of_an_unknown_scheme_exits_two() -> None:
    code, _, err = _invoke("conformance", "zz://somewhere/x")
    assert code == 2
    assert err.strip().splitlines() == [
        "error: unknown storage scheme 'zz' in 'zz://somewhere/x'; known schemes: "
        "az, azure, file, memory, postgres, postgresql, redis, rediss, s3, sqlite"
    ]


def test_conformance_of_some_groups_passes_without_rating_a_level(tmp_path: Path) -> None:
    proc = _run([*CLI, "memory", "--group", "bad-input"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdict = proc.stdout.strip().splitlines()[-1]
    assert "level: none" not in proc.stdout
    assert "not rated (only bad-input ran" in verdict and "passed" in verdict
    # off a terminal, progress comes as plain lines on stderr, from the start
    assert re.match(r"conformance of memory: running \d+ tests\n", proc.stderr), proc.stderr
    assert "\r" not in proc.stderr and "\x1b[" not in proc.stderr + proc.stdout


def test_conformance_json_without_a_file_is_the_one_document_on_stdout(tmp_path: Path) -> None:
    proc = _run([*CLI, "memory", "--group", "bad-input", "--json"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ok"] is True and doc["groups"]["bad-input"]["failed"] == 0
    assert doc["groups_run"] == ["bad-input"]
    # the JSON says what the text says: a run of some groups has no level (issue 20)
    assert doc["level"] is None and doc["rated"] is False


def test_json_without_a_file_cannot_swallow_the_target(tmp_path: Path) -> None:
    proc = _run([*CLI, "--json", "memory", "--group", "bad-input"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ok"] is True and doc["groups_run"] == ["bad-input"]
    assert not (tmp_path / "memory").exists()  # no report file named after the target
    # with both a FILE and a SPEC, FILE is the report's file
    proc = _run([*CLI, "--json", "report.json", "memory", "--group", "bad-input"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((tmp_path / "report.json").read_text())["ok"] is True
    code, _, err = _invoke("conformance", "--json")
    assert code == 2 and "conformance needs a SPEC" in err


MODULE_TARGET = """
from checkpointkit.adapters.memory import MemoryStorage

def storage():
    return MemoryStorage()
"""


def test_a_module_target_is_found_in_the_working_directory_as_python_m_does(
    tmp_path: Path,
) -> None:
    (tmp_path / "my_target_beside_me.py").write_text(MODULE_TARGET)
    script = Path(sys.executable).parent / "checkpointkit"  # sys.path[0] is its folder
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [script, "conformance", "my_target_beside_me:storage", "--group", "bad-input"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "passed" in proc.stdout.splitlines()[-1]
    proc = subprocess.run(
        [script, "conformance", "not_beside_me:storage"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert "cannot import 'not_beside_me'" in proc.stderr and str(tmp_path) in proc.stderr


def _result(name: str, outcome: str = "passed") -> TestResult:
    return TestResult(name, "semantics", outcome)  # type: ignore[arg-type]


def test_the_progress_line_shows_no_password_of_the_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    # the first line off a terminal names the target: a URL's password must not reach a
    # CI log (a blind round's run printed it there, 2026-12-06)
    from checkpointkit.cli import CliError
    from checkpointkit.conformance import api

    async def collected_then_stop(spec: str, *, progress: Any, **_: Any) -> None:
        progress.collected(3)
        raise CliError("stopped after the first line", 2)

    monkeypatch.setattr(api, "run", collected_then_stop)
    code, _, err = _invoke(
        "conformance", "postgresql://ckk:s3cret-pw@127.0.0.1:1/db?sslpassword=k3y"
    )
    assert code == 2, err
    assert (
        "conformance of postgresql://ckk:***@127.0.0.1:1/db?sslpassword=***: running 3 tests" in err
    )
    assert "s3cret" not in err and "k3y" not in err


def test_progress_lines_come_every_interval_off_a_terminal() -> None:
    now = [0.0]
    err = io.StringIO()
    progress = ProgressLines(Output(stderr=err), "memory", interval=10.0, clock=lambda: now[0])
    progress.collected(4)
    progress.finished(_result("test_a"))
    now[0] = 4.0
    progress.finished(_result("test_b", "failed"))
    now[0] = 11.0
    progress.finished(_result("test_c"))
    now[0] = 12.0
    progress.finished(_result("test_d"))
    assert err.getvalue().splitlines() == [
        "conformance of memory: running 4 tests",
        "FAILED semantics::test_b",  # at once, not at the next interval
        "progress: 3/4 tests done, 1 failed, 11 s",
    ]


PLAIN_PROJECT_TEST = """
def test_arithmetic():
    assert 1 + 1 == 2
"""

WITHOUT_PYTEST_ASYNCIO = """
import sys

class Missing:
    def find_spec(self, name, path=None, target=None):
        if name == "pytest_asyncio" or name.startswith("pytest_asyncio."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Missing())
import pytest
sys.exit(pytest.main(sys.argv[1:]))
"""


def _pytest_without_pytest_asyncio(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest with only the checkpointkit plugin, in an environment without pytest-asyncio."""
    (tmp_path / "test_plain.py").write_text(PLAIN_PROJECT_TEST)
    argv = ["-p", "no:cacheprovider", "-p", "checkpointkit.conformance.plugin", "-q", *args]
    return _run(
        [sys.executable, "-c", WITHOUT_PYTEST_ASYNCIO, *argv],
        tmp_path,
        PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
    )


def test_the_plugin_leaves_a_project_without_pytest_asyncio_untouched(tmp_path: Path) -> None:
    proc = _pytest_without_pytest_asyncio(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout


def test_the_plugin_imports_nothing_optional_when_pytest_starts() -> None:
    code = (
        "import sys, checkpointkit.conformance.plugin as p; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pytest_asyncio', 'aioboto3', 'redis', 'azure', 'langgraph', 'agent_framework') "
        "or m.startswith('checkpointkit.adapters.') or m == 'checkpointkit.conformance.fixtures'))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


PLUGIN_MAY_IMPORT = {
    "checkpointkit",
    "checkpointkit.errors",
    "checkpointkit.conformance",
    "checkpointkit.conformance.plugin",
    "checkpointkit.conformance.groups",
    "checkpointkit.conformance.seed",
    "checkpointkit.conformance.settings",
    "checkpointkit.conformance.ecosystems",
    "checkpointkit.conformance.ecosystems.groups",
}


def test_the_plugin_costs_almost_nothing_at_pytest_start_when_not_asked_for() -> None:
    # What it costs is measured by benchmarks/plugin_import.py; this keeps it that way: the
    # plugin's import brings in no third-party module (msgspec, zstandard) and none of the
    # library's heavy modules (runner, store, codec, the suite), only these few small ones.
    code = (
        "import sys, pytest; before = set(sys.modules); "
        "import checkpointkit.conformance.plugin; "
        "print('\\n'.join(sorted(set(sys.modules) - before)))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    imported = {m for m in proc.stdout.split() if m.split(".")[0] not in sys.stdlib_module_names}
    assert imported - PLUGIN_MAY_IMPORT == set(), sorted(imported - PLUGIN_MAY_IMPORT)


def test_the_plugin_names_the_extra_when_the_suite_is_asked_for_without_it(
    tmp_path: Path,
) -> None:
    proc = _pytest_without_pytest_asyncio(tmp_path, "--checkpointkit-storage", "memory")
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage error
    assert 'pip install "checkpointkit[conformance]"' in proc.stderr


def test_a_failing_conformance_test_shows_its_line_not_the_suite_helpers(tmp_path: Path) -> None:
    args = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-o",
        "asyncio_default_fixture_loop_scope=function",
        "--checkpointkit-storage",
        "broken.adapters:CreateOverwrites",
        "--checkpointkit-group",
        "semantics",
        "-k",
        "create_only_rejects",
    ]
    proc = _run(args, tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "> " in out and "await expect_raises(" in out  # the test's own line
    assert "E       checkpointkit.conformance.checks.ConformanceFailure: a create-only put" in out
    assert "def fail(" not in out and "def expect_raises(" not in out
    assert "checks.py" not in out
