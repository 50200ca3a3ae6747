"""The documentation's API reference and layer diagram (issue 12, problem 9, the part about docs).

``.ci/run`` builds the site with ``mkdocs build --strict``; these tests check that the
reference covers every public module and stays wired into the site.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

DOCS = Path(__file__).parents[2] / "docs"
MKDOCS = Path(__file__).parents[2] / "mkdocs.yml"

PUBLIC_MODULES = (
    "checkpointkit.runner",
    "checkpointkit.events",
    "checkpointkit.store",
    "checkpointkit.codec",
    "checkpointkit.crypto",
    "checkpointkit.storage",
    "checkpointkit.registry",
    "checkpointkit.keys",
    "checkpointkit.errors",
    "checkpointkit.conformance.api",
    "checkpointkit.conformance.report",
    "checkpointkit.conformance.target",
    "checkpointkit.conformance.suite",
    "checkpointkit.integrations.langgraph",
    "checkpointkit.integrations.agent_framework",
    "checkpointkit.cli",
    "checkpointkit.observe",
    "checkpointkit.migrate",
)


def _config() -> dict[str, object]:
    class Loader(yaml.SafeLoader):
        pass

    # mkdocs.yml names a Python function for the mermaid fence; it does not matter here.
    Loader.add_multi_constructor("tag:yaml.org,2002:python/name:", lambda *_: None)
    config: dict[str, object] = yaml.load(MKDOCS.read_text(), Loader=Loader)
    return config


def test_the_api_reference_documents_every_public_module_from_its_docstrings() -> None:
    page = (DOCS / "api.md").read_text()
    documented = set(re.findall(r"^::: (\S+)$", page, flags=re.M))
    assert set(PUBLIC_MODULES) <= documented, set(PUBLIC_MODULES) - documented
    config = _config()
    plugins = config["plugins"]
    assert isinstance(plugins, list)
    assert any(isinstance(p, dict) and "mkdocstrings" in p for p in plugins)
    assert "api.md" in str(config["nav"])


def test_the_home_page_draws_the_layers() -> None:
    page = (DOCS / "index.md").read_text()
    diagram = page[page.index("```mermaid") :]
    diagram = diagram[: diagram.index("\n```\n")]
    for layer in ("runner", "store", "codec", "storage", "adapters", "conformance suite"):
        assert layer in diagram, layer
