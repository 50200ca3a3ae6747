"""Coverage of the ecosystem targets: the probes record the cells of a saver's or storage's
methods, reachability follows what the instance implements and what the target offers, the
sweeps exercise every reachable cell, and a gap keeps a target from the ``full`` level."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent_framework import InMemoryCheckpointStorage
from checkpointkit.conformance import run
from checkpointkit.conformance.coverage import CoverageRecorder, recording
from checkpointkit.conformance.ecosystems.coverage import (
    DEFAULT_MAX_LENGTH,
    LENGTH_LIMITS,
    SAVER_ASYNC,
    SAVER_SYNC,
    EcosystemReach,
    _saver_probe_class,
    implemented,
    lengths,
    probe,
)
from checkpointkit.conformance.ecosystems.ids import ID_GROUPS, LONG, IdShapes
from checkpointkit.conformance.ecosystems.known import ROWS
from checkpointkit.conformance.ecosystems.langgraph import config_of, put
from checkpointkit.conformance.ecosystems.namespaces import (
    NAMESPACE_COLUMNS,
    NAMESPACE_GROUPS,
    NamespaceShapes,
    shapes_of,
)
from checkpointkit.conformance.ecosystems.results import QUICK
from langgraph.checkpoint.conformance.capabilities import DetectedCapabilities
from langgraph.checkpoint.memory import InMemorySaver

from . import broken

IN_PROCESS = (
    "langgraph-inmemory",
    "checkpointkit-saver-memory",
    "agent-framework-inmemory",
    "agent-framework-file",
    "checkpointkit-storage-memory",
    "langgraph-sqlite",
)
"""The rows of the results page that need no server."""

SWEPT = tuple(row for row in IN_PROCESS if row not in QUICK)
"""The in-process rows whose sweeps run here. The results page's test runs the quick rows
(`QUICK`) whole, sweeps included, and compares each with the page, which shows every
reachable cell exercised on every row (`test_results_page`): running their sweeps again
here would check nothing more."""

DOCS = Path(__file__).resolve().parents[2] / "docs"

SLOW_HOLD = {"langgraph-sqlite"}
"""Rows whose held calls end only at the backend's own timeout (SQLite's 5 s busy timeout):
their held sweep runs in the results page's run, not here."""

FAILS = {
    "langgraph-sqlite": {"test_sweep_metadata_filters_of_every_shape"},
    # FileCheckpointStorage makes a file name of the id: a save of 'a/b' raises
    # FileNotFoundError, a save, load or delete of a 301-character id OSError (ENAMETOOLONG)
    # (its section of docs/ecosystem-conformance.md comes with the page's regeneration)
    "agent-framework-file": {"test_sweep_checkpoint_ids_of_every_shape"},
}
"""The sweeps a row fails for a defect of its own (each in docs/ecosystem-conformance.md,
with its reproduction): a failed sweep still exercises its cells."""


