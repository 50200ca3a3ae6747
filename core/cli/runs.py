"""Commands that inspect and remove runs: ``runs``, ``ls``, ``show``, ``rm``, ``prune``.

Each one handles the three kinds of data that `checkpointkit.cli._layouts`
recognises: checkpointkit runs, LangGraph threads (`CheckpointkitSaver`) and
agent-framework workflows (`CheckpointkitCheckpointStorage`). A name is
looked up among all three; ``--kind`` says which when it names several.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pprint
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..errors import CheckpointkitError
from ..store import Checkpoint, CheckpointStore
from ._base import (
    _UNITS,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Output,
    _human_time,
    _non_negative_int,
    _positive_int,
    command,
    confirm,
    destructive_arguments,
    duration,
    iso_time,
    storage_url,
    with_store,
)
from ._langgraph import LangGraphData
from ._layouts import KINDS, Kind, Target, recognise, resolve

__all__ = [
    "ls_command",
    "prune_command",
    "rm_command",
    "runs_command",
    "show_command",
]


@dataclass(frozen=True, slots=True)
class _Pruned:
    """What the run's head keeps of its newest checkpoint when that checkpoint is not stored.

    ``missing``: it was not pruned (the head names a checkpoint above the pruned
    ones): its writer is about to write it, or died before it did.
    """

    checkpoint_id: str
    status: str
    created_at: float
    missing: bool = False


async def _pruned(store: CheckpointStore, run: str) -> _Pruned | None:
    info = await store.run_info(run)
    if info is None or info.checkpoint <= 0:
        return None
    missing = info.checkpoint > info.pruned_to
    return _Pruned(str(info.checkpoint), info.status, info.updated_at, missing)


async def _latest_or_head(
    store: CheckpointStore, run: str
) -> tuple[Checkpoint | None, _Pruned | None]:
    """The newest checkpoint, and if none is left, what the run's head still records."""
    latest = await store.latest(run)
    if latest is not None:
        return latest, None
    return None, await _pruned(store, run)


def _summary(run: str, latest: Checkpoint | None, head: _Pruned | None) -> dict[str, Any]:
    """The ``runs`` entry of one run (see docs/cli.md for the fields)."""
    if latest is not None:
        return {
            "run_id": run,
            "status": latest.status,
            "checkpoint_id": latest.checkpoint_id,
            "steps": latest.steps,
            "created_at": iso_time(latest.created_at),
            "pruned": False,
        }
    if head is not None:
        entry: dict[str, Any] = {
            "run_id": run,
            "status": head.status,
            "checkpoint_id": head.checkpoint_id,
            "steps": None,
            "created_at": iso_time(head.created_at),
            "pruned": not head.missing,
        }
        if head.missing:
            entry["missing_checkpoint"] = True
        return entry
    return {
        "run_id": run,
        "status": None,
        "checkpoint_id": None,
        "steps": None,
        "created_at": None,
        "pruned": False,
    }


def _status_text(entry: Mapping[str, Any]) -> str:
    if entry.get("error"):
        return "damaged (see below)"
    if entry["status"] is None and entry["checkpoint_id"] is None:
        return "running or crashed"
    status: str = entry["status"]
    if entry.get("missing_checkpoint"):
        return (
            f"{status}, checkpoint {entry['checkpoint_id']} missing "
            "(its writer is writing it, or died first: resume the run)"
        )
    return f"{status} (checkpoints pruned)" if entry["pruned"] else status


async def _summary_or_damage(store: CheckpointStore, run: str) -> dict[str, Any]:
    """The ``runs`` entry of one run, or, if its records are damaged, one with the error."""
    try:
        return _summary(run, *await _latest_or_head(store, run))
    except (CheckpointkitError, ValueError) as exc:
        return {
            "run_id": run,
            "status": None,
            "checkpoint_id": None,
            "steps": None,
            "created_at": None,
            "pruned": False,
            "error": f"{type(exc).__name__}: {exc}",
        }


