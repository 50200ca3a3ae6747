"""The ``checkpointkit`` command line: inspect runs, run the conformance suite, run the demo."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.pretty import Pretty
from rich.table import Table

from .errors import CheckpointkitError
from .registry import open_storage, url_scheme
from .store import CheckpointStore

__all__ = ["app", "main"]

DEFAULT_STORAGE = "./.checkpoints"

app = typer.Typer(
    name="checkpointkit",
    help="Durable checkpoints for async workflows: inspect stored runs, prove a storage backend.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

console = Console()
errors = Console(stderr=True)

T = TypeVar("T")

StorageOption = Annotated[
    str,
    typer.Option(
        "--storage",
        "-s",
        help="Storage URL: a path, file:///path, memory://, s3://..., az://..., redis://...",
        envvar="CHECKPOINTKIT_STORAGE",
    ),
]
NamespaceOption = Annotated[
    str, typer.Option("--namespace", "-n", help="Key prefix of the application's runs.")
]


def _fail(message: str, code: int = 1) -> None:
    errors.print(f"[bold red]error:[/] {message}", markup=True, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _run(url: str, namespace: str, action: Callable[[CheckpointStore], Awaitable[T]]) -> T:
    """Open the storage, run ``action`` on a store over it, close; errors become one line.

    The commands inspect or delete what is stored, so a file storage directory
    or SQLite database that does not exist is an error (a mistyped path), never
    created.
    """
    local = url_scheme(url) in ("file", "sqlite")
    options: dict[str, Any] = {"create": False} if local else {}

    async def go() -> T:
        async with open_storage(url, **options) as storage:
            return await action(CheckpointStore(storage, namespace=namespace))

    try:
        return asyncio.run(go())
    except CheckpointkitError as exc:
        _fail(str(exc))
    except (ValueError, OSError) as exc:
        _fail(f"{type(exc).__name__}: {exc}")
    raise AssertionError("unreachable")


@app.callback()
def _root() -> None:
    """checkpointkit: durable checkpoints for async workflows."""


@app.command("runs")
def runs_command(
    storage: StorageOption = DEFAULT_STORAGE,
    namespace: NamespaceOption = "",
    limit: Annotated[int, typer.Option(min=1, help="Show at most this many runs.")] = 100,
) -> None:
    """List the runs in the storage, with their latest checkpoint."""

    async def action(store: CheckpointStore) -> list[tuple[str, Any]]:
        ids = await store.list_runs(limit=limit)
        return [(run_id, await store.latest(run_id)) for run_id in ids]

    rows = _run(storage, namespace, action)
    table = Table(title=f"runs in {storage}")
    table.add_column("run")
    table.add_column("status")
    table.add_column("latest checkpoint", justify="right")
    table.add_column("steps", justify="right")
    for run_id, latest in rows:
        if latest is None:
            table.add_row(run_id, "running or crashed", "-", "-")
        else:
            table.add_row(run_id, latest.status, latest.checkpoint_id, str(latest.steps))
    console.print(table)
    if not rows:
        console.print("no runs")


@app.command("ls")
def ls_command(
    run: Annotated[str, typer.Argument(help="The run id.")],
    storage: StorageOption = DEFAULT_STORAGE,
    namespace: NamespaceOption = "",
) -> None:
    """List a run's checkpoints (newest first) and completed steps."""

    async def action(store: CheckpointStore) -> tuple[list[Any], dict[str, Any]]:
        await _require_run(store, run)
        ids = await store.list_checkpoints(run, limit=50)
        cps = [await store.load_checkpoint(run, cp) for cp in ids]
        return cps, await store.load_steps(run)

    checkpoints, steps = _run(storage, namespace, action)
    table = Table(title=f"checkpoints of run {run}")
    for col in ("id", "status", "steps", "pending input", "parent"):
        table.add_column(col)
    for cp in checkpoints:
        table.add_row(
            cp.checkpoint_id,
            cp.status,
            str(cp.steps),
            ", ".join(r.id for r in cp.pending) or "-",
            cp.parent_id or "-",
        )
    console.print(table)
    steps_table = Table(title=f"completed steps of run {run}")
    steps_table.add_column("#", justify="right")
    steps_table.add_column("step")
    steps_table.add_column("state writes")
    for record in sorted(steps.values(), key=lambda r: r.seq):
        steps_table.add_row(str(record.seq), record.step, ", ".join(record.writes) or "-")
    console.print(steps_table)


@app.command("show")
def show_command(
    run: Annotated[str, typer.Argument(help="The run id.")],
    checkpoint: Annotated[
        str | None, typer.Argument(help="Checkpoint id (default: the latest).")
    ] = None,
    storage: StorageOption = DEFAULT_STORAGE,
    namespace: NamespaceOption = "",
) -> None:
    """Show one checkpoint of a run, decoded."""

    async def action(store: CheckpointStore) -> Any:
        await _require_run(store, run)
        if checkpoint is None:
            latest = await store.latest(run)
            if latest is None:
                raise CheckpointkitError(f"run {run!r} has no checkpoint yet")
            return latest
        return await store.load_checkpoint(run, checkpoint)

    cp = _run(storage, namespace, action)
    console.print(f"[bold]run[/] {cp.run_id}  [bold]checkpoint[/] {cp.checkpoint_id}  "
                  f"[bold]status[/] {cp.status}")
    console.print(Pretty({
        "state": dict(cp.state),
        "pending": [{"id": r.id, "step": r.step, "payload": r.payload} for r in cp.pending],
        "output": cp.output,
        "error": cp.error,
        "metadata": dict(cp.metadata),
        "parent": cp.parent_id,
        "steps": cp.steps,
    }, expand_all=True))


@app.command("rm")
def rm_command(
    run: Annotated[str, typer.Argument(help="The run id.")],
    storage: StorageOption = DEFAULT_STORAGE,
    namespace: NamespaceOption = "",
) -> None:
    """Delete a run: its input, step records, checkpoints and lease."""

    async def action(store: CheckpointStore) -> int:
        await _require_run(store, run)
        return await store.delete_run(run)

    deleted = _run(storage, namespace, action)
    console.print(f"deleted run {run} ({deleted} keys)")


@app.command("prune")
def prune_command(
    run: Annotated[str, typer.Argument(help="The run id.")],
    keep: Annotated[int, typer.Option("--keep", min=0, help="Checkpoints to keep.")],
    storage: StorageOption = DEFAULT_STORAGE,
    namespace: NamespaceOption = "",
) -> None:
    """Delete all but the newest KEEP checkpoints of a run (step records stay)."""

    async def action(store: CheckpointStore) -> int:
        await _require_run(store, run)
        return await store.prune(run, keep_last=keep)

    deleted = _run(storage, namespace, action)
    console.print(f"pruned {deleted} checkpoint(s) of run {run}, kept the newest {keep}")


async def _require_run(store: CheckpointStore, run: str) -> None:
    if not await store.run_exists(run):
        raise CheckpointkitError(f"run {run!r} not found")


def _register_optional() -> None:
    from .demo import demo_command

    app.command("demo")(demo_command)
    try:
        from .conformance.cli import conformance_command
    except ModuleNotFoundError as exc:  # the suite's CLI is not in this build
        if exc.name != "checkpointkit.conformance.cli":
            raise
        return
    app.command("conformance")(conformance_command)


_register_optional()


def main() -> None:
    """Entry point of the ``checkpointkit`` console script."""
    try:
        app()
    except KeyboardInterrupt:  # pragma: no cover - interactive
        sys.exit(130)
