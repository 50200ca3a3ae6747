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
    """A drawing that needs no script from the network (a mermaid block showed as raw text
    offline, issue 21): an SVG file beside the pages."""
    page = (DOCS / "index.md").read_text()
    assert "](images/layers.svg)" in page and "```mermaid" not in page
    diagram = (DOCS / "images" / "layers.svg").read_text()
    for layer in ("runner", "store", "codec", "storage", "adapters", "conformance suite"):
        assert layer in diagram, layer
    assert "http" not in diagram.replace("http://www.w3.org/2000/svg", "")  # loads nothing


def test_the_help_quoted_in_cli_md_lists_every_command_as_the_cli_does() -> None:
    from checkpointkit.cli import COMMANDS

    page = (DOCS / "cli.md").read_text()
    block = page[page.index("$ checkpointkit --help") :]
    block = block[: block.index("```")]
    listing = block[block.index("commands:") :]
    quoted = re.findall(r"^    (\S+)(?:\s+(.+))?$", listing, flags=re.M)
    names = [name for name, _ in quoted]
    assert names == list(COMMANDS), "docs/cli.md's --help: update it from checkpointkit --help"
    helps = " ".join(" ".join(line.split()) for line in listing.splitlines())
    for cmd in COMMANDS.values():
        assert cmd.help in helps, cmd.name


def test_the_home_page_lists_every_built_in_adapter() -> None:
    page = (DOCS / "index.md").read_text()
    shared = page[page.index("**Any storage, five operations.**") :]
    shared = " ".join(shared[: shared.index("\n- ")].split())
    for name in ("SQLite", "file", "S3", "Azure Blob", "Redis"):
        assert name in shared, name


def test_the_adapter_guides_line_count_is_the_examples() -> None:
    page = (DOCS / "writing-an-adapter.md").read_text()
    said = int(re.search(r"about (\d+) lines", page)[1])  # type: ignore[index]
    source = DOCS / "examples" / "sqlite_adapter" / "checkpointkit_sqlite" / "__init__.py"
    lines = len(source.read_text().splitlines())
    assert abs(lines - said) <= said * 0.1, f"the guide says about {said} lines; it has {lines}"


def test_no_docstring_holds_a_sphinx_role_that_the_api_reference_would_show_raw() -> None:
    """mkdocstrings renders Markdown: ``:func:`x``` would appear as raw text (issue 21)."""
    role = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj|const):`")
    found = [
        f"{path.relative_to(DOCS.parent)}:{n}"
        for folder in ("core", "adapters", "conformance")
        for path in sorted((DOCS.parent / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if role.search(line)
    ]
    assert not found, f"Sphinx roles (write `name` instead): {found[:10]}"


def test_the_built_site_shows_no_raw_sphinx_role(tmp_path: Path) -> None:
    """The site as a reader sees it: no page of the built HTML shows a Sphinx role as text
    (issue 21 counted 164 in the API reference). Builds the site as ``.ci/run`` does."""
    import subprocess
    import sys

    site = tmp_path / "site"
    mkdocs = Path(sys.executable).with_name("mkdocs")
    subprocess.run(
        [str(mkdocs), "build", "--strict", "--quiet", "--site-dir", str(site)],
        cwd=DOCS.parent,
        check=True,
        capture_output=True,
        timeout=300,
    )
    role = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj|const):(?:`|<code>)")
    pages = sorted(site.rglob("*.html"))
    assert (site / "api" / "index.html").exists(), "the build made no API reference page"
    found = [
        f"{page.relative_to(site)}: {m.group(0)}"
        for page in pages
        for m in role.finditer(page.read_text(errors="replace"))
    ]
    assert len(pages) > 10, f"the build made {len(pages)} pages"
    assert not found, f"raw Sphinx roles in the built site: {found[:10]}"