def _runs_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--limit",
        type=_positive_int,
        default=100,
        metavar="N",
        help="show at most N runs (default 100)",
    )
    parser.add_argument(
        "--status",
        action="append",
        metavar="S",
        help="only runs with this status (running, paused, completed, failed, created); "
        "repeat it or separate with commas for several",
    )
    parser.add_argument(
        "--older-than",
        type=duration,
        metavar="DURATION",
        help="only runs whose newest checkpoint is older than this (30s, 10m, 2h, 7d)",
    )
    parser.add_argument(
        "--meta",
        action="append",
        type=_meta_pair,
        metavar="KEY=VALUE",
        help="only runs whose newest checkpoint's metadata has KEY equal to VALUE "
        "(VALUE read as JSON if it is JSON, else as text); repeatable",
    )


def _meta_pair(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    return key, value


def _run_filters(args: argparse.Namespace) -> dict[str, Any]:
    """The filters of ``runs`` as `CheckpointStore.list_runs` takes them."""
    filters: dict[str, Any] = {}
    if args.status:
        statuses = sorted({s.strip() for given in args.status for s in given.split(",")} - {""})
        if not statuses:
            raise CliError("--status needs a status (running, paused, completed...)", EXIT_USAGE)
        filters["status"] = statuses
    if args.older_than is not None:
        filters["older_than"] = args.older_than
    if args.meta:
        filters["metadata"] = dict(args.meta)
    return filters


@command(
    "runs",
    help="List the runs, LangGraph threads and agent-framework workflows in the storage.",
    arguments=_runs_arguments,
)
def runs_command(args: argparse.Namespace, out: Output) -> int:
    """List the runs in the storage (ascending run id), with their latest checkpoint.

    A run without any checkpoint shows as "running or crashed"; a run whose
    checkpoints were all pruned keeps its status from the run's head; a run
    whose head names a checkpoint that is not stored says so. A run whose
    records cannot be read is listed as damaged with its error, after every
    other run, and the command exits 1.
    --status, --older-than and --meta keep the runs that match all of them
    (status and age from each run's head: one read per run).
    LangGraph threads and agent-framework workflows stored through
    checkpointkit are listed after the runs (not with a filter), each with
    its number of checkpoints and its newest one.
    """
    filters = _run_filters(args)

    async def action(store: CheckpointStore) -> dict[str, Any]:
        ids = await store.list_runs(limit=args.limit, **filters)
        found: dict[str, Any] = {"runs": [await _summary_or_damage(store, run) for run in ids]}
        if filters:
            return found
        holdings = await recognise(store.storage, args.namespace)
        threads: list[dict[str, Any]] = []
        workflows: list[dict[str, Any]] = []
        for data in holdings.data(store.storage):
            if isinstance(data, LangGraphData):
                threads += await data.threads(limit=args.limit)
            else:
                workflows += await data.workflows(limit=args.limit)
        if holdings.langgraph:
            found["threads"] = threads
        if holdings.agent_framework:
            found["workflows"] = workflows
        return found

    found = with_store(args, action, read_only=True)
    runs: list[dict[str, Any]] = found["runs"]
    damaged = [r for r in runs if r.get("error")]
    broken = [t for t in found.get("threads", []) if t.get("error")]
    code = EXIT_FAILED if damaged or broken else EXIT_OK
    if out.json:
        doc: dict[str, Any] = {"storage": storage_url(args), "namespace": args.namespace}
        if filters:  # only when filtered: the unfiltered document keeps its three fields
            doc["filters"] = {
                "status": filters.get("status"),
                "older_than": filters.get("older_than"),
                "metadata": filters.get("metadata"),
            }
        doc["runs"] = runs
        for extra in ("threads", "workflows"):  # only when the store holds some
            if extra in found:
                doc[extra] = found[extra]
        out.document(doc)
        return code
    if not runs and "threads" not in found and "workflows" not in found:
        out.print("no runs" if not filters else "no runs match")
        return EXIT_OK
    if runs:
        out.table(
            ("run", "status", "latest checkpoint", "steps", "created at"),
            [
                (
                    r["run_id"],
                    _status_text(r),
                    r["checkpoint_id"] or "-",
                    "-" if r["steps"] is None else str(r["steps"]),
                    _human_time_iso(r["created_at"]),
                )
                for r in runs
            ],
            right=(2, 3),
        )
    _print_threads(out, found.get("threads"), first=not runs)
    _print_workflows(out, found.get("workflows"), first=not runs and "threads" not in found)
    for r in damaged:
        out.error(f"run {r['run_id']} is damaged: {r['error']}")
    for t in broken:
        out.error(f"LangGraph thread {t['thread_id']} is damaged: {t['error']}")
    return code


def _by_prefix(entries: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        grouped.setdefault(entry["prefix"], []).append(entry)
    return grouped


def _print_threads(out: Output, threads: list[dict[str, Any]] | None, *, first: bool) -> None:
    if threads is None:
        return
    for n, (prefix, entries) in enumerate(_by_prefix(threads).items()):
        if not (first and n == 0):
            out.print()
        out.print(f"LangGraph threads (prefix {prefix!r})")
        out.table(
            ("thread", "checkpoints", "namespaces", "latest checkpoint", "step", "created at"),
            [
                (
                    t["thread_id"],
                    str(t["checkpoints"]),
                    ", ".join(repr(ns) for ns in t["namespaces"]),
                    t["checkpoint_id"] + (" (damaged, see below)" if t.get("error") else ""),
                    "-" if t["step"] is None else str(t["step"]),
                    _human_time_iso(t["created_at"]),
                )
                for t in entries
            ],
            right=(1,),
        )


def _print_workflows(out: Output, workflows: list[dict[str, Any]] | None, *, first: bool) -> None:
    if workflows is None:
        return
    for n, (prefix, entries) in enumerate(_by_prefix(workflows).items()):
        if not (first and n == 0):
            out.print()
        out.print(f"agent-framework workflows (prefix {prefix!r})")
        out.table(
            ("workflow", "checkpoints", "latest checkpoint", "created at"),
            [
                (
                    w["workflow"],
                    str(w["checkpoints"]),
                    w["checkpoint_id"],
                    _human_time_iso(w["created_at"]),
                )
                for w in entries
            ],
            right=(1,),
        )


def _human_time_iso(iso: str | None) -> str:
    if iso is None:
        return "-"
    try:
        return _human_time(datetime.fromisoformat(iso).timestamp())
    except (TypeError, ValueError):  # a time an integration stored as it came
        return str(iso)


def _name_argument(parser: argparse.ArgumentParser) -> None:
    """``RUN`` (a run id, a LangGraph thread id or an agent-framework workflow name) and
    ``--kind``."""
    parser.add_argument(
        "run",
        metavar="RUN",
        help="the run id, LangGraph thread id or agent-framework workflow name",
    )
    _kind_argument(parser)


def _kind_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kind",
        choices=tuple(KINDS),
        default=None,
        help="what RUN names, when it names several: a checkpointkit run, a LangGraph thread "
        "or an agent-framework workflow (default: whichever exists)",
    )


async def _target(store: CheckpointStore, args: argparse.Namespace) -> Target:
    """The run, thread or workflow that ``RUN`` (and ``--kind``) name; see `resolve`."""
    kind: Kind | None = args.kind
    return await resolve(
        store.storage, args.namespace, args.run, kind=kind, run_exists=store.run_exists
    )


def _name_fields(target: Target) -> dict[str, Any]:
    """The leading fields of a thread's or workflow's JSON document."""
    name = "thread_id" if target.kind == "thread" else "workflow"
    return {"kind": target.kind, "prefix": target.prefix, name: target.name}


def _checkpoint_entry(cp: Checkpoint) -> dict[str, Any]:
    return {
        "checkpoint_id": cp.checkpoint_id,
        "status": cp.status,
        "steps": cp.steps,
        "created_at": iso_time(cp.created_at),
        "pending": [r.id for r in cp.pending],
        "parent_id": cp.parent_id,
    }


def _ls_arguments(parser: argparse.ArgumentParser) -> None:
    _name_argument(parser)
    parser.add_argument(
        "--limit",
        type=_positive_int,
        default=50,
        metavar="N",
        help="list at most N checkpoints, the newest (default 50)",
    )


async def _ls_run(store: CheckpointStore, run: str, limit: int) -> dict[str, Any]:
    ids = await store.list_checkpoints(run, limit=limit)
    entries: list[dict[str, Any]] = []
    status: str | None = None
    for cp_id in ids:
        try:
            cp = await store.load_checkpoint(run, cp_id)
        except (CheckpointkitError, ValueError) as exc:  # listed as damaged, not fatal
            entries.append({"checkpoint_id": cp_id, "error": f"{type(exc).__name__}: {exc}"})
            continue
        entries.append(_checkpoint_entry(cp))
        status = status or cp.status
    steps = await store.load_steps(run)
    head = None if ids else await _pruned(store, run)
    return {
        "run_id": run,
        "checkpoints": entries,
        "pruned": head is not None and not head.missing,
        "status": status if ids else (head.status if head else None),
        "steps": [
            {"seq": r.seq, "step": r.step, "writes": sorted(r.writes)}
            for r in sorted(steps.values(), key=lambda r: r.seq)
        ],
    }


@command(
    "ls",
    help="List the checkpoints (newest first) of a run, a thread or a workflow.",
    arguments=_ls_arguments,
)
def ls_command(args: argparse.Namespace, out: Output) -> int:
    """List a run's checkpoints, newest first, and its completed steps in completion order.

    For a LangGraph thread, its checkpoints (every namespace) with their step,
    source, parent and pending-write records; for an agent-framework
    workflow, its checkpoints with their previous one and pending requests.
    """

    async def action(store: CheckpointStore) -> dict[str, Any]:
        target = await _target(store, args)
        if target.kind == "run":
            return await _ls_run(store, target.name, args.limit)
        data = target.data(store.storage)
        return await data.checkpoints(target.name, limit=args.limit)

    found = with_store(args, action, read_only=True)
    damaged = [c for c in found["checkpoints"] if "error" in c]
    code = EXIT_FAILED if damaged else EXIT_OK
    if out.json:
        out.document(found)
        return code
    if found.get("kind") == "thread":
        _print_thread_checkpoints(out, found)
    elif found.get("kind") == "workflow":
        _print_workflow_checkpoints(out, found)
    else:
        _print_run_checkpoints(out, found)
    what = {"thread": "LangGraph thread", "workflow": "agent-framework workflow"}.get(
        found.get("kind", ""), "run"
    )
    for c in damaged:
        out.error(f"checkpoint {c['checkpoint_id']} of {what} {args.run} is damaged: {c['error']}")
    return code


def _print_run_checkpoints(out: Output, found: dict[str, Any]) -> None:
    run = found["run_id"]
    out.print(f"checkpoints of run {run}")
    if found["checkpoints"]:
        out.table(
            ("id", "status", "steps", "created at", "pending input", "parent"),
            [
                (c["checkpoint_id"], "damaged (see below)", "-", "-", "-", "-")
                if "error" in c
                else (
                    c["checkpoint_id"],
                    c["status"],
                    str(c["steps"]),
                    _human_time_iso(c["created_at"]),
                    ", ".join(c["pending"]) or "-",
                    c["parent_id"] or "-",
                )
                for c in found["checkpoints"]
            ],
        )
    elif found["pruned"]:
        out.print(f"none left: every checkpoint was pruned (status {found['status']})")
    else:
        out.print("none yet")
    out.print()
    out.print(f"completed steps of run {run}")
    if found["steps"]:
        out.table(
            ("#", "step", "state writes"),
            [(str(s["seq"]), s["step"], ", ".join(s["writes"]) or "-") for s in found["steps"]],
            right=(0,),
        )
    else:
        out.print("none")


def _dash(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def _print_thread_checkpoints(out: Output, found: dict[str, Any]) -> None:
    out.print(f"checkpoints of LangGraph thread {found['thread_id']} (prefix {found['prefix']!r})")
    if not found["checkpoints"]:
        out.print("none")
        return
    out.table(
        ("id", "namespace", "step", "source", "created at", "writes", "parent"),
        [
            (
                c["checkpoint_id"],
                repr(c["checkpoint_ns"]),
                "damaged (see below)",
                "-",
                "-",
                "-",
                "-",
            )
            if "error" in c
            else (
                c["checkpoint_id"],
                repr(c["checkpoint_ns"]),
                _dash(c["step"]),
                _dash(c["source"]),
                _human_time_iso(c["created_at"]),
                str(c["write_records"]),
                _dash(c["parent_id"]),
            )
            for c in found["checkpoints"]
        ],
    )


def _print_workflow_checkpoints(out: Output, found: dict[str, Any]) -> None:
    out.print(
        f"checkpoints of agent-framework workflow {found['workflow']} (prefix {found['prefix']!r})"
    )
    if not found["checkpoints"]:
        out.print("none")
        return
    out.table(
        ("id", "created at", "iteration", "pending requests", "previous"),
        [
            (c["checkpoint_id"], _human_time_iso(c["created_at"]), "damaged (see below)", "-", "-")
            if "error" in c
            else (
                c["checkpoint_id"],
                _human_time_iso(c["created_at"]),
                _dash(c["iteration_count"]),
                ", ".join(c["pending_requests"]) or "-",
                _dash(c["previous_checkpoint_id"]),
            )
            for c in found["checkpoints"]
        ],
    )


def _show_arguments(parser: argparse.ArgumentParser) -> None:
    _name_argument(parser)
    parser.add_argument(
        "checkpoint", metavar="CHECKPOINT", nargs="?", help="checkpoint id (default: the latest)"
    )


@command(
    "show",
    help="Show one checkpoint of a run, a thread or a workflow, decoded.",
    arguments=_show_arguments,
)
def show_command(args: argparse.Namespace, out: Output) -> int:
    """Show one checkpoint of a run, decoded (the latest unless CHECKPOINT is given).

    If every checkpoint of the run was pruned, shows the status its head kept.
    For a LangGraph thread, the checkpoint's channels (stored inline or apart,
    serializer, size, version, value decoded where cheap), metadata and
    pending writes (the latest of the root namespace unless CHECKPOINT is
    given); for an agent-framework workflow, the checkpoint's state, messages
    and pending requests (pickled values by type and size, never unpickled).
    """
    run: str = args.run
    checkpoint: str | None = args.checkpoint

    async def action(
        store: CheckpointStore,
    ) -> tuple[Checkpoint | None, _Pruned | None, dict[str, Any] | None]:
        target = await _target(store, args)
        if target.kind != "run":
            return None, None, await target.data(store.storage).show(target.name, checkpoint)
        if checkpoint is not None:
            return await store.load_checkpoint(run, checkpoint), None, None
        latest, head = await _latest_or_head(store, run)
        if latest is None and head is None:
            raise CheckpointkitError(f"run {run!r} has no checkpoint yet")
        return latest, head, None

    cp, head, integration = with_store(args, action, read_only=True)
    if integration is not None:
        if out.json:
            out.document(integration)
        elif integration["kind"] == "thread":
            _print_thread_checkpoint(out, integration)
        else:
            _print_workflow_checkpoint(out, integration)
        return EXIT_OK
    if cp is None:
        assert head is not None
        doc: dict[str, Any] = {
            "run_id": run,
            "checkpoint_id": head.checkpoint_id,
            "status": head.status,
            "created_at": iso_time(head.created_at),
            "pruned": True,
        }
        if out.json:
            out.document(doc)
        else:
            out.print(
                f"run {run}  checkpoint {head.checkpoint_id}  status {head.status}  "
                f"created {_human_time(head.created_at)}  (pruned: the checkpoint was deleted; "
                "the run's head keeps its id, status and time)"
            )
        return EXIT_OK
    doc = {
        "run_id": cp.run_id,
        "checkpoint_id": cp.checkpoint_id,
        "status": cp.status,
        "created_at": iso_time(cp.created_at),
        "state": dict(cp.state),
        "pending": [{"id": r.id, "step": r.step, "payload": r.payload} for r in cp.pending],
        "output": cp.output,
        "error": cp.error,
        "metadata": dict(cp.metadata),
        "parent_id": cp.parent_id,
        "steps": cp.steps,
        "pruned": False,
    }
    if out.json:
        out.document(doc)
        return EXIT_OK
    out.print(
        f"run {cp.run_id}  checkpoint {cp.checkpoint_id}  status {cp.status}  "
        f"created {_human_time(cp.created_at)}"
    )
    body = {
        "state": dict(cp.state),
        "pending": doc["pending"],
        "output": cp.output,
        "error": cp.error,
        "metadata": dict(cp.metadata),
        "parent": cp.parent_id,
        "steps": cp.steps,
    }
    out.print(pprint.pformat(body, sort_dicts=False, width=_width()))
    return EXIT_OK


def _value_text(entry: Mapping[str, Any]) -> str:
    if entry.get("error"):
        return f"<{entry['error']}>"
    if not entry["decoded"]:
        return f"<{entry['type']}, {entry['bytes']} bytes, not decoded>"
    return repr(entry["value"])


def _print_thread_checkpoint(out: Output, doc: dict[str, Any]) -> None:
    out.print(
        f"LangGraph thread {doc['thread_id']}  checkpoint {doc['checkpoint_id']}  "
        f"namespace {doc['checkpoint_ns']!r}  created {_human_time_iso(doc['created_at'])}  "
        f"parent {_dash(doc['parent_id'])}"
    )
    out.print(pprint.pformat({"metadata": doc["metadata"]}, sort_dicts=False, width=_width()))
    out.print()
    out.print("channels")
    if doc["channels"]:
        out.table(
            ("channel", "stored", "type", "bytes", "version", "value"),
            [
                (
                    c["channel"],
                    c["stored"],
                    c["type"],
                    _dash(c["bytes"]),
                    _dash(c["version"]),
                    _value_text(c),
                )
                for c in doc["channels"]
            ],
            right=(3,),
        )
    else:
        out.print("none")
    out.print()
    out.print("pending writes")
    if doc["pending_writes"]:
        out.table(
            ("task", "channel", "type", "bytes", "value"),
            [
                (w["task_id"], w["channel"], w["type"], str(w["bytes"]), _value_text(w))
                for w in doc["pending_writes"]
            ],
            right=(3,),
        )
    else:
        out.print("none")


def _print_workflow_checkpoint(out: Output, doc: dict[str, Any]) -> None:
    out.print(
        f"agent-framework workflow {doc['workflow']}  checkpoint {doc['checkpoint_id']}  "
        f"created {_human_time_iso(doc['created_at'])}  "
        f"previous {_dash(doc['previous_checkpoint_id'])}"
    )
    body = {
        "iteration_count": doc["iteration_count"],
        "state": doc["state"],
        "messages": doc["messages"],
        "pending_request_info_events": doc["pending_request_info_events"],
        "metadata": doc["metadata"],
    }
    out.print(pprint.pformat(body, sort_dicts=False, width=_width()))


def _width() -> int:
    try:
        return max(40, int(os.environ.get("COLUMNS", "")))
    except ValueError:
        return 100


def _rm_arguments(parser: argparse.ArgumentParser) -> None:
    _name_argument(parser)
    destructive_arguments(parser)


@command(
    "rm",
    help="Delete a run (input, steps, checkpoints, lease), a thread or a workflow.",
    arguments=_rm_arguments,
)
def rm_command(args: argparse.Namespace, out: Output) -> int:
    """Delete every key of a run, then its index entry (asks first unless --yes).

    For a LangGraph thread, every key of the thread (heads and checkpoints
    first, then pending writes and channel values, every namespace); for an
    agent-framework workflow, its head, its markers and their checkpoints.
    """
    run: str = args.run

    async def action(store: CheckpointStore) -> dict[str, Any]:
        target = await _target(store, args)
        if target.kind != "run":
            return await _rm_integration(store, target, args, out)
        keys = [key async for key in store.storage.list(store.run_prefix(run))]
        doc: dict[str, Any] = {"run_id": run, "dry_run": args.dry_run, "keys": keys, "deleted": 0}
        if not args.dry_run:
            confirm(out, args, f"delete run {run!r} ({len(keys)} keys)?")
            doc["deleted"] = await store.delete_run(run)
        return doc

    done = with_store(args, action)
    if out.json:
        out.document(done)
    elif "kind" in done:
        what = f"{KINDS[done['kind']]} {run}"
        if args.dry_run:
            out.print(f"would delete {what} ({len(done['keys'])} keys):")
            for key in done["keys"]:
                out.print(f"  {key}")
        else:
            out.print(f"deleted {what} ({done['deleted']} keys)")
    elif args.dry_run:
        out.print(f"would delete run {run} ({len(done['keys'])} keys and its index entry):")
        for key in done["keys"]:
            out.print(f"  {key}")
    else:
        out.print(f"deleted run {run} ({done['deleted']} keys)")
    return EXIT_OK


async def _rm_integration(
    store: CheckpointStore, target: Target, args: argparse.Namespace, out: Output
) -> dict[str, Any]:
    data = target.data(store.storage)
    if isinstance(data, LangGraphData):
        keys = await data.thread_keys(target.name)
    else:
        keys = await data.workflow_keys(target.name)
    doc: dict[str, Any] = {
        **_name_fields(target),
        "dry_run": args.dry_run,
        "keys": keys,
        "deleted": 0,
    }
    if not args.dry_run:
        confirm(out, args, f"delete {target.described} ({len(keys)} keys)?")
        doc["deleted"] = await data.delete_keys(keys)
    return doc


def _prune_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run",
        metavar="RUN",
        nargs="?",
        help="the run id, LangGraph thread id or agent-framework workflow name (with "
        "--older-than: a run, default every run)",
    )
    _kind_argument(parser)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--keep",
        type=_non_negative_int,
        metavar="N",
        help="checkpoints to keep, the newest (0: delete every checkpoint; the run's "
        "status stays readable); of a LangGraph thread, per namespace",
    )
    which.add_argument(
        "--older-than",
        type=duration,
        metavar="DURATION",
        help="delete the checkpoints saved longer ago than this (30s, 10m, 2h, 7d), of RUN "
        "or of every run",
    )
    destructive_arguments(parser)


