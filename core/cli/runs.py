"""Commands that inspect and remove runs: ``runs``, ``ls``, ``show``, ``rm``, ``prune``."""

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
    require_run,
    run_argument,
    storage_url,
    with_store,
)

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
    help="List the runs in the storage, with their latest checkpoint.",
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
    """
    filters = _run_filters(args)

    async def action(store: CheckpointStore) -> list[dict[str, Any]]:
        ids = await store.list_runs(limit=args.limit, **filters)
        return [await _summary_or_damage(store, run) for run in ids]

    runs = with_store(args, action, read_only=True)
    damaged = [r for r in runs if r.get("error")]
    code = EXIT_FAILED if damaged else EXIT_OK
    if out.json:
        doc: dict[str, Any] = {"storage": storage_url(args), "namespace": args.namespace}
        if filters:  # only when filtered: the unfiltered document keeps its three fields
            doc["filters"] = {
                "status": filters.get("status"),
                "older_than": filters.get("older_than"),
                "metadata": filters.get("metadata"),
            }
        doc["runs"] = runs
        out.document(doc)
        return code
    if not runs:
        out.print("no runs" if not filters else "no runs match")
        return EXIT_OK
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
    for r in damaged:
        out.error(f"run {r['run_id']} is damaged: {r['error']}")
    return code


def _human_time_iso(iso: str | None) -> str:
    return "-" if iso is None else _human_time(datetime.fromisoformat(iso).timestamp())


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
    run_argument(parser)
    parser.add_argument(
        "--limit",
        type=_positive_int,
        default=50,
        metavar="N",
        help="list at most N checkpoints, the newest (default 50)",
    )


@command(
    "ls",
    help="List a run's checkpoints (newest first) and completed steps.",
    arguments=_ls_arguments,
)
def ls_command(args: argparse.Namespace, out: Output) -> int:
    """List a run's checkpoints, newest first, and its completed steps in completion order."""
    run: str = args.run

    async def action(store: CheckpointStore) -> dict[str, Any]:
        await require_run(store, run)
        ids = await store.list_checkpoints(run, limit=args.limit)
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

    found = with_store(args, action, read_only=True)
    damaged = [c for c in found["checkpoints"] if "error" in c]
    code = EXIT_FAILED if damaged else EXIT_OK
    if out.json:
        out.document(found)
        return code
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
    for c in damaged:
        out.error(f"checkpoint {c['checkpoint_id']} of run {run} is damaged: {c['error']}")
    return code


def _show_arguments(parser: argparse.ArgumentParser) -> None:
    run_argument(parser)
    parser.add_argument(
        "checkpoint", metavar="CHECKPOINT", nargs="?", help="checkpoint id (default: the latest)"
    )


@command("show", help="Show one checkpoint of a run, decoded.", arguments=_show_arguments)
def show_command(args: argparse.Namespace, out: Output) -> int:
    """Show one checkpoint of a run, decoded (the latest unless CHECKPOINT is given).

    If every checkpoint of the run was pruned, shows the status its head kept.
    """
    run: str = args.run
    checkpoint: str | None = args.checkpoint

    async def action(store: CheckpointStore) -> tuple[Checkpoint | None, _Pruned | None]:
        await require_run(store, run)
        if checkpoint is not None:
            return await store.load_checkpoint(run, checkpoint), None
        latest, head = await _latest_or_head(store, run)
        if latest is None and head is None:
            raise CheckpointkitError(f"run {run!r} has no checkpoint yet")
        return latest, head

    cp, head = with_store(args, action, read_only=True)
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


def _width() -> int:
    try:
        return max(40, int(os.environ.get("COLUMNS", "")))
    except ValueError:
        return 100


def _rm_arguments(parser: argparse.ArgumentParser) -> None:
    run_argument(parser)
    destructive_arguments(parser)


@command(
    "rm",
    help="Delete a run: its input, step records, checkpoints and lease.",
    arguments=_rm_arguments,
)
def rm_command(args: argparse.Namespace, out: Output) -> int:
    """Delete every key of a run, then its index entry (asks first unless --yes)."""
    run: str = args.run

    async def action(store: CheckpointStore) -> dict[str, Any]:
        await require_run(store, run)
        keys = [key async for key in store.storage.list(store.run_prefix(run))]
        doc: dict[str, Any] = {"run_id": run, "dry_run": args.dry_run, "keys": keys, "deleted": 0}
        if not args.dry_run:
            confirm(out, args, f"delete run {run!r} ({len(keys)} keys)?")
            doc["deleted"] = await store.delete_run(run)
        return doc

    done = with_store(args, action)
    if out.json:
        out.document(done)
    elif args.dry_run:
        out.print(f"would delete run {run} ({len(done['keys'])} keys and its index entry):")
        for key in done["keys"]:
            out.print(f"  {key}")
    else:
        out.print(f"deleted run {run} ({done['deleted']} keys)")
    return EXIT_OK


def _prune_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run", metavar="RUN", nargs="?", help="the run id (with --older-than: default every run)"
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--keep",
        type=_non_negative_int,
        metavar="N",
        help="checkpoints to keep, the newest (0: delete every checkpoint; the run's "
        "status stays readable)",
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
    help="Delete old checkpoints: all but the newest N of a run, or those older than an age.",
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
        await require_run(store, run)
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
    elif args.dry_run:
        ids = ", ".join(done["checkpoints"]) or "none"
        out.print(
            f"would prune {len(done['checkpoints'])} checkpoint(s) of run {run} "
            f"(ids: {ids}), keeping the newest {keep}"
        )
    else:
        out.print(f"pruned {done['deleted']} checkpoint(s) of run {run}, kept the newest {keep}")
    return EXIT_OK


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
            await require_run(store, run)
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
