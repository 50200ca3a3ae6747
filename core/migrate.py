"""Copy existing LangGraph and agent-framework checkpoints into any checkpointkit backend.

The source is read through the peer's own saver or storage (LangGraph's
``SqliteSaver``, ``InMemorySaver`` or any ``BaseCheckpointSaver``;
agent-framework's ``FileCheckpointStorage``, ``InMemoryCheckpointStorage`` or
any ``CheckpointStorage``) and written through checkpointkit's integrations
(`CheckpointkitSaver`,
`CheckpointkitCheckpointStorage`),
keeping ids, parents, metadata, pending writes and order: afterwards the
target's latest checkpoint of each thread (or workflow) is the source's.

A migration is safe to run again and resumes where an interrupted one stopped:
checkpoints are copied oldest first, a LangGraph checkpoint's pending writes
before its record, and a checkpoint present in the target is skipped.

From the command line::

    checkpointkit migrate langgraph-sqlite graphs.db --to file:///var/ckpt
    checkpointkit migrate agent-framework-file ./checkpoints --to redis://127.0.0.1:6379/0
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .cli import EXIT_OK, EXIT_USAGE, CliError, Output, command
from .errors import CheckpointkitError, ConfigurationError

if TYPE_CHECKING:  # pragma: no cover
    from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

    from .integrations.agent_framework import CheckpointkitCheckpointStorage
    from .integrations.langgraph import CheckpointkitSaver

__all__ = ["MigrationReport", "migrate_agent_framework", "migrate_langgraph"]

Progress = Callable[["MigrationReport"], None]


@dataclass
class MigrationReport:
    """What a migration did (or, with ``dry_run``, would do).

    Attributes:
        source: what was read (``langgraph`` or ``agent-framework``).
        groups: threads (with their namespace) or workflows found.
        checkpoints: checkpoints found in the source.
        copied: checkpoints written to the target by this call.
        skipped: checkpoints the target held already (an earlier run).
        writes: pending writes copied along with the checkpoints.
        dry_run: nothing was written.
    """

    source: str
    groups: int = 0
    checkpoints: int = 0
    copied: int = 0
    skipped: int = 0
    writes: int = 0
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict (the CLI's ``--json`` document)."""
        return asdict(self)


# -- LangGraph ------------------------------------------------------------------------------
async def migrate_langgraph(
    source: BaseCheckpointSaver[Any],
    target: CheckpointkitSaver,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> MigrationReport:
    """Copy every checkpoint of a LangGraph saver, with its pending writes, into ``target``.

    Args:
        source: any saver with a working synchronous ``list`` (``SqliteSaver``,
            ``InMemorySaver``...); it is only read.
        target: the checkpointkit saver to write to.
        dry_run: count what would be copied, write nothing.
        progress: called with the report after each checkpoint.

    Returns:
        What was found and copied.
    """
    report = MigrationReport("langgraph", dry_run=dry_run)
    groups: dict[tuple[str, str], list[CheckpointTuple]] = {}
    for tup in source.list(None):
        conf = tup.config["configurable"]
        groups.setdefault((str(conf["thread_id"]), conf.get("checkpoint_ns", "") or ""), []).append(
            tup
        )
    report.groups = len(groups)
    report.checkpoints = sum(len(g) for g in groups.values())
    for (thread_id, ns), tuples in sorted(groups.items()):
        # Oldest first (LangGraph's ids sort by time): parents land before their children,
        # and the newest is written last, so it is the target's latest.
        for tup in sorted(tuples, key=lambda t: t.config["configurable"]["checkpoint_id"]):
            checkpoint_id = tup.config["configurable"]["checkpoint_id"]
            at: Any = {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint_id,
                }
            }
            if await target.aget_tuple(at) is not None:
                report.skipped += 1
            else:
                report.writes += len(tup.pending_writes or ())
                if not dry_run:
                    await _copy_langgraph(target, tup, thread_id, ns, at)
                report.copied += 1
            if progress is not None:
                progress(report)
    return report


