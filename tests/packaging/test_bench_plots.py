"""The plots of docs/performance.md are drawn from the figures committed beside them
(docs/images/bench-plots.json, written by benchmarks/plots.py), byte for byte."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
IMAGES = ROOT / "docs" / "images"

pytest.importorskip("matplotlib")


def _plots() -> object:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import plots
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return plots


def test_the_plots_are_drawn_from_the_committed_figures(tmp_path: Path) -> None:
    plots = _plots()
    data = json.loads((IMAGES / "bench-plots.json").read_text())
    drawn = plots.draw(data, tmp_path)  # type: ignore[attr-defined]
    for path in drawn:
        committed = IMAGES / path.name
        assert committed.read_bytes() == path.read_bytes(), (
            f"docs/images/{path.name} is not what benchmarks/plots.py draws from "
            "bench-plots.json: run '.venv/bin/python benchmarks/plots.py --redraw'"
        )


def test_the_figures_cover_every_system_and_the_docs_show_every_plot() -> None:
    data = json.loads((IMAGES / "bench-plots.json").read_text())
    assert data["command"].startswith(".venv/bin/python benchmarks/plots.py")
    assert {"checkpointkit (memory)", "LangGraph (InMemorySaver)"} <= set(data["per_step"])
    assert max(int(n) for n in data["per_step"]["checkpointkit (memory)"]) >= 10_000
    assert any(name.startswith("agent-framework") for name in data["per_step"])
    assert {"LangGraph (AsyncSqliteSaver)", "checkpointkit (sqlite://)"} <= set(data["latest"])
    assert any(name.startswith("floor") for name in data["put_by_size"])
    page = (ROOT / "docs" / "performance.md").read_text()
    for name in _plots().PLOTS:  # type: ignore[attr-defined]
        assert f"(images/{name})" in page, name