@pytest.mark.parametrize("row_id", SWEPT)
async def test_sweeps_exercise_every_reachable_cell_of_a_built_in_target(
    row_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHECKPOINTKIT_ECO_ROOT", str(tmp_path))
    row = next(r for r in ROWS if r.id == row_id)
    pattern = "sweep and not held" if row_id in SLOW_HOLD else "sweep"
    with row.open() as target:
        report = await run(target, pattern=pattern)
    failed = {r.name for r in report.results if r.outcome == "failed"}
    assert failed == FAILS.get(row_id, set()), report.summary()
    assert report.coverage is not None
    missing = report.coverage.missing
    if row_id in SLOW_HOLD:
        assert missing and {c[0] for c in missing} == {"lifecycle"}, missing
    else:
        assert missing == [], report.summary()
    done, total = report.coverage.counts()
    assert done == total - len(missing) and total > 20


async def test_a_method_the_saver_does_not_implement_has_no_reachable_cell() -> None:
    bad = await run(broken.target(broken.NoDeleteThreadSaver, "langgraph"), pattern="sweep")
    good = await run(broken.target(broken.HeldSaver, "langgraph"), pattern="sweep")
    assert bad.coverage is not None and good.coverage is not None
    for method in ("adelete_thread", "delete_thread"):
        assert not [c for c in bad.coverage.reachable if c[1] == method]
        assert ("state", method, "existing") in good.coverage.reachable
        assert ("state", method, "existing") in good.coverage.exercised
        why = f"{method}: NoDeleteThreadSaver does not implement it"
        assert any(n.startswith(why) for n in bad.coverage.reach.unreachable())
        assert why in bad.summary()
        assert why in json.dumps(bad.to_dict()["coverage"]["unreachable"])
        assert why in bad.to_junit_xml() and why in bad.to_html()
    assert not any("adelete_thread" in n for n in good.coverage.reach.unreachable())
    # the rest of the bad saver's surface is still reachable, and exercised
    assert ("state", "aput", "existing") in bad.coverage.exercised
    assert bad.coverage.missing == [] and good.coverage.missing == []


async def test_a_write_the_hold_does_not_hold_cannot_be_cancelled_while_held() -> None:
    # HeldSaver's hold stops aput and aput_writes; adelete_thread returns while held
    report = await run(broken.target(broken.HeldSaver, "langgraph"), pattern="held")
    assert report.coverage is not None
    held = "cancelled while held"
    assert ("lifecycle", "aput_writes", held) in report.coverage.exercised
    assert ("lifecycle", "adelete_thread", held) in report.coverage.reach.cells()
    assert ("lifecycle", "adelete_thread", held) not in report.coverage.reachable
    assert not [c for c in report.coverage.missing if c[0] == "lifecycle"]
    why = "adelete_thread cancelled while held: it returned while the backend was held"
    assert any(n.startswith(why) for n in report.coverage.unreachable), report.summary()


async def test_a_run_without_a_sweep_shows_the_cells_not_exercised_and_is_not_full() -> None:
    row = next(r for r in ROWS if r.id == "checkpointkit-storage-memory")
    removed = "test_sweep_value_sizes"
    with row.open() as target:
        without = await run(target, pattern=f"not {removed}")
        alone = await run(target, pattern=removed)
    assert without.coverage is not None and alone.coverage is not None
    assert not without.failures and not without.not_exercised, without.summary()
    missing = without.coverage.missing
    assert missing and {c[0] for c in missing} == {"sizes"}
    assert without.level == "basic"
    assert without.level_reason == f"{len(missing)} reachable coverage cell(s) not exercised"
    assert "NOT EXERCISED cell sizes / 1 MiB / save" in without.summary()
    assert "sizes / 1 MiB / save" in without.to_junit_xml()
    # the removed sweep is what exercises those cells
    assert set(missing) <= alone.coverage.exercised


def _probed(saver: Any, name: str) -> Any:
    """``saver`` in the suite's coverage probe (no second instance, hold or durability)."""
    return probe(saver, "langgraph", name, location=None, reopens=False, durable=False, holds=False)


def test_a_savers_probe_is_detected_as_the_same_saver_by_langgraphs_suite() -> None:
    saver = InMemorySaver()
    probed = _probed(saver, "probe-detection")
    assert DetectedCapabilities.from_instance(probed) == DetectedCapabilities.from_instance(saver)
    assert probed.get_next_version(None, None).split(".")[0] == "0" * 31 + "1"
    assert probed.storage is saver.storage  # the saver's own attributes
    # its broken twin, a probe overriding every method, would make LangGraph's suite run
    # the tests of capabilities the saver does not have (prune, copy_thread...)
    everything = _saver_probe_class(InMemorySaver, (*SAVER_ASYNC, *SAVER_SYNC))
    overriding = everything(saver, probed.__dict__["_ck"])
    assert DetectedCapabilities.from_instance(overriding) != DetectedCapabilities.from_instance(
        saver
    )


def test_a_savers_probe_is_called_by_langgraph_as_the_saver_is() -> None:
    """LangGraph passes ``task_path`` to a saver's ``put_writes``/``aput_writes`` only where
    their signature takes it (``put_writes_accepts_task_path``): the probe shows the saver's
    signatures, so that LangGraph's runner calls it as it calls the saver. A probe of bare
    ``*args, **kwargs`` (as it was) got no task_path, and a step's writes read back in
    task-id order: a DeltaChannel rebuilt from them came back shuffled."""
    from langgraph.pregel._checkpoint import put_writes_accepts_task_path

    saver = InMemorySaver()
    probed = _probed(saver, "probe-signatures")
    for method in ("put_writes", "aput_writes"):
        assert put_writes_accepts_task_path(getattr(saver, method))
        assert put_writes_accepts_task_path(getattr(probed, method)), method


def test_reachability_follows_what_the_target_offers() -> None:
    methods: Any = ("aput", "aget_tuple", "alist", "adelete_thread")
    bare = EcosystemReach("langgraph", methods)
    full = EcosystemReach("langgraph", methods, reopens=True, durable=True, holds=True)
    columns = {c[2] for c in bare.cells()}
    assert "other instance" not in columns and "reopened" not in columns
    assert not [c for c in bare.cells() if c[0] == "lifecycle"]
    assert ("state", "aput", "reopened") in full.cells()
    assert ("lifecycle", "adelete_thread", "cancelled while held") in full.cells()
    assert ("lifecycle", "aget_tuple", "cancelled while held") in full.cells()  # a read too
    assert ("lifecycle", "aprune", "cancelled while held") not in full.cells()  # not offered
    # a read that returned while held (the hold holds writes alone) leaves its cell out
    returned = {("held", "alist", "returned")}
    assert ("lifecycle", "alist", "cancelled while held") not in full.reachable(returned)
    assert any(n.startswith("alist cancelled while held") for n in full.unreachable(returned))
    assert any("no hold" in n for n in bare.unreachable()) and not full.unreachable()


async def test_a_probe_hands_bad_input_on_and_raises_what_the_instance_raises() -> None:
    def probed(instance: Any, ecosystem: str) -> Any:
        return probe(
            instance,
            ecosystem,
            "probe-bad-input",
            location=None,
            reopens=False,
            durable=False,
            holds=False,
        )

    saver, storage = InMemorySaver(), InMemoryCheckpointStorage()
    calls: list[tuple[Any, str, tuple[Any, ...], dict[str, Any]]] = [
        (saver, "aput", ("not a config", {}, {}, {}), {}),
        (saver, "aput_writes", ({"configurable": {}}, None, "task"), {}),
        (saver, "aget_tuple", (), {"config": None, "extra": 1}),
        (saver, "adelete_thread", (), {}),
        (storage, "save", ("not a checkpoint",), {}),
        (storage, "load", (None,), {}),
    ]
    for instance, method, args, kwargs in calls:
        ecosystem = "langgraph" if instance is saver else "agent-framework"
        errors = []
        for target in (instance, probed(instance, ecosystem)):
            with pytest.raises(Exception) as raised:  # noqa: PT011 - any error, the same one
                await getattr(target, method)(*args, **kwargs)
            errors.append((type(raised.value), str(raised.value)))
        assert errors[0] == errors[1], method


def test_a_method_the_installed_langgraph_lacks_is_not_part_of_the_matrices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from langgraph.checkpoint.base import BaseCheckpointSaver

    has, absent = implemented(InMemorySaver(), "langgraph")
    assert "aprune" in dict(absent) and "aput" in has
    for method in ("aprune", "prune"):  # as in a LangGraph from before pruning
        monkeypatch.delattr(BaseCheckpointSaver, method)
    has, absent = implemented(InMemorySaver(), "langgraph")
    assert "aprune" not in dict(absent) and "aprune" not in has and "aput" in has
    reach = EcosystemReach("langgraph", has, absent)
    assert not [c for c in reach.cells() if "prune" in c[1]]
    assert not [n for n in reach.unreachable() if "prune" in n]


def test_lengths_rows_and_the_sweeps_cost_that_the_docs_quote() -> None:
    rows = lengths(DEFAULT_MAX_LENGTH)
    assert rows == [
        1,
        2,
        3,
        5,
        9,
        10,
        11,
        17,
        33,
        65,
        100,
        101,
        102,
        129,
        257,
        513,
        1000,
        1001,
        1025,
    ]
    assert all(limit in rows and limit + 1 in rows for limit in LENGTH_LIMITS)
    assert set(lengths(129)) == {n for n in rows if n <= 129} | {129}
    page = " ".join((DOCS / "ecosystems" / "langgraph.md").read_text().split())
    assert f"{rows[-1] + 1:,} `aput` calls on the growing thread" in page
    assert f"{sum(rows):,} on the threads that are copied" in page
    assert f"and {rows[-1]:,} `aput_writes`" in page
    assert f"`max_length` ({rows[-1]:,} unless the target sets fewer)" in page


class _FailsOnce(InMemorySaver):
    """InMemorySaver whose next aput fails once ``fail`` is set (after or before writing)."""

    fail = False

    async def aput(self, *args: Any, **kwargs: Any) -> Any:
        result = await super().aput(*args, **kwargs)
        if self.fail:
            self.fail = False
            raise RuntimeError("lost the answer")
        return result


async def test_a_thread_is_counted_only_while_none_of_its_writes_failed() -> None:
    # a write that failed (or was cancelled) may have landed, or may land later: the probe
    # no longer knows the thread's length, so no `lengths` cell is claimed for it
    saver = _FailsOnce()
    with recording(CoverageRecorder()) as into:
        probed = probe(
            saver,
            "langgraph",
            "lengths",
            location=None,
            reopens=False,
            durable=False,
            holds=False,
        )
        for thread in ("kept", "lost"):
            for _ in range(2):
                await put(probed, thread, {"v": 1})
        saver.fail = True
        with pytest.raises(RuntimeError):
            await put(probed, "lost", {"v": 2})
        assert len([t async for t in probed.alist(config_of("lost"))]) == 3
        assert len([t async for t in probed.alist(config_of("kept"))]) == 2
        await probed.aget_tuple(config_of("lost"))
        found = into.snapshot("lengths")
    assert found is not None
    cells = {c for c in found[1] if c[0] == "lengths"}
    assert cells == {("lengths", "2", "alist")}


def test_an_id_is_a_twin_only_once_its_twin_is_known() -> None:
    """The ``ids`` matrix's twin rows are marked for an id only while an id that some
    comparison takes for the same one is known to the location; its own shapes at once."""
    shapes = IdShapes()
    assert shapes.rows("t-Case") == set()
    assert shapes.rows("t-case") == {"case twins"}
    assert shapes.rows("t-Case") == {"case twins"}  # the first learns of its twin
    assert shapes.rows("t_1") == set() and shapes.rows("ta1") == {"wildcard twins"}
    assert shapes.rows("t_1") == {"wildcard twins"}  # LIKE 't_1' matches 'ta1'
    assert shapes.rows("w") == set() and shapes.rows("w ") == {
        "trailing-space twins",
        "query syntax",
    }
    assert shapes.rows("caf\u00e9") == {"non-ASCII"}
    assert shapes.rows("cafe\u0301") == {"normalization twins", "non-ASCII"}
    long = "x" * (LONG + 1)
    assert shapes.rows(long + "1") == set() and shapes.rows(long + "2") == {"long twins"}
    assert shapes.rows("a/b") == {"separators"} and shapes.rows("c\t1") == {"control characters"}
    # the sweep's groups: every id of a twin row has a twin in its group
    for row, suffixes in ID_GROUPS.items():
        group = IdShapes()
        ids = [f"base.{row}-{s}" for s in suffixes]
        for i in ids:
            group.rows(i)
        assert all(row in group.rows(i) for i in ids), row


def test_a_namespace_is_a_prefix_twin_only_once_its_twin_is_known_in_its_thread() -> None:
    """The ``namespaces`` matrix's ``prefix twins`` column is marked for a namespace only
    while another of the same thread begins with it, or it with that one; its depth and
    query syntax at once."""
    shapes = NamespaceShapes()
    assert shapes.columns("t", "") == {"root"}
    assert shapes.columns("t", "p:1") == {"child"}
    assert shapes.columns("u", "p:10") == {"child"}  # another thread: not a twin
    assert shapes.columns("t", "p:10") == {"child", "prefix twins"}
    assert shapes.columns("t", "p:1") == {"child", "prefix twins"}  # it learns of its twin
    assert shapes.columns("t", "p:1|c:2") == {"nested", "prefix twins"}
    assert shapes.columns("t", "") == {"root"}  # the root is no one's twin
    assert shapes.columns("t", "agent_1:x") == {"child", "query syntax"}
    # the sweep's groups: each is of the shape it names (nested: beside its parents)
    for column, group in NAMESPACE_GROUPS.items():
        if column == "deep twins":  # no column of its own: nested ones, alike in 255 characters
            twins = [ns for ns in group if ns]
            assert all(len(ns) > 255 and "nested" in shapes_of(ns) for ns in twins)
            assert len({ns[:255] for ns in twins}) == 1 < len(twins)
            continue
        seen = NamespaceShapes()
        for ns in group:
            seen.columns("t", ns)
        having = [ns for ns in group if column in seen.columns("t", ns)]
        shaped = [ns for ns in group if ns and (column != "nested" or "|" in ns)]
        if column == "query syntax":
            shaped.remove("agentX1:t")  # plain itself: the twin that LIKE 'agent_1:t' matches
        assert having == shaped, column
    assert {c for g in NAMESPACE_GROUPS.values() for ns in g for c in shapes_of(ns)} | {
        "prefix twins"
    } == set(NAMESPACE_COLUMNS)