_PRUNE_CONCURRENCY = 16
"""Runs examined at once by ``prune --older-than`` without a RUN."""


@command(
    "prune",
    help="Delete old checkpoints: all but the newest N of a run, thread or workflow; or by age.",
    arguments=_prune_arguments,
)
def prune_command(args: argparse.Namespace, out: Output) -> int:
    """Delete old checkpoints (asks first unless --yes).

    --keep N deletes all but the newest N checkpoints of RUN; --older-than
    DURATION deletes the checkpoints saved longer ago than DURATION, of RUN or,
    without RUN, of every run. Step records stay, so a run can still be
    resumed, and the run's head keeps the id and status of its newest
    checkpoint, so ``runs`` and ``show`` still tell how the run ended when
    every checkpoint is gone.
    For a LangGraph thread, --keep N keeps the newest N checkpoints of each
    namespace and deletes the others with their pending writes and the
    channel values that only they referenced; for an agent-framework
    workflow, it deletes all but its newest N checkpoints and their markers.
    Either's head is pointed at the newest checkpoint left.
    """
    if args.older_than is not None:
        return _prune_by_age(args, out)
    run: str | None = args.run
    keep: int = args.keep
    if run is None:
        raise CliError(
            "prune --keep needs a RUN (only --older-than applies to every run)", EXIT_USAGE
        )

    async def action(store: CheckpointStore) -> dict[str, Any]:
        target = await _target(store, args)
        if target.kind != "run":
            return await _prune_integration(store, target, keep, args, out)
        doomed = (await store.list_checkpoints(run))[keep:]
        doc: dict[str, Any] = {
            "run_id": run,
            "keep": keep,
            "dry_run": args.dry_run,
            "checkpoints": doomed,
            "deleted": 0,
        }
        if doomed and not args.dry_run:
            confirm(out, args, f"delete {len(doomed)} checkpoint(s) of run {run!r}?")
            doc["deleted"] = await store.prune(run, keep_last=keep)
        return doc

    done = with_store(args, action)
    if out.json:
        out.document(done)
    elif "kind" in done:
        what = f"{KINDS[done['kind']]} {run}"
        count = len(done["checkpoints"])
        others = len(done["keys"]) - count - (count if done["kind"] == "workflow" else 0)
        also = (
            f" and {others} pending-write record(s) and value(s)"
            if done["kind"] == "thread" and others > 0
            else ""
        )
        per = " of each namespace" if done["kind"] == "thread" else ""
        if args.dry_run:
            ids = ", ".join(done["checkpoints"]) or "none"
            out.print(
                f"would prune {count} checkpoint(s){also} of {what} (ids: {ids}), keeping the "
                f"newest {keep}{per}"
            )
        else:
            out.print(
                f"pruned {count} checkpoint(s) of {what} ({done['deleted']} keys deleted), "
                f"kept the newest {keep}{per}"
            )
    elif args.dry_run:
        ids = ", ".join(done["checkpoints"]) or "none"
        out.print(
            f"would prune {len(done['checkpoints'])} checkpoint(s) of run {run} "
            f"(ids: {ids}), keeping the newest {keep}"
        )
    else:
        out.print(f"pruned {done['deleted']} checkpoint(s) of run {run}, kept the newest {keep}")
    return EXIT_OK


