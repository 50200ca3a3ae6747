"""The pytest plugin of the conformance suite (entry point ``pytest11``).

``pytest --checkpointkit-storage SPEC`` collects the suite and runs it against
SPEC: a storage URL, ``module:factory``, ``file`` (a fresh temporary directory
per test) or ``memory``. Without other paths on the command line only the
suite runs; with paths, the suite runs besides them.

Options:

``--checkpointkit-storage SPEC``
    the target.
``--checkpointkit-group NAME`` (repeatable)
    run only these groups; also applies to subclasses of the suite's classes.
``--checkpointkit-scale FACTOR``
    multiply request counts of the heavier tests (default 1).
``--checkpointkit-seed N``
    the seed of the linearizability group's random histories (default: a
    fresh one, printed; also ``$CHECKPOINTKIT_SEED``).

Installing checkpointkit registers this plugin in every pytest session of the
environment, so it imports nothing optional when pytest starts: no
pytest-asyncio, no adapter, no suite module. They are imported only when
``--checkpointkit-storage`` is given (or a test class of the suite is
collected); a project with pytest alone runs its own tests untouched.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

import pytest

from ..errors import ConfigurationError
from .groups import GROUPS, group_of
from .seed import SEED_KEY, resolve_seed

if TYPE_CHECKING:
    from .target import Target

__all__ = ["TARGET_KEY", "suite_path"]

TARGET_KEY: pytest.StashKey[Target] = pytest.StashKey()
"""Where the session's target is kept in ``config.stash``."""

_OWNED_KEY = pytest.StashKey[bool]()


def suite_path() -> str:
    """The file of the module that holds the suite's collected test class."""
    spec = importlib.util.find_spec("checkpointkit.conformance.collected")
    if spec is None or spec.origin is None:  # pragma: no cover - broken installation
        raise RuntimeError("checkpointkit.conformance.collected cannot be found")
    return spec.origin


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("checkpointkit", "checkpointkit conformance suite")
    group.addoption(
        "--checkpointkit-storage",
        metavar="SPEC",
        default=None,
        help="run the checkpointkit conformance suite against SPEC: a storage URL, "
        "module:factory, 'file' or 'memory'",
    )
    group.addoption(
        "--checkpointkit-group",
        action="append",
        default=[],
        metavar="NAME",
        help=f"run only this conformance group (repeatable): {', '.join(GROUPS)}",
    )
    group.addoption(
        "--checkpointkit-scale",
        type=float,
        default=None,
        metavar="FACTOR",
        help="multiply the request counts of the heavier conformance tests (default 1)",
    )
    group.addoption(
        "--checkpointkit-seed",
        default=None,
        metavar="N",
        help="seed of the linearizability group's random histories (default: random, printed; "
        "also $CHECKPOINTKIT_SEED)",
    )


def selected_groups(names: list[str] | tuple[str, ...] | None) -> tuple[str, ...] | None:
    """Validate group names; None (or empty) means every group.

    Raises:
        ConfigurationError: an unknown group name.
    """
    if not names:
        return None
    unknown = [n for n in names if n not in GROUPS]
    if unknown:
        raise ConfigurationError(
            f"unknown conformance group {unknown[0]!r}; the groups are: {', '.join(GROUPS)}"
        )
    return tuple(g for g in GROUPS if g in names)


def pytest_configure(config: pytest.Config) -> None:
    try:
        selected_groups(config.getoption("checkpointkit_group"))
        config.stash[SEED_KEY] = resolve_seed(config.getoption("checkpointkit_seed"))
    except ConfigurationError as exc:
        raise pytest.UsageError(str(exc)) from None
    spec = config.getoption("checkpointkit_storage")
    if not spec:
        return
    _require_suite_dependencies()
    from .target import resolve_target

    overrides: dict[str, Any] = {}
    scale = config.getoption("checkpointkit_scale")
    if scale is not None:
        overrides["scale"] = scale
    try:
        target = resolve_target(spec, **overrides)
    except ConfigurationError as exc:
        raise pytest.UsageError(f"--checkpointkit-storage: {exc}") from None
    config.stash[TARGET_KEY] = target
    config.stash[_OWNED_KEY] = True
    path = suite_path()
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        if path not in config.args:
            config.args.append(path)
    else:
        config.args[:] = [path]


def _require_suite_dependencies() -> None:
    """Fail the session with the extra to install if the suite cannot run here."""
    try:
        import pytest_asyncio  # noqa: F401  (the suite's async tests and fixtures need it)
    except ImportError as exc:
        raise pytest.UsageError(
            f"--checkpointkit-storage: the conformance suite needs pytest-asyncio ({exc}); "
            'install it with: pip install "checkpointkit[conformance]"'
        ) from None


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    target = config.stash.get(TARGET_KEY, None)
    if target is None:  # the suite is not in use: say nothing in other projects' runs
        return None
    return [
        f"checkpointkit conformance target: {target.name}",
        f"checkpointkit linearizability seed: {config.stash[SEED_KEY]}",
    ]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups = selected_groups(config.getoption("checkpointkit_group"))
    if groups is None:
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        group = group_of(getattr(item, "function", None))
        (keep if group is None or group in groups else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_unconfigure(config: pytest.Config) -> None:
    target = config.stash.get(TARGET_KEY, None)
    if target is not None and config.stash.get(_OWNED_KEY, False) and target.cleanup is not None:
        target.cleanup()
