"""The package as users install it, in fresh virtual environments (issue 12, problems 1, 3, 4).

Each test builds from a copy of the sources (so nothing is written into the work tree),
creates a venv without system site packages, installs from a local wheelhouse
(``--no-index``: the checkpointkit wheel, and the pinned wheels of pytest,
pytest-asyncio and the base dependencies, downloaded once), and runs what a user runs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
SOURCES = ("core", "adapters", "conformance", "pyproject.toml", "README.md")
TIMEOUT = 300

UNRELATED_TEST = """
def test_another_projects_own_test():
    assert sorted([3, 1, 2]) == [1, 2, 3]
"""


def _check(args: list[str | Path], **kwargs: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=TIMEOUT, **kwargs
    )  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{args}\n{proc.stdout}\n{proc.stderr}"
    return proc


def _pip(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return _check([sys.executable, "-m", "pip", "--disable-pip-version-check", *args])


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the files the build reads."""
    copy = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, copy / name)
    return copy


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory, source: Path) -> Path:
    """The checkpointkit wheel and the pinned wheels that the venvs install from."""
    house = tmp_path_factory.mktemp("wheels")
    _pip("wheel", "--no-deps", "-q", "-w", house, source)
    _pip(
        "download",
        "-q",
        "-d",
        house,
        "-c",
        ROOT / "constraints.txt",
        "--only-binary",
        ":all:",
        "pytest",
        "pytest-asyncio",
        "hypothesis",  # the conformance extra's model group
        "redis",  # the extra that the README's wheel install names
        "hiredis",  # ... and its reply parser
        "msgspec",
        "zstandard",
        "setuptools>=69",  # to build editable installs without the network
    )
    return house


def _wheel(house: Path) -> Path:
    (wheel,) = house.glob("checkpointkit-*.whl")
    return wheel


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """A fresh venv without pip (the test's own pip installs into it) and no system packages."""
    where = tmp_path / "venv"
    _check([sys.executable, "-m", "venv", "--without-pip", where])
    return where / "bin" / "python"


def _install(python: Path, house: Path, *requirements: str | Path) -> None:
    _pip("--python", python, "install", "-q", "--no-index", "--find-links", house, *requirements)


def _installed(python: Path) -> list[str]:
    listing = _pip("--python", python, "list", "--format", "json").stdout
    return sorted(p["name"].lower() for p in json.loads(listing))


def _size_mb(python: Path, package: str = "") -> float:
    """Megabytes of the venv's site-packages, or of one ``package`` in it."""
    site = _check(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    ).stdout.strip()
    total = sum(f.stat().st_size for f in (Path(site) / package).rglob("*") if f.is_file())
    return total / 1e6


def test_base_install_is_light_and_a_project_with_only_pytest_runs_green(
    venv: Path, wheelhouse: Path, tmp_path: Path
) -> None:
    _install(venv, wheelhouse, _wheel(wheelhouse))
    packages = _installed(venv)
    assert packages == ["checkpointkit", "msgspec", "zstandard"], packages
    size, own = _size_mb(venv), _size_mb(venv, "checkpointkit")
    # 52 MB before (typer, rich, pygments, pydantic...); zstandard alone ships 24 MB of
    # compiled code (two backends), so the 15 MB aim needs zstandard made optional. The
    # dependencies and checkpointkit's own files are bounded apart: the package holds the
    # conformance suite (5.4 MB with its bytecode on 2026-12-05, when the whole first
    # passed 30 MB), which grows with the suite, not with what a user pulls in.
    assert size - own < 26, f"base install: {size - own:.1f} MB of dependencies"
    assert own < 7, f"base install: {own:.1f} MB of checkpointkit itself"
    bin_dir = venv.parent
    help_text = _check([bin_dir / "checkpointkit", "--help"]).stdout
    assert "conformance" in help_text and "Usage:" in help_text
    store = tmp_path / "store"
    demo = _check([bin_dir / "checkpointkit", "demo", "-s", store]).stdout
    assert "completed: 4 sources" in demo
    assert "demo-" in _check([bin_dir / "checkpointkit", "runs", "-s", store, "-n", "demo"]).stdout

    _install(venv, wheelhouse, "pytest")  # and not pytest-asyncio
    assert "pytest-asyncio" not in _installed(venv)
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_theirs.py").write_text(UNRELATED_TEST)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PYTHON"))}
    run = _check([venv, "-m", "pytest", "-q"], cwd=project, env=env)
    assert "1 passed" in run.stdout
    # the plugin is registered and loaded, it just asks for nothing until it is used
    assert "--checkpointkit-storage" in _check([venv, "-m", "pytest", "--help"], cwd=project).stdout


