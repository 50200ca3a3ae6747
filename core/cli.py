"""The ``checkpointkit`` command line: inspect runs, run the conformance suite, run the demo."""

from __future__ import annotations

import typer

__all__ = ["app", "main"]

app = typer.Typer(
    name="checkpointkit",
    help="Durable checkpoints for async workflows: inspect stored runs, prove a storage backend.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

DEFAULT_STORAGE = "./.checkpoints"


@app.callback()
def _root() -> None:
    """checkpointkit: durable checkpoints for async workflows."""


def main() -> None:
    """Entry point of the ``checkpointkit`` console script."""
    app()
