"""The clause registry: every rule of the protocol has an id, a doc anchor and a test."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from checkpointkit.conformance import StorageConformance
from checkpointkit.conformance.clauses import (
    CLAUSES,
    PROTOCOL_PAGE,
    checks,
    clause,
    clauses_of,
)

DOCS = Path(__file__).resolve().parents[2] / "docs"
TAG = re.compile(r'<a class="clause" id="([^"]+)" href="#([^"]+)">\[([^\]]+)\]</a>')

NOT_YET_TESTED: set[str] = set()
"""Clauses that no test of the suite checks yet: this set only shrinks (see below)."""


def _suite_tests() -> dict[str, tuple[str, ...]]:
    return {
        name: clauses_of(getattr(StorageConformance, name))
        for name in dir(StorageConformance)
        if name.startswith("test_")
    }


def test_every_clause_has_a_test() -> None:
    tagged = {c for ids in _suite_tests().values() for c in ids}
    untested = [c.id for c in CLAUSES if c.id not in tagged and c.id not in NOT_YET_TESTED]
    assert not untested, f"clauses that no test of the suite checks: {untested}"
    stale = sorted(NOT_YET_TESTED & tagged)
    assert not stale, f"clauses now tested, remove them from NOT_YET_TESTED: {stale}"


def test_every_test_of_the_suite_names_known_clauses() -> None:
    known = {c.id for c in CLAUSES}
    untagged = [name for name, ids in _suite_tests().items() if not ids]
    assert not untagged, f"tests of the suite that name no clause: {untagged}"
    unknown = {name: ids for name, ids in _suite_tests().items() if set(ids) - known}
    assert not unknown, f"tests that name unknown clauses: {unknown}"


def test_every_protocol_clause_is_an_anchor_of_the_protocol_page() -> None:
    text = (DOCS / PROTOCOL_PAGE).read_text(encoding="utf-8")
    tags = TAG.findall(text)
    assert all(a == b == c for a, b, c in tags), [t for t in tags if len(set(t)) > 1]
    in_doc = [t[0] for t in tags]
    assert len(in_doc) == len(set(in_doc)), "a clause is tagged twice on the protocol page"
    expected = {c.anchor or c.id for c in CLAUSES if c.page == PROTOCOL_PAGE}
    assert set(in_doc) == expected, (
        f"missing on the page: {sorted(expected - set(in_doc))}; "
        f"not in the registry: {sorted(set(in_doc) - expected)}"
    )


def test_every_clause_of_another_page_links_to_an_existing_heading() -> None:
    for c in CLAUSES:
        if c.page == PROTOCOL_PAGE:
            continue
        text = (DOCS / c.page).read_text(encoding="utf-8")
        headings = {
            re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            for line in text.splitlines()
            if line.startswith("#")
        }
        assert c.anchor in headings, f"{c.id}: no heading #{c.anchor} on {c.page}"


def test_clause_ids_are_short_and_readable() -> None:
    for c in CLAUSES:
        assert re.fullmatch(r"[a-z0-9]+(?:[.-][a-z0-9]+)+", c.id), c.id
        assert len(c.id) <= 32, c.id
        assert c.title and not c.title.endswith("."), c.id


def test_checks_rejects_an_unknown_clause_naming_the_closest() -> None:
    with pytest.raises(ValueError, match=r"unknown protocol clause 'put.atomik'.*put\.atomic"):
        checks("put.atomik")
    with pytest.raises(ValueError, match="at least one"):
        checks()
    with pytest.raises(KeyError, match=r"list\.ordr"):
        clause("list.ordr")


def test_checks_stores_the_ids_on_the_function_and_adds_up() -> None:
    @checks("put.atomic")
    @checks("list.order", "put.atomic")
    async def probe() -> None:
        pass

    assert clauses_of(probe) == ("list.order", "put.atomic")
    assert clause("put.atomic").doc == "storage-protocol.md#put.atomic"
    assert clause("runner.g1-snapshot").doc == "runner.md#g1-snapshot-at-completion"