CONFORMANCE_RUN = (
    "import asyncio; from checkpointkit.conformance import run; "
    "r = asyncio.run(run('memory', groups=['bad-input'])); "
    "print('ok' if r.ok else r.summary())"
)


@pytest.mark.parametrize("form", ["wheel", "editable", "strict-editable"])
def test_the_suite_runs_from_every_install_form(
    venv: Path, wheelhouse: Path, source: Path, tmp_path: Path, form: str
) -> None:
    _install(venv, wheelhouse, "pytest", "pytest-asyncio", "msgspec", "zstandard")
    if form == "wheel":
        _install(venv, wheelhouse, "--no-deps", _wheel(wheelhouse))
    else:
        strict = ["--config-settings", "editable_mode=strict"] if form == "strict-editable" else []
        _install(venv, wheelhouse, "--no-deps", *strict, "-e", source)
    project = tmp_path / "project"
    project.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PYTHON"))}

    plugin = _check(
        [
            venv,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "asyncio_default_fixture_loop_scope=function",
            "--checkpointkit-storage",
            "memory",
            "--checkpointkit-group",
            "bad-input",
        ],
        cwd=project,
        env=env,
    )
    assert re.search(r"\d+ passed", plugin.stdout) and "failed" not in plugin.stdout
    assert _check([venv, "-c", CONFORMANCE_RUN], cwd=project, env=env).stdout.strip() == "ok"
    cli = _check(
        [venv.parent / "checkpointkit", "conformance", "memory", "--group", "bad-input"],
        cwd=project,
        env=env,
    )
    assert "passed" in cli.stdout.splitlines()[-1]


def _readme_block(marker: str) -> list[str]:
    """The command lines of the README's console block that follows ``<!-- marker: ...``."""
    text = (ROOT / "README.md").read_text()
    start = text.index(f"<!-- {marker}:")
    block = text[text.index("```console\n", start) + len("```console\n") :]
    block = block[: block.index("```")]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_the_readmes_install_commands_work_in_a_fresh_clone(
    wheelhouse: Path, source: Path, tmp_path: Path
) -> None:
    clone = tmp_path / "checkpointkit"
    shutil.copytree(source, clone)
    lines = _readme_block("install") + _readme_block("install-wheel")
    assert lines[0].startswith("git clone ") and lines[0].endswith("&& cd checkpointkit")
    # Everything from the wheelhouse, none from an index: what the README says, not what
    # a configured index would happen to provide.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PYTHON", "PIP"))}
    env |= {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse), "HOME": str(tmp_path)}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # python3
    outputs = [
        _check(["bash", "-euo", "pipefail", "-c", line], cwd=clone, env=env).stdout
        for line in lines[1:]
    ]
    by_line = dict(zip(lines[1:], outputs, strict=True))
    help_text = by_line[".venv/bin/checkpointkit --help"]
    assert "conformance" in help_text and "migrate" in help_text
    suite = by_line[".venv/bin/checkpointkit conformance memory --group capabilities"]
    assert "passed" in suite.splitlines()[-1] and "FAILED" not in suite
    for python, extra in [
        (clone / ".venv" / "bin" / "python", "pytest-asyncio"),
        (tmp_path / "app-env" / "bin" / "python", "redis"),
    ]:
        assert {"checkpointkit", "msgspec", "zstandard", extra} <= set(_installed(python))
        where = _check([python, "-c", "import checkpointkit; print(checkpointkit.__file__)"])
        assert "site-packages" in where.stdout  # the installed copy, not the clone's folder