async def _prune_integration(
    store: CheckpointStore, target: Target, keep: int, args: argparse.Namespace, out: Output
) -> dict[str, Any]:
    """``prune THREAD --keep N`` or ``prune WORKFLOW --keep N``."""
    data = target.data(store.storage)
    ids: list[str]
    if isinstance(data, LangGraphData):
        plan = await data.prune_plan(target.name, keep)
        ids, keys = [cid for _, cid in plan.checkpoints], plan.keys
    else:
        af_plan = await data.prune_plan(target.name, keep)
        ids, keys = af_plan.checkpoints, af_plan.keys
    doc: dict[str, Any] = {
        **_name_fields(target),
        "keep": keep,
        "dry_run": args.dry_run,
        "checkpoints": ids,
        "keys": keys,
        "deleted": 0,
    }
    if ids and not args.dry_run:
        confirm(out, args, f"delete {len(ids)} checkpoint(s) of {target.described}?")
        if isinstance(data, LangGraphData):
            doc["deleted"] = await data.apply_prune(target.name, plan)
        else:
            doc["deleted"] = await data.apply_prune(target.name, af_plan)
    return doc


def _age_text(seconds: float) -> str:
    for unit in ("w", "d", "h", "m"):
        if seconds >= _UNITS[unit] and seconds % _UNITS[unit] == 0:
            return f"{seconds / _UNITS[unit]:g}{unit}"
    return f"{seconds:g}s"


