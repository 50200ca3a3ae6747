"""The mutation corpus proves the suite: every mutant is killed by a test that names the clause
it breaks, in every run, and its correct twin passes that test in every run.

CI runs a rotating sample (two mutants a day, by the day of the year) ten times each side,
and every mutant once; ``scripts/kill-table`` runs them all, ten times each side, and
prints the table (see docs/conformance.md, "The mutation corpus").
"""

from __future__ import annotations

import datetime

import pytest
from checkpointkit.conformance.clauses import CLAUSES, clauses_of
from checkpointkit.conformance.suite import GROUP_CLASSES

from .broken.corpus import AWAITING, MUTANTS, UNPROVEN, Mutant, by_name, sample
from .broken.killtable import table, trial

RUNS = 5
"""Runs of the day's sample, each side (the kill table runs a mutant ten times when it is added)."""
TODAY = [m.name for m in sample()]


def _killer(mutant: Mutant) -> object:
    return getattr(GROUP_CLASSES[mutant.group], mutant.killer, None)


def test_the_corpus_has_40_mutants_each_with_a_twin_and_a_killer_that_names_its_clauses() -> None:
    assert len(MUTANTS) >= 40
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)
    for mutant in MUTANTS:
        killer = _killer(mutant)
        if killer is None:
            assert mutant.killer in AWAITING, f"{mutant.name}: no {mutant.killer} in {mutant.group}"
            continue
        named = set(clauses_of(killer))
        assert set(mutant.clauses) <= named, (mutant.name, mutant.clauses, named)
        assert mutant.mistake, mutant.name


def _ready(mutant: Mutant) -> None:
    if _killer(mutant) is None:
        pytest.skip(f"{mutant.killer} is not in the suite yet: {AWAITING[mutant.killer]}")


def test_every_clause_is_proven_by_a_mutant_or_says_why_not() -> None:
    proven = {c for m in MUTANTS for c in m.clauses}
    every = {c.id for c in CLAUSES}
    assert proven <= every, proven - every
    assert set(UNPROVEN) == every - proven, sorted(every - proven)
    assert all(reason for reason in UNPROVEN.values())


def test_the_sample_rotates_through_the_whole_corpus() -> None:
    seen = {
        m.name
        for day in range(366)
        for m in sample(datetime.date(2028, 1, 1) + datetime.timedelta(days=day))
    }
    assert seen == {m.name for m in MUTANTS}
    assert by_name(TODAY[0]).name == TODAY[0]
    with pytest.raises(KeyError, match="no mutant 'nope'"):
        by_name("nope")


@pytest.mark.parametrize("name", TODAY)
async def test_todays_sample_is_killed_every_run_and_its_twin_passes_every_run(name: str) -> None:
    mutant = by_name(name)
    _ready(mutant)
    broken = await trial(mutant, "broken", RUNS)
    twin = await trial(mutant, "twin", RUNS)
    text = table([(mutant, broken, twin)])
    assert broken.failed == RUNS, f"{text}\n{broken.reasons}"
    assert twin.passed == RUNS, f"{text}\n{twin.reasons}"
    assert max(broken.seconds) < 60, text


@pytest.mark.parametrize("name", [m.name for m in MUTANTS])
async def test_every_mutant_is_killed(name: str) -> None:
    mutant = by_name(name)
    _ready(mutant)
    broken = await trial(mutant, "broken", 1)
    assert broken.failed == 1, f"{name}: {broken.reasons}"