async def _copy_langgraph(
    target: CheckpointkitSaver, tup: CheckpointTuple, thread_id: str, ns: str, at: Any
) -> None:
    # The writes first: a checkpoint present in the target has all of its writes, so
    # an interrupted migration resumes by skipping the checkpoints it finds.
    by_task: dict[str, list[tuple[str, Any]]] = {}
    for task_id, channel, value in tup.pending_writes or ():
        by_task.setdefault(task_id, []).append((channel, value))
    for task_id, writes in by_task.items():
        await target.aput_writes(at, writes, task_id)
    parent: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if tup.parent_config is not None:
        parent["checkpoint_id"] = tup.parent_config["configurable"]["checkpoint_id"]
    checkpoint = tup.checkpoint
    await target.aput(
        {"configurable": parent},
        checkpoint,
        tup.metadata,
        dict(checkpoint["channel_versions"]),  # every value, however old its version
    )


# -- agent-framework ------------------------------------------------------------------------
def _file_workflow_names(directory: Path) -> list[str]:
    """The workflow names in a ``FileCheckpointStorage`` directory (its JSON files)."""
    names: set[str] = set()
    for path in directory.glob("*.json"):
        try:
            with path.open(encoding="utf-8") as f:
                name = json.load(f).get("workflow_name")
        except (OSError, ValueError, AttributeError):
            continue  # not a checkpoint: the storage's own listing skips it too
        if isinstance(name, str):
            names.add(name)
    return sorted(names)


def _workflow_names(source: Any) -> list[str]:
    storage_path = getattr(source, "storage_path", None)
    if isinstance(storage_path, Path):
        return _file_workflow_names(storage_path)
    stored = getattr(source, "_checkpoints", None)  # InMemoryCheckpointStorage
    if isinstance(stored, dict):
        return sorted({c.workflow_name for c in stored.values()})
    raise ValueError(
        f"cannot list the workflows of a {type(source).__name__}; "
        "pass workflow_names=[...] to migrate_agent_framework"
    )


