"""The pytest plugin of the conformance suite (entry point ``pytest11``).

``pytest --checkpointkit-storage SPEC`` collects the suite and runs it against
SPEC: a storage URL, ``module:factory``, ``file`` (a fresh temporary directory
per test) or ``memory``. Without other paths on the command line only the
suite runs; with paths, the suite runs besides them.

Options:

``--checkpointkit-storage SPEC``
    the target; ``langgraph:MODULE:ATTR`` or ``agent-framework:MODULE:ATTR``
    runs the ecosystem groups (`checkpointkit.conformance.ecosystems`)
    against a LangGraph saver or an agent-framework checkpoint storage.
``--checkpointkit-group NAME`` (repeatable)
    run only these groups; also applies to subclasses of the suite's classes.
``--checkpointkit-scale FACTOR``
    multiply request counts of the heavier tests (default 1).
``--checkpointkit-settle-window SECONDS``
    how long a cancelled or failed write is watched for a late landing
    (default 2); also applies to subclasses of the suite's classes.
``--checkpointkit-cancel-bound SECONDS``
    how soon a cancelled operation must raise ``CancelledError`` (default 0.5).
``--checkpointkit-seed N``
    the seed of the linearizability group's random histories (default: a
    fresh one, printed; also ``$CHECKPOINTKIT_SEED``).
``--checkpointkit-model-seed N``
    the seed of the model group's random programs (default: a fresh one,
    printed; also ``$CHECKPOINTKIT_MODEL_SEED``).
``--checkpointkit-model-budget SECONDS``
    how long the model group runs random programs (default 12; 0 skips it);
    also applies to subclasses of the suite's classes.

A test that saw a late landing on an adapter that does not declare
``settles_cancelled_writes`` is shown as ``INDETERMINATE`` (``?``): the
protocol allows it, so it does not fail the run, and the terminal summary
lists what was seen.

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
from .ecosystems.groups import ECOSYSTEM_GROUPS
from .groups import GROUPS, group_of
from .seed import MODEL_SEED_ENV, MODEL_SEED_KEY, SEED_KEY, resolve_seed
from .settings import INDETERMINATE, check_seconds

if TYPE_CHECKING:
    from .ecosystems.target import EcosystemTarget
    from .target import Target

__all__ = [
    "ECOSYSTEM_TARGET_KEY",
    "TARGET_KEY",
    "ecosystem_suite_path",
    "session_ecosystem_target",
    "suite_path",
]

TARGET_KEY: pytest.StashKey[Target] = pytest.StashKey()
"""Where the session's target is kept in ``config.stash``."""

ECOSYSTEM_TARGET_KEY: pytest.StashKey[EcosystemTarget] = pytest.StashKey()
"""Where the session's LangGraph or agent-framework target is kept in ``config.stash``."""

_KNOWN_GROUPS = GROUPS + tuple(g for g in ECOSYSTEM_GROUPS if g not in GROUPS)

_OWNED_KEY = pytest.StashKey[bool]()


def suite_path() -> str:
    """The file of the module that holds the suite's collected test class."""
    spec = importlib.util.find_spec("checkpointkit.conformance.collected")
    if spec is None or spec.origin is None:  # pragma: no cover - broken installation
        raise RuntimeError("checkpointkit.conformance.collected cannot be found")
    return spec.origin


def ecosystem_suite_path(ecosystem: str) -> str:
    """The file of the module holding the collected test class of ``ecosystem``."""
    module = "checkpointkit.conformance.ecosystems.collected_" + ecosystem.replace("-", "_")
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:  # pragma: no cover - broken installation
        raise RuntimeError(f"{module} cannot be found")
    return spec.origin


def session_ecosystem_target(config: pytest.Config) -> EcosystemTarget:
    """The session's ecosystem target; fails the test when there is none."""
    target = config.stash.get(ECOSYSTEM_TARGET_KEY, None)
    if target is None:
        pytest.fail(
            "no ecosystem target: run pytest with --checkpointkit-storage langgraph:MODULE:ATTR "
            "or agent-framework:MODULE:ATTR",
            pytrace=False,
        )
    return target


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("checkpointkit", "checkpointkit conformance suite")
    group.addoption(
        "--checkpointkit-storage",
        metavar="SPEC",
        default=None,
        help="run the checkpointkit conformance suite against SPEC: a storage URL, "
        "module:factory, 'file', 'memory', langgraph:MODULE:ATTR or agent-framework:MODULE:ATTR",
    )
    group.addoption(
        "--checkpointkit-group",
        action="append",
        default=[],
        metavar="NAME",
        help=f"run only this conformance group (repeatable): {', '.join(_KNOWN_GROUPS)}",
    )
    group.addoption(
        "--checkpointkit-scale",
        type=float,
        default=None,
        metavar="FACTOR",
        help="multiply the request counts of the heavier conformance tests (default 1)",
    )
    group.addoption(
        "--checkpointkit-settle-window",
        type=float,
        default=None,
        metavar="SECONDS",
        help="watch cancelled or failed writes this long for a late landing (default 2)",
    )
    group.addoption(
        "--checkpointkit-cancel-bound",
        type=float,
        default=None,
        metavar="SECONDS",
        help="a cancelled operation must raise CancelledError within this (default 0.5)",
    )
    group.addoption(
        "--checkpointkit-seed",
        default=None,
        metavar="N",
        help="seed of the linearizability group's random histories (default: random, printed; "
        "also $CHECKPOINTKIT_SEED)",
    )
    group.addoption(
        "--checkpointkit-model-seed",
        default=None,
        metavar="N",
        help="seed of the model group's random programs (default: random, printed; "
        "also $CHECKPOINTKIT_MODEL_SEED)",
    )
    group.addoption(
        "--checkpointkit-model-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="run the model group's random programs this long (default 12; 0 skips it)",
    )