def _prune_by_age(args: argparse.Namespace, out: Output) -> int:
    """``prune [RUN] --older-than DURATION``: what is shown (or confirmed) is what goes."""
    run: str | None = args.run
    age: float = args.older_than
    started = time.time()  # one cutoff for the look and the deletion, however long confirm takes

    async def action(store: CheckpointStore) -> dict[str, Any]:
        if run is not None:
            target = await _target(store, args)
            if target.kind != "run":
                raise CliError(
                    f"prune --older-than applies to checkpointkit runs; for "
                    f"{target.described} use --keep N",
                    EXIT_USAGE,
                )
            ids = [run]
        else:
            ids = await store.list_runs()
        gate = asyncio.Semaphore(_PRUNE_CONCURRENCY)

        async def doomed(run_id: str) -> list[str]:
            async with gate:
                return await store.checkpoints_older_than(run_id, age)

        found = await asyncio.gather(*(doomed(r) for r in ids))
        runs: list[dict[str, Any]] = [
            {"run_id": r, "checkpoints": cps, "deleted": 0}
            for r, cps in zip(ids, found, strict=True)
            if cps or r == run
        ]
        total = sum(len(r["checkpoints"]) for r in runs)
        if total and not args.dry_run:
            where = f"run {run!r}" if run is not None else f"{len(runs)} run(s)"
            confirm(
                out,
                args,
                f"delete {total} checkpoint(s) of {where} older than {_age_text(age)}?",
            )
            cutoff_age = age + (time.time() - started)

            async def prune(entry: dict[str, Any]) -> None:
                async with gate:
                    entry["deleted"] = await store.prune(entry["run_id"], older_than=cutoff_age)

            await asyncio.gather(*(prune(r) for r in runs if r["checkpoints"]))
        return {"runs": runs}

    found = with_store(args, action)
    runs: list[dict[str, Any]] = found["runs"]
    deleted = sum(r["deleted"] for r in runs)
    if out.json:
        if run is not None:
            out.document(
                {
                    "run_id": run,
                    "older_than": age,
                    "dry_run": args.dry_run,
                    "checkpoints": runs[0]["checkpoints"],
                    "deleted": deleted,
                }
            )
        else:
            out.document(
                {"older_than": age, "dry_run": args.dry_run, "runs": runs, "deleted": deleted}
            )
        return EXIT_OK
    older = f"older than {_age_text(age)}"
    if not any(r["checkpoints"] for r in runs):
        out.print(f"no checkpoint {older}" + (f" in run {run}" if run is not None else ""))
        return EXIT_OK
    for r in runs:
        count = len(r["checkpoints"])
        if args.dry_run:
            ids = ", ".join(r["checkpoints"])
            out.print(
                f"would prune {count} checkpoint(s) of run {r['run_id']} {older} (ids: {ids})"
            )
        else:
            out.print(f"pruned {r['deleted']} checkpoint(s) of run {r['run_id']} {older}")
    return EXIT_OK