async def migrate_agent_framework(
    source: Any,
    target: CheckpointkitCheckpointStorage,
    *,
    workflow_names: Iterable[str] | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> MigrationReport:
    """Copy every checkpoint of an agent-framework checkpoint storage into ``target``.

    Args:
        source: a ``CheckpointStorage`` (``FileCheckpointStorage``,
            ``InMemoryCheckpointStorage``, or another with ``workflow_names``);
            it is only read.
        target: the checkpointkit storage to write to.
        workflow_names: the workflows to copy; None finds them all (file and
            in-memory storages).
        dry_run: count what would be copied, write nothing.
        progress: called with the report after each checkpoint.

    Returns:
        What was found and copied.

    Raises:
        ValueError: ``workflow_names`` is None and the source cannot list its workflows.
    """
    names = sorted(set(workflow_names)) if workflow_names is not None else _workflow_names(source)
    report = MigrationReport("agent-framework", dry_run=dry_run, groups=len(names))
    found = {name: await source.list_checkpoints(workflow_name=name) for name in names}
    report.checkpoints = sum(len(c) for c in found.values())
    for name in names:
        present = set(await target.list_checkpoint_ids(workflow_name=name))
        # Oldest first, as the source orders them by time: the newest is the target's latest.
        for checkpoint in sorted(found[name], key=lambda c: (c.timestamp, c.checkpoint_id)):
            if checkpoint.checkpoint_id in present:
                report.skipped += 1
            else:
                if not dry_run:
                    await target.save(checkpoint)
                report.copied += 1
            if progress is not None:
                progress(report)
    return report


# -- the command ------------------------------------------------------------------------------
SOURCES = ("langgraph-sqlite", "agent-framework-file")


def _migrate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", metavar="SOURCE", choices=SOURCES, help=" or ".join(SOURCES))
    parser.add_argument(
        "path", metavar="PATH", help="the SqliteSaver database file, or the storage's directory"
    )
    parser.add_argument("--to", required=True, metavar="URL", help="the checkpointkit storage URL")
    parser.add_argument(
        "--prefix",
        default=None,
        help="key prefix in the target (default: the integration's, langgraph or agent-framework)",
    )
    parser.add_argument("--dry-run", action="store_true", help="count what would be copied")


def _progress(out: Output) -> Progress:
    def show(report: MigrationReport) -> None:
        done = report.copied + report.skipped
        if done == report.checkpoints or done % 50 == 0 or out.err_is_terminal:
            end = "\r" if out.err_is_terminal and done < report.checkpoints else "\n"
            verb = "would copy" if report.dry_run else "copied"
            out.stderr.write(
                f"migrate: {done}/{report.checkpoints} checkpoint(s), {verb} {report.copied}, "
                f"skipped {report.skipped}{end}"
            )
            out.stderr.flush()

    return show


async def _run_migration(args: argparse.Namespace, out: Output) -> MigrationReport:
    path = Path(args.path)
    if args.kind == "langgraph-sqlite":
        try:
            from langgraph.checkpoint.sqlite import SqliteSaver

            from .integrations.langgraph import CheckpointkitSaver
        except ImportError as exc:
            raise CliError(
                f'{exc}; install them with: pip install "checkpointkit[langgraph]" '
                "langgraph-checkpoint-sqlite",
                EXIT_USAGE,
            ) from None
        connection = sqlite3.connect(str(path), check_same_thread=False)
        try:
            lg_options = {} if args.prefix is None else {"prefix": args.prefix}
            async with CheckpointkitSaver.from_url(args.to, **lg_options) as saver:
                return await migrate_langgraph(
                    SqliteSaver(connection), saver, dry_run=args.dry_run, progress=_progress(out)
                )
        finally:
            connection.close()
    try:
        from agent_framework import FileCheckpointStorage

        from .integrations.agent_framework import CheckpointkitCheckpointStorage
    except ImportError as exc:
        raise CliError(
            f'{exc}; install it with: pip install "checkpointkit[agent-framework]"', EXIT_USAGE
        ) from None
    af_options = {} if args.prefix is None else {"prefix": args.prefix}
    async with CheckpointkitCheckpointStorage.from_url(args.to, **af_options) as storage:
        return await migrate_agent_framework(
            FileCheckpointStorage(str(path)),
            storage,
            dry_run=args.dry_run,
            progress=_progress(out),
        )


@command(
    "migrate",
    help="Copy LangGraph or agent-framework checkpoints into a checkpointkit storage.",
    arguments=_migrate_arguments,
    storage=False,
)
def migrate_command(args: argparse.Namespace, out: Output) -> int:
    """Copy every checkpoint of a LangGraph SqliteSaver database (langgraph-sqlite PATH.db) or
    an agent-framework FileCheckpointStorage directory (agent-framework-file DIR) into the
    storage --to names, keeping ids, parents, metadata, pending writes and order. Safe to run
    again: checkpoints already copied are skipped, so an interrupted migration resumes."""
    path = Path(args.path)
    if args.kind == "langgraph-sqlite" and not path.is_file():
        raise CliError(f"no SqliteSaver database at {str(path)!r}", EXIT_USAGE)
    if args.kind == "agent-framework-file" and not path.is_dir():
        raise CliError(f"no FileCheckpointStorage directory at {str(path)!r}", EXIT_USAGE)
    try:
        report = asyncio.run(_run_migration(args, out))
    except ConfigurationError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    except (CheckpointkitError, sqlite3.Error, ValueError, OSError) as exc:
        raise CliError(f"{type(exc).__name__}: {exc}") from None
    if out.json:
        out.document(report.as_dict())
    else:
        verb = "would copy" if report.dry_run else "copied"
        out.print(
            f"{report.checkpoints} checkpoint(s) in {report.groups} "
            f"{'thread(s)' if report.source == 'langgraph' else 'workflow(s)'}: "
            f"{verb} {report.copied}, skipped {report.skipped} already present"
        )
    return EXIT_OK