def selected_groups(
    names: list[str] | tuple[str, ...] | None, groups: tuple[str, ...] = GROUPS
) -> tuple[str, ...] | None:
    """Validate group names against ``groups``; None (or empty) means every group.

    Raises:
        ConfigurationError: an unknown group name.
    """
    if not names:
        return None
    unknown = [n for n in names if n not in groups]
    if unknown:
        raise ConfigurationError(
            f"unknown conformance group {unknown[0]!r}; the groups are: {', '.join(groups)}"
        )
    return tuple(g for g in groups if g in names)


def pytest_configure(config: pytest.Config) -> None:
    overrides: dict[str, Any] = {}
    try:
        selected_groups(config.getoption("checkpointkit_group"), _KNOWN_GROUPS)
        config.stash[SEED_KEY] = resolve_seed(config.getoption("checkpointkit_seed"))
        config.stash[MODEL_SEED_KEY] = resolve_seed(
            config.getoption("checkpointkit_model_seed"),
            option_name="--checkpointkit-model-seed",
            env=MODEL_SEED_ENV,
        )
        for option, name, zero in (
            ("checkpointkit_settle_window", "settle_window", True),
            ("checkpointkit_cancel_bound", "cancel_bound", False),
            ("checkpointkit_model_budget", "model_budget", True),
        ):
            value = config.getoption(option)
            if value is not None:
                overrides[name] = check_seconds(f"--{option.replace('_', '-')}", value, zero=zero)
    except ConfigurationError as exc:
        raise pytest.UsageError(str(exc)) from None
    spec = config.getoption("checkpointkit_storage")
    if not spec:
        return
    _require_suite_dependencies()
    from .ecosystems.target import ecosystem_of, resolve_ecosystem_target
    from .target import resolve_target

    scale = config.getoption("checkpointkit_scale")
    if scale is not None:
        overrides["scale"] = scale
    ecosystem = ecosystem_of(spec)
    if ecosystem is not None:
        try:
            eco = resolve_ecosystem_target(spec, **overrides)
        except ConfigurationError as exc:
            raise pytest.UsageError(f"--checkpointkit-storage: {exc}") from None
        config.stash[ECOSYSTEM_TARGET_KEY] = eco
        config.stash[_OWNED_KEY] = True
        _collect(config, ecosystem_suite_path(ecosystem))
        return
    try:
        target = resolve_target(spec, **overrides)
    except ConfigurationError as exc:
        raise pytest.UsageError(f"--checkpointkit-storage: {exc}") from None
    config.stash[TARGET_KEY] = target
    config.stash[_OWNED_KEY] = True
    _collect(config, suite_path())


def _collect(config: pytest.Config, path: str) -> None:
    """Add the suite's module to what the session collects."""
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
    target: Target | EcosystemTarget | None = config.stash.get(TARGET_KEY, None)
    if target is None:
        target = config.stash.get(ECOSYSTEM_TARGET_KEY, None)
    if target is None:  # the suite is not in use: say nothing in other projects' runs
        return None
    return [
        f"checkpointkit conformance target: {target.name}",
        f"checkpointkit linearizability seed: {config.stash[SEED_KEY]}",
        f"checkpointkit model seed: {config.stash[MODEL_SEED_KEY]}",
    ]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups = selected_groups(config.getoption("checkpointkit_group"), _KNOWN_GROUPS)
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
    target: Target | EcosystemTarget | None = config.stash.get(TARGET_KEY, None)
    if target is None:
        target = config.stash.get(ECOSYSTEM_TARGET_KEY, None)
    if target is not None and config.stash.get(_OWNED_KEY, False) and target.cleanup is not None:
        target.cleanup()


def indeterminate_reason(report: pytest.TestReport) -> str | None:
    """The reason a passed test's outcome is indeterminate, or None."""
    texts = [str(v) for k, v in report.user_properties if k == INDETERMINATE]
    return " ".join(texts) if texts else None


def pytest_report_teststatus(
    report: pytest.TestReport, config: pytest.Config
) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
    if report.when == "call" and report.passed and indeterminate_reason(report):
        return "indeterminate", "?", ("INDETERMINATE", {"yellow": True})
    return None


def pytest_terminal_summary(terminalreporter: Any) -> None:
    reports = terminalreporter.stats.get("indeterminate", [])
    if not reports:
        return
    terminalreporter.section("checkpointkit: indeterminate outcomes", sep="-", yellow=True)
    for report in reports:
        terminalreporter.line(f"INDETERMINATE {report.nodeid}: {indeterminate_reason(report)}")
