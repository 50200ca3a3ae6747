"""The suite finds real bugs: each broken adapter fails in the test named for its bug,
and the same code without the bug passes. Runs through the Python API (``run``)."""

from __future__ import annotations

import pytest
from checkpointkit.conformance import Report, Target, run

from .broken.adapters import (
    CreateOverwrites,
    GroupCommit,
    IfMatchIgnoresVersion,
    IOMemoryStorage,
    LandsLater,
    LeaksSession,
    LeavesTaskPending,
    ListCursorStuck,
    ListLeaksOutsidePrefix,
    NeverAwaits,
    NonAtomicPut,
    NumericVersionBatch,
    StaleReply,
    SwallowsCancel,
)

LEAK_TEST = "test_storage_leaves_nothing_behind_after_close"
CONTROL = "test_small_value_round_trips or test_concurrent_puts_to_distinct_keys_are_all_readable"
"""Tests that the broken adapters pass: each is wrong in one way, not in every way."""

# case: (adapter, groups, {test that must fail: words its reason must contain})
CASES: dict[str, tuple[type, list[str], dict[str, str]]] = {
    "put-not-atomic": (
        NonAtomicPut,
        ["concurrency", "cancellation"],
        {
            "test_concurrent_reader_sees_only_whole_values": "never a part",
            "test_cancelled_put_is_whole_or_absent": "only the first",
        },
    ),
    "put-swallows-cancellation": (
        SwallowsCancel,
        ["cancellation", "concurrency"],
        {"test_cancelled_put_raises_cancelled_error_promptly": "the cancellation was swallowed"},
    ),
    "put-lands-after-cancellation": (
        LandsLater,
        ["cancellation", "concurrency"],
        {"test_cancelled_put_does_not_land_later": "must not land later"},
    ),
    "create-only-overwrites": (
        CreateOverwrites,
        ["semantics", "concurrency"],
        {
            "test_create_only_rejects_existing_key": "to raise PreconditionFailed",
            "test_create_only_race_has_one_winner": "exactly one winner",
        },
    ),
    "if-match-ignores-version": (
        IfMatchIgnoresVersion,
        ["semantics", "concurrency"],
        {
            "test_if_match_put_rejects_stale_version": "refuse a stale version",
            "test_cas_race_has_one_winner": "exactly one winner",
            "test_cas_counter_ends_exact_under_concurrent_increments": "lost updates",
        },
    ),
    "if-match-compares-numbers-and-sinks-the-batch": (
        NumericVersionBatch,
        ["bad-input", "semantics"],
        {
            "test_if_match_version_of_another_form_never_matches": "must not match",
            "test_bad_if_match_version_fails_only_its_own_call": "and nothing else",
        },
    ),
    "list-leaks-outside-prefix": (
        ListLeaksOutsidePrefix,
        ["semantics", "concurrency"],
        {"test_list_prefix_isolates_keys": "unexpected keys"},
    ),
    "list-cursor-stuck": (
        ListCursorStuck,
        ["semantics"],
        {"test_list_pages_across_many_keys": "would never end"},
    ),
    "stale-reply-after-cancellation": (
        StaleReply,
        ["cancellation", "concurrency"],
        {"test_next_call_after_cancelled_get_gets_its_own_answer": "its own answer"},
    ),
    "unclosed-session": (LeaksSession, ["hygiene"], {LEAK_TEST: "nclosed client session"}),
    "task-left-pending": (LeavesTaskPending, ["hygiene"], {LEAK_TEST: "pending task"}),
    "coroutine-never-awaited": (NeverAwaits, ["hygiene"], {LEAK_TEST: "never awaited"}),
}


def _explain(report: Report) -> str:
    return report.summary()


@pytest.mark.parametrize("case", list(CASES))
async def test_suite_fails_broken_adapter_in_the_right_test(case: str) -> None:
    adapter, groups, expected = CASES[case]
    if adapter is LeaksSession:
        pytest.importorskip("aiohttp")
    pattern = " or ".join([*expected, CONTROL, "test_hygiene_catches_task_left_pending"])
    report = await run(Target(adapter, name=case), groups=groups, pattern=pattern)
    failed = report.failed_names()
    assert set(expected) <= failed, (
        f"{case}: expected failures {sorted(expected)}\n{_explain(report)}"
    )
    for name, words in expected.items():
        assert words in report.result(name).reason, report.result(name).reason
    assert not report.ok
    assert report.level != "full"
    if adapter not in (LeaksSession, LeavesTaskPending, NeverAwaits):
        # Wrong in one way, not in every way: the control tests pass.
        controls = [r for r in report.results if r.name not in expected]
        assert controls, _explain(report)
        assert all(r.outcome == "passed" for r in controls), _explain(report)


async def test_suite_passes_the_correct_twin_of_the_broken_adapters() -> None:
    report = await run(
        Target(IOMemoryStorage, name="io-memory"),
        groups=["semantics", "concurrency", "cancellation", "hygiene"],
    )
    assert report.ok, _explain(report)


async def test_suite_passes_the_correct_twin_of_the_numeric_version_batch() -> None:
    report = await run(Target(GroupCommit, name="group-commit"), groups=["bad-input", "semantics"])
    assert report.ok, _explain(report)


@pytest.mark.parametrize("spec", ["memory", "file"])
async def test_suite_passes_the_shipped_adapters_through_run(spec: str) -> None:
    report = await run(spec, groups=["concurrency"])
    assert report.ok, _explain(report)
    assert {"put", "get", "delete", "list"} <= set(report.latency)
    assert report.latency["put"]["p50_ms"] <= report.latency["put"]["p99_ms"]


async def test_a_model_test_failing_its_hygiene_check_names_the_seed_that_replays_it() -> None:
    report = await run(
        Target(LeavesTaskPending, name="leaves-task-pending"),
        groups=["model"],
        pattern="test_random_programs_fit_the_protocol_model",
        model_budget=0.5,
    )
    result = report.result("test_random_programs_fit_the_protocol_model")
    assert result.outcome == "failed", _explain(report)
    assert "pending" in result.reason  # the task the adapter left behind
    assert "--checkpointkit-model-seed" in result.reason, result.reason
