"""The suite runs its folders longest first (``_LONGEST_FIRST`` in tests/conftest.py), so
that pytest-xdist's last runs of tests are short ones; every folder has its place."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_folder_has_a_place_in_the_run_order() -> None:
    from tests.conftest import _LONGEST_FIRST  # type: ignore[import-not-found]

    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and any(p.glob("test_*.py"))}
    assert folders == set(_LONGEST_FIRST)


def test_the_collection_runs_the_folders_in_that_order(request: pytest.FixtureRequest) -> None:
    from tests.conftest import _LONGEST_FIRST

    seen: list[str] = []
    for item in request.session.items:
        folder = item.nodeid.split("/")[1]
        if not seen or seen[-1] != folder:
            seen.append(folder)
    assert seen == [f for f in _LONGEST_FIRST if f in seen]  # each folder once, in order
