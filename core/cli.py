"""The ``checkpointkit`` command line: inspect runs, run the conformance suite, run the demo.

Built on `argparse` from the standard library, so it works after a base
install (``pip install checkpointkit``): no extra is needed for ``--help``, the
run commands or the demo; ``conformance`` needs ``checkpointkit[conformance]``.

Output: plain aligned text (colour only on a terminal, never with ``NO_COLOR``),
or with ``--json`` one JSON document on standard output whose field names are
documented in ``docs/cli.md``. Errors are one line on standard error. Exit
status: `EXIT_OK` (0), `EXIT_FAILED` (1: the command ran and found
a failure: an unknown run, a storage error, a failed conformance test),
`EXIT_USAGE` (2: a bad command line or environment: an unknown option or
scheme, a missing directory or extra) and `EXIT_NO_TESTS` (5: a
conformance run that selected no test). 0, 1 and 5 mean what they mean to
pytest; a usage error is 2, as for every argparse program (pytest's 4).

Adding a command takes one function::

    @command("checksums", help="Check a run's checksums.", arguments=run_argument)
    def checksums_command(args: argparse.Namespace, out: Output) -> int:
        async def action(store: CheckpointStore) -> dict[str, Any]:
            await require_run(store, args.run)
            ...
        found = with_store(args, action)
        if out.json:
            out.document(found)
        else:
            out.print(...)
        return EXIT_OK if found["ok"] else EXIT_FAILED

``storage=True`` (the default) gives it ``--storage``/``-s`` and
``--namespace``/``-n``; every command gets ``--json`` and ``-h``. Raise
`CliError` for a one-line error with its exit status. A command that
deletes or rewrites adds `destructive_arguments` and calls
`confirm` first. A command defined in another module is registered when
that module is imported: list it in `COMMAND_MODULES`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import inspect
import json
import math
import os
import pprint
import re
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NoReturn, TextIO, TypeVar

from .codec import Codec
from .errors import CheckpointkitError, ConfigurationError
from .registry import open_storage, url_scheme
from .store import Checkpoint, CheckpointStore

__all__ = [
    "COMMANDS",
    "COMMAND_MODULES",
    "DEFAULT_STORAGE",
    "EXIT_FAILED",
    "EXIT_NO_TESTS",
    "EXIT_OK",
    "EXIT_USAGE",
    "KEYS_ENV",
    "PROGRESS_INTERVAL",
    "CliError",
    "Command",
    "Output",
    "RecordProgress",
    "build_parser",
    "command",
    "confirm",
    "destructive_arguments",
    "duration",
    "import_from_working_directory",
    "invoke",
    "iso_time",
    "jsonable",
    "main",
    "require_run",
    "run_argument",
    "storage_url",
    "with_store",
]

DEFAULT_STORAGE = "./.checkpoints"
"""The storage when neither ``--storage`` nor ``CHECKPOINTKIT_STORAGE`` names one."""

EXIT_OK = 0
"""Done, nothing wrong found."""
EXIT_FAILED = 1
"""The command ran and found a failure: an unknown run, a storage error, a failed test."""
EXIT_USAGE = 2
"""A bad command line or environment: unknown option or scheme, missing directory or extra."""
EXIT_NO_TESTS = 5
"""A conformance run that selected no test (pytest's status for "no tests collected")."""

T = TypeVar("T")


class CliError(Exception):
    """An error to print as one line on standard error, with the exit status to return.

    Args:
        message: what was wrong (without the ``error:`` prefix).
        code: `EXIT_FAILED` or `EXIT_USAGE`.
    """

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


# -- output ----------------------------------------------------------------------------------
def _wants_color(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Output:
    """Where a command writes: text or one JSON document on stdout, messages on stderr.

    Text is plain: aligned columns, nothing cut to the terminal's width, colour
    only when the stream is a terminal and ``NO_COLOR`` is not set.

    Args:
        json: the command was given ``--json``.
        stdout: the output stream (default ``sys.stdout``).
        stderr: the message stream (default ``sys.stderr``).
        stdin: where confirmations are read (default ``sys.stdin``).
    """

    def __init__(
        self,
        *,
        json: bool = False,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
        stdin: TextIO | None = None,
    ) -> None:
        self.json = json
        self.stdout = stdout if stdout is not None else sys.stdout
        self.stderr = stderr if stderr is not None else sys.stderr
        self.stdin = stdin if stdin is not None else sys.stdin
        self.color = _wants_color(self.stdout)
        self.err_color = _wants_color(self.stderr)

    @property
    def interactive(self) -> bool:
        """Whether a person can answer a question (standard input is a terminal)."""
        isatty = getattr(self.stdin, "isatty", None)
        return bool(isatty and isatty())

    @property
    def err_is_terminal(self) -> bool:
        """Whether standard error is a terminal (a progress line can be redrawn)."""
        isatty = getattr(self.stderr, "isatty", None)
        return bool(isatty and isatty())

    def paint(self, text: str, style: str, *, err: bool = False) -> str:
        """``text`` in ``style`` (bold, red, green, yellow, dim) on a colour terminal."""
        if not (self.err_color if err else self.color):
            return text
        code = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33"}[style]
        return f"\x1b[{code}m{text}\x1b[0m"

    def print(self, text: str = "") -> None:
        """One line (or several) on standard output."""
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def info(self, text: str) -> None:
        """A message for the person (progress, where a file went) on standard error."""
        self.stderr.write(text + "\n")
        self.stderr.flush()

    def error(self, message: str) -> None:
        """The one-line error on standard error: ``error: message``."""
        one_line = " ".join(message.split("\n"))
        self.info(f"{self.paint('error:', 'red', err=True)} {one_line}")

    def document(self, doc: Mapping[str, Any]) -> None:
        """The command's one JSON document on standard output."""
        self.stdout.write(json.dumps(jsonable(doc), indent=2, ensure_ascii=False) + "\n")
        self.stdout.flush()

    def table(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence[str]],
        *,
        right: Sequence[int] = (),
    ) -> None:
        """Rows under a header, columns padded to their widest value (nothing is cut)."""
        cells = [[_cell(v) for v in row] for row in rows]
        widths = [len(c) for c in columns]
        for row in cells:
            widths = [max(w, len(v)) for w, v in zip(widths, row, strict=True)]

        def line(values: Sequence[str]) -> str:
            parts = [
                v.rjust(w) if i in right else v.ljust(w)
                for i, (v, w) in enumerate(zip(values, widths, strict=True))
            ]
            return "  ".join(parts).rstrip()

        self.print(self.paint(line(columns), "bold"))
        for row in cells:
            self.print(line(row))


def _cell(value: str) -> str:
    """A table cell on one line: control characters shown as escapes."""
    if value.isprintable():
        return value
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in value)


def jsonable(value: Any) -> Any:
    """``value`` as JSON data: the conversion every ``--json`` document goes through.

    Mappings become objects (keys that are not ``str`` become their ``repr``),
    tuples, lists and sets become arrays, bytes become base64 strings,
    datetimes ISO 8601 strings, dataclasses and msgspec structs objects,
    infinite or NaN floats strings; anything else its ``repr``.
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Mapping):
        return {(k if isinstance(k, str) else repr(k)): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, set | frozenset):
        items = [jsonable(v) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    try:
        import msgspec

        converted = msgspec.to_builtins(value)
    except Exception:
        return repr(value)
    return repr(value) if converted is value else jsonable(converted)


def iso_time(timestamp: float | None) -> str | None:
    """A stored wall-clock time (seconds since the epoch) as ISO 8601 in UTC; None if unknown."""
    if not timestamp:
        return None
    return datetime.fromtimestamp(timestamp, UTC).isoformat()


def _human_time(timestamp: float | None) -> str:
    if not timestamp:
        return "-"
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# -- commands --------------------------------------------------------------------------------
Handler = Callable[[argparse.Namespace, Output], int]


@dataclass(frozen=True, slots=True)
class Command:
    """One subcommand of ``checkpointkit``.

    Attributes:
        name: what the user types.
        help: one line for the list of commands.
        handler: runs the command, returns the exit status.
        arguments: adds the command's own arguments to its parser.
        storage: the command takes ``--storage`` and ``--namespace``.
        json_flag: give the command the standard ``--json`` flag (a command
            that defines its own ``--json`` sets this to False).
    """

    name: str
    help: str
    handler: Handler
    arguments: Callable[[argparse.ArgumentParser], None] | None = None
    storage: bool = True
    json_flag: bool = True


COMMANDS: dict[str, Command] = {}
"""Every registered command, in the order of ``checkpointkit --help``."""


def command(
    name: str,
    *,
    help: str,
    arguments: Callable[[argparse.ArgumentParser], None] | None = None,
    storage: bool = True,
    json_flag: bool = True,
) -> Callable[[Handler], Handler]:
    """Register a function as the command ``name``; see the module documentation.

    The function's docstring is the command's description in its ``--help``.

    Raises:
        ValueError: a command of that name exists.
    """

    def register(handler: Handler) -> Handler:
        if name in COMMANDS:
            raise ValueError(f"a command named {name!r} is registered already")
        COMMANDS[name] = Command(name, help, handler, arguments, storage, json_flag)
        return handler

    return register


def run_argument(parser: argparse.ArgumentParser) -> None:
    """The ``RUN`` argument of the commands that act on one run."""
    parser.add_argument("run", metavar="RUN", help="the run id")


def storage_url(args: argparse.Namespace) -> str:
    """The storage named by ``--storage``, else ``CHECKPOINTKIT_STORAGE``, else the default."""
    given: str | None = getattr(args, "storage", None)
    return given or os.environ.get("CHECKPOINTKIT_STORAGE") or DEFAULT_STORAGE


def with_store(
    args: argparse.Namespace,
    action: Callable[[CheckpointStore], Awaitable[T]],
    *,
    codec: Codec | None = None,
    read_only: bool = False,
) -> T:
    """Open the storage, run ``action`` on a store over it, close it; errors become CliError.

    The commands inspect or delete what is stored, so a file storage directory
    or SQLite database that does not exist is an error (a mistyped path), never
    created, and a file that is not a checkpointkit store is refused. With
    ``read_only`` (the commands that change nothing) a SQLite database is
    opened read-only (``mode=ro``): its journal mode and tables stay as they
    are. ``codec`` is the store's codec (the default codec if None).

    Raises:
        CliError: with `EXIT_USAGE` for a `ConfigurationError` (a bad
            URL, a missing directory or extra), else `EXIT_FAILED`.
    """
    url = storage_url(args)
    namespace: str = getattr(args, "namespace", "") or ""

    async def go() -> T:
        scheme = url_scheme(url)
        options: dict[str, Any] = {"create": False} if scheme in ("file", "sqlite") else {}
        if read_only and scheme == "sqlite":
            options["read_only"] = True
        async with open_storage(url, **options) as storage:
            return await action(CheckpointStore(storage, codec=codec, namespace=namespace))

    try:
        return asyncio.run(go())
    except ConfigurationError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    except CheckpointkitError as exc:
        raise CliError(str(exc)) from None
    except (ValueError, OSError) as exc:
        raise CliError(f"{type(exc).__name__}: {exc}") from None


async def require_run(store: CheckpointStore, run: str) -> None:
    """Raise a `CheckpointkitError` naming ``run`` if it was never created."""
    if not await store.run_exists(run):
        raise CheckpointkitError(f"run {run!r} not found")


def confirm(out: Output, args: argparse.Namespace, question: str) -> None:
    """Ask before deleting (or rewriting), unless ``--yes``; refuse when nobody can answer.

    For commands that add `destructive_arguments`.

    Raises:
        CliError: the answer was not yes (exit 1), or standard input is not a
            terminal and ``--yes`` was not given (exit 2).
    """
    if args.yes:
        return
    if not out.interactive:
        raise CliError(
            f"{question.rstrip('?')}: not confirmed; pass --yes to delete without asking "
            "(standard input is not a terminal), or --dry-run to see what would go",
            EXIT_USAGE,
        )
    out.stderr.write(f"{question} [y/N] ")
    out.stderr.flush()
    answer = out.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise CliError("nothing deleted: not confirmed")


def destructive_arguments(parser: argparse.ArgumentParser) -> None:
    """``--dry-run`` and ``--yes``/``-y``, for commands that delete or rewrite what is stored."""
    parser.add_argument(
        "--dry-run", action="store_true", help="show what would be deleted, delete nothing"
    )
    parser.add_argument(
        "--yes", "-y", action="store_true", help="delete without asking for confirmation"
    )


def _positive_int(text: str) -> int:
    return _bounded_int(text, 1)


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def duration(text: str) -> float:
    """A duration on the command line in seconds: a number and a unit, ``30s``, ``10m``,
    ``2h``, ``7d``, ``2w`` (an argparse ``type``).

    Raises:
        argparse.ArgumentTypeError: anything else (argparse exits with status 2).
    """
    found = _DURATION.fullmatch(text.strip().lower())
    if found is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: use a number and a unit, s, m, h, d or w "
            "(30s, 10m, 2h, 7d)"
        )
    return float(found[1]) * _UNITS[found[2]]


def _non_negative_int(text: str) -> int:
    return _bounded_int(text, 0)


def _bounded_int(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be greater than or equal to {minimum}, not {value}")
    return value


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


# -- verify and rekey --------------------------------------------------------------------
KEYS_ENV = "CHECKPOINTKIT_KEYS"
"""The environment variable naming the keys file of ``verify`` and ``rekey`` (``--keys``)."""

PROGRESS_INTERVAL = 10.0
"""Seconds between two progress lines of ``verify`` and ``rekey`` off a terminal."""


def _store_url_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "url",
        metavar="URL",
        nargs="?",
        help="the storage (the same as --storage; default: $CHECKPOINTKIT_STORAGE, else "
        f"{DEFAULT_STORAGE})",
    )
    parser.add_argument(
        "--keys",
        metavar="FILE",
        help="the encryption keys, a JSON file {\"active\": ID, \"keys\": {ID: base64 key}} "
        f"(default: ${KEYS_ENV}); never give keys on the command line",
    )
    parser.add_argument(
        "--codec",
        metavar="MODULE:NAME",
        help="the application's codec instead of --keys: a Codec, or a function returning "
        "one (with its encryption and registered classes)",
    )
    parser.add_argument(
        "--allow-plaintext",
        action="store_true",
        help="accept records that are not encrypted (a store written before encryption was "
        "turned on): verify reports them as warnings, rekey encrypts them",
    )


def _resolve_url(args: argparse.Namespace) -> None:
    """``URL`` and ``--storage`` name the same thing; both given and different is an error."""
    if args.url is not None:
        if args.storage is not None and args.storage != args.url:
            raise CliError(
                f"two storages given: URL {args.url!r} and --storage {args.storage!r}",
                EXIT_USAGE,
            )
        args.storage = args.url


def _load_keys(path: str, allow_plaintext: bool) -> Codec:
    """A codec with the encryption of a keys file; errors never show a key."""
    from .crypto import Encryption

    try:
        with open(path, encoding="utf-8") as file:
            doc = json.load(file)
    except OSError as exc:
        raise CliError(f"cannot read the keys file {path!r}: {exc.strerror}", EXIT_USAGE) from None
    except json.JSONDecodeError as exc:
        raise CliError(f"the keys file {path!r} is not JSON: {exc.msg}", EXIT_USAGE) from None
    except UnicodeDecodeError:
        raise CliError(f"the keys file {path!r} is not UTF-8 text", EXIT_USAGE) from None
    keys_doc = doc.get("keys") if isinstance(doc, dict) else None
    active = doc.get("active") if isinstance(doc, dict) else None
    if not isinstance(keys_doc, dict) or not keys_doc or not isinstance(active, str):
        raise CliError(
            f'the keys file {path!r} must hold {{"active": ID, "keys": {{ID: base64 key, ...}}}}',
            EXIT_USAGE,
        )
    keys: dict[str, bytes] = {}
    for key_id, text in keys_doc.items():
        try:
            keys[key_id] = base64.b64decode(text, validate=True)
        except (TypeError, ValueError):
            raise CliError(
                f"the keys file {path!r}: the key of id {key_id!r} is not base64", EXIT_USAGE
            ) from None
    try:
        encryption = Encryption(keys, active=active, allow_plaintext=allow_plaintext)
    except ConfigurationError as exc:  # names the key id, never the key
        raise CliError(f"the keys file {path!r}: {exc}", EXIT_USAGE) from None
    return Codec(encryption=encryption)


def import_from_working_directory(module_name: str) -> Any:
    """Import ``module_name`` as ``python -m`` would: the working directory comes first.

    A console script's ``sys.path`` starts with the script's own folder, so a
    ``MODULE:NAME`` argument naming a module beside the user (``pg_target.py``)
    would not be found. Like ``python -m``, the working directory is put at the
    front of ``sys.path`` (once; it stays, so the module's own later imports of
    its neighbours work too).

    Raises:
        ImportError: the module, or one of its imports, is not found.
    """
    import importlib

    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
        importlib.invalidate_caches()
    return importlib.import_module(module_name)


def _load_codec(spec: str) -> Codec:
    module_name, sep, name = spec.partition(":")
    if not sep or not module_name or not name:
        raise CliError(f"--codec {spec!r} must be MODULE:NAME", EXIT_USAGE)
    try:
        found: Any = getattr(import_from_working_directory(module_name), name)
    except ImportError as exc:
        raise CliError(
            f"--codec {spec!r}: cannot import {module_name!r}: {exc}", EXIT_USAGE
        ) from None
    except AttributeError:
        raise CliError(f"--codec {spec!r}: {module_name!r} has no {name!r}", EXIT_USAGE) from None
    codec = found if isinstance(found, Codec) else found() if callable(found) else None
    if not isinstance(codec, Codec):
        raise CliError(
            f"--codec {spec!r} is not a Codec nor a function returning one", EXIT_USAGE
        )
    return codec


def _codec(args: argparse.Namespace) -> Codec | None:
    """The codec of ``--codec``, or of ``--keys`` (or ``$CHECKPOINTKIT_KEYS``); None for none."""
    keys = args.keys or os.environ.get(KEYS_ENV) or None
    if args.codec is not None:
        if args.keys is not None:
            raise CliError("give --keys or --codec, not both", EXIT_USAGE)
        codec = _load_codec(args.codec)
        if args.allow_plaintext and codec.encryption is not None:
            codec.encryption.allow_plaintext = True
        return codec
    return None if keys is None else _load_keys(keys, args.allow_plaintext)


class RecordProgress:
    """Progress of ``verify`` or ``rekey`` on standard error.

    On a terminal, one line redrawn in place. Elsewhere (CI logs, a pipe),
    plain lines: one when the records are counted, then one every
    ``interval`` seconds, so a long run shows that it is alive.

    Args:
        out: where to write.
        what: the action, as a verb (``verifying``).
        interval: seconds between two lines off a terminal.
        clock: the time source (``time.monotonic``).
    """

    def __init__(
        self,
        out: Output,
        what: str,
        *,
        interval: float = PROGRESS_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.out = out
        self.what = what
        self.interval = interval
        self.clock = clock
        self.live = out.err_is_terminal
        self.started = self.last = clock()
        self.first = True
        self._drawn = False

    def __call__(self, progress: Any) -> None:
        """Told a `checkpointkit.verify.Progress`."""
        now = self.clock()
        line = f"{self.what}: {progress.done}/{progress.total} records"
        if progress.rewritten:
            line += f", {progress.rewritten} rewritten"
        if progress.problems:
            line += f", {progress.problems} with problems"
        if self.live:
            self.out.stderr.write(f"\r\x1b[K{line}")
            self.out.stderr.flush()
            self._drawn = True
        elif self.first:
            self.last = now
            self.out.info(f"{self.what} {progress.total} records")
        elif now - self.last >= self.interval:
            self.last = now
            self.out.info(f"{line}, {now - self.started:.0f} s")
        self.first = False

    def close(self) -> None:
        """Remove the redrawn line (on a terminal)."""
        if self._drawn:
            self.out.stderr.write("\r\x1b[K")
            self.out.stderr.flush()
            self._drawn = False


def _verify_arguments(parser: argparse.ArgumentParser) -> None:
    _store_url_argument(parser)


@command(
    "verify",
    help="Check every record of a store: integrity, binding to its key, encryption.",
    arguments=_verify_arguments,
)
def verify_command(args: argparse.Namespace, out: Output) -> int:
    """Check every record of a store and report what is damaged; changes nothing.

    Reads every record under the namespace's runs/ and checks its checksum, its
    binding to its key, its encryption (with --keys or --codec) and its
    content, then each run head against the run's checkpoints. Exit status 1
    when a record is damaged; warnings (a format-1 record, a plaintext record
    accepted with --allow-plaintext) do not count. A store where it recognises
    no run (empty, or LangGraph or agent-framework data only) is not "ok": it
    says what it found instead, with exit status 1.
    """
    from .verify import verify

    _resolve_url(args)
    codec = _codec(args)
    progress = RecordProgress(out, "verifying")

    async def action(store: CheckpointStore) -> dict[str, Any]:
        try:
            report = await verify(store, progress=progress)
        finally:
            progress.close()
        found = report.to_dict()
        if not found["records"] and not found["runs"]:
            found["unrecognised"] = await _unrecognised(store, args.namespace)
            found["ok"] = False
        return found

    found = with_store(args, action, codec=codec, read_only=True)
    doc = {"storage": storage_url(args), "namespace": args.namespace, **found}
    if out.json:
        out.document(doc)
    elif "unrecognised" in found:
        out.error(found["unrecognised"]["message"])
    else:
        verdict = out.paint("ok", "green") if found["ok"] else out.paint("DAMAGED", "red")
        out.print(
            f"{verdict}: {found['records']} record(s) of {found['runs']} run(s), "
            f"{found['damaged']} damaged, {found['warnings']} warning(s)"
        )
        if found["findings"]:
            out.table(
                ("severity", "kind", "message"),
                [(f["severity"], f["kind"], f["message"]) for f in found["findings"]],
            )
    return EXIT_OK if found["ok"] else EXIT_FAILED


_LAYOUTS = (
    # (what, the first segments of its keys): core/integrations/*.py define these layouts
    ("LangGraph checkpoints (CheckpointkitSaver)", ("c", "w", "h", "b")),
    ("agent-framework checkpoints (CheckpointkitCheckpointStorage)", ("wf",)),
)
_SAMPLE_KEYS = 1000
"""Keys read to tell what a store holds when it holds no checkpointkit run."""


async def _unrecognised(store: CheckpointStore, namespace: str) -> dict[str, Any]:
    """What a store with no run of checkpointkit's holds, for ``verify`` to say so."""
    keys: list[str] = []
    async for key in store.storage.list(f"{namespace}/" if namespace else ""):
        keys.append(key)
        if len(keys) >= _SAMPLE_KEYS:
            break
    where = f"namespace {namespace!r}" if namespace else "the store"
    if not keys:
        message = f"nothing to verify: {where} holds no key at all (check --storage and -n)"
        return {"keys": 0, "layouts": [], "message": message}
    skip = len(namespace) + 1 if namespace else 0
    heads = [key[skip:].split("/", 2) for key in keys]
    firsts = {parts[0] for parts in heads}
    # a layout's segment comes first, or second after the saver's or storage's own prefix
    leading = firsts | {parts[1] for parts in heads if len(parts) > 2}
    layouts = [what for what, segments in _LAYOUTS if leading & set(segments)]
    counted = f"{len(keys)}{'+' if len(keys) >= _SAMPLE_KEYS else ''} key(s)"
    seen = (
        f"they look like {' and '.join(layouts)}, which verify does not check"
        if layouts
        else f"their first segments are {', '.join(sorted(firsts)[:5])}"
    )
    message = (
        f"nothing verified: {where} holds {counted} but no run of checkpointkit's "
        f"(no key under runs/); {seen}"
    )
    return {"keys": len(keys), "layouts": layouts, "message": message}


def _rekey_arguments(parser: argparse.ArgumentParser) -> None:
    _store_url_argument(parser)
    destructive_arguments(parser)


async def _rekey_plan(
    store: CheckpointStore, active: str, allow_plaintext: bool
) -> dict[str, int]:
    """What ``rekey --dry-run`` reports, from each record's header (nothing decrypted)."""
    from .envelope import key_checksum, read_header
    from .errors import CheckpointCorrupted, DecodeError, NotFound

    prefix = store.run_prefix("x")[: -len("x/")]
    plan = {"records": 0, "current": 0, "to_rewrite": 0, "plaintext": 0, "unreadable": 0}
    async for key in store.storage.list(prefix):
        plan["records"] += 1
        try:
            data, _ = await store.storage.get(key)
            header = read_header(data, key=key)
        except NotFound:
            continue
        except (CheckpointCorrupted, DecodeError):
            plan["unreadable"] += 1
            continue
        if not header.encrypted and not allow_plaintext:
            plan["plaintext"] += 1  # refused without --allow-plaintext
            continue
        done = header.key_id == active and header.key_checksum == key_checksum(key)
        plan["current" if done else "to_rewrite"] += 1
    return plan


@command(
    "rekey",
    help="Re-encrypt every record of a store under the active key, bound to its key.",
    arguments=_rekey_arguments,
)
def rekey_command(args: argparse.Namespace, out: Output) -> int:
    """Re-encrypt every record of a store under the active key id (asks first unless --yes).

    The keys come from --keys (or $CHECKPOINTKIT_KEYS) or --codec: every key id
    found in the store, and the active one. Each record is rewritten by
    compare-and-swap, so a live worker is never overwritten; a record already
    under the active key is skipped, so an interrupted rekey is finished by
    running it again. Damaged records are never rewritten, only listed (run
    verify). Exit status 1 unless every record is done: keep the old keys
    until rekey exits with 0.
    """
    from .verify import rekey

    _resolve_url(args)
    codec = _codec(args)
    if codec is None or codec.encryption is None:
        raise CliError(
            f"rekey needs the encryption keys: --keys FILE (or ${KEYS_ENV}), or --codec "
            "MODULE:NAME with an encryption",
            EXIT_USAGE,
        )
    active = codec.encryption.active
    url = storage_url(args)
    progress = RecordProgress(out, "rekeying")

    async def action(store: CheckpointStore) -> dict[str, Any]:
        if args.dry_run:
            plan = await _rekey_plan(store, active, args.allow_plaintext)
            return {"dry_run": True, "key_id": active, **plan}
        confirm(out, args, f"re-encrypt every record of {url} under key id {active!r}?")
        try:
            report = await rekey(store, allow_plaintext=args.allow_plaintext, progress=progress)
        finally:
            progress.close()
        return {"dry_run": False, **report.to_dict()}

    found = with_store(args, action, codec=codec)
    doc = {"storage": url, "namespace": args.namespace, **found}
    if out.json:
        out.document(doc)
        return EXIT_OK if args.dry_run or found["complete"] else EXIT_FAILED
    if args.dry_run:
        out.print(
            f"would rewrite {found['to_rewrite']} of {found['records']} record(s) under key id "
            f"{active!r} ({found['current']} done already; not rewritten: {found['plaintext']} "
            f"plaintext without --allow-plaintext, {found['unreadable']} unreadable: run verify)"
        )
        return EXIT_OK
    verdict = "complete" if found["complete"] else out.paint("INCOMPLETE", "red")
    out.print(
        f"rekey {verdict}: {found['rewritten']} record(s) rewritten under key id {active!r}, "
        f"{found['current']} done already, {found['gone']} gone, "
        f"{len(found['failures'])} not rewritten"
    )
    if found["failures"]:
        out.table(
            ("kind", "message"), [(f["kind"], f["message"]) for f in found["failures"]]
        )
        out.print("keep the old keys: run verify, deal with these records, then rekey again")
    return EXIT_OK if found["complete"] else EXIT_FAILED


# -- the parser -------------------------------------------------------------------------------
_EPILOG = """\
exit status:
  0  done, nothing wrong found
  1  a failure found: an unknown run or checkpoint, a storage error, a failed conformance test,
     a damaged record (verify), a record not re-encrypted (rekey)
  2  a bad command line or environment: an unknown option or scheme, a missing directory or
     extra, pytest missing for 'conformance'
  5  'conformance' selected no test (check --group and -k), as pytest's 5

every command takes --json (one JSON document on standard output) and -h/--help.
"""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def add_usage(
        self,
        usage: str | None,
        actions: Any,
        groups: Any,
        prefix: str | None = None,
    ) -> None:
        super().add_usage(usage, actions, groups, "Usage: " if prefix is None else prefix)


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line on standard error, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {message} (see '{self.prog} --help')\n")


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("checkpointkit")
    except Exception:  # pragma: no cover - running from a source tree without metadata
        from . import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``checkpointkit`` with every registered command."""
    parser = _Parser(
        prog="checkpointkit",
        description="Durable checkpoints for async workflows: inspect stored runs, "
        "prove a storage backend.",
        epilog=_EPILOG,
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"checkpointkit {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for cmd in COMMANDS.values():
        p = sub.add_parser(
            cmd.name,
            help=cmd.help,
            description=inspect.cleandoc(cmd.handler.__doc__ or cmd.help).replace("``", "'"),
            formatter_class=_Formatter,
        )
        if cmd.arguments is not None:
            cmd.arguments(p)
        if cmd.storage:
            p.add_argument(
                "--storage",
                "-s",
                metavar="URL",
                default=None,
                help="storage URL: a path, file:///path, memory://, s3://..., az://..., "
                f"redis://... (default: $CHECKPOINTKIT_STORAGE, else {DEFAULT_STORAGE})",
            )
            p.add_argument(
                "--namespace",
                "-n",
                metavar="NS",
                default="",
                help="key prefix of the application's runs",
            )
        if cmd.json_flag:
            p.add_argument(
                "--json",
                action="store_true",
                help="print one JSON document on standard output (fields: docs/cli.md)",
            )
        p.set_defaults(command_=cmd)
    return parser


def invoke(
    argv: Sequence[str] | None = None,
    *,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run the command line on ``argv`` and return the exit status (never raises SystemExit).

    Args:
        argv: the arguments (default ``sys.argv[1:]``).
        stdin: where confirmations are read (default ``sys.stdin``).
        stdout: where output goes (default ``sys.stdout``).
        stderr: where messages and errors go (default ``sys.stderr``).
    """
    out_stream = stdout if stdout is not None else sys.stdout
    err_stream = stderr if stderr is not None else sys.stderr
    parser = build_parser()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out_stream, err_stream  # argparse prints help and errors there
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    finally:
        sys.stdout, sys.stderr = saved
    cmd: Command | None = getattr(args, "command_", None)
    if cmd is None:
        parser.print_help(err_stream)
        return EXIT_USAGE
    out = Output(
        json=bool(getattr(args, "json", False)), stdout=out_stream, stderr=err_stream, stdin=stdin
    )
    try:
        return cmd.handler(args, out)
    except CliError as exc:
        out.error(str(exc))
        if out.json:
            out.document({"error": str(exc), "exit_status": exc.code})
        return exc.code
    except KeyboardInterrupt:
        out.error("interrupted")
        return 130


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point of the ``checkpointkit`` console script: exits with the command's status.

    A reader that stops early (``checkpointkit runs | head -1``) ends the command
    quietly with status 141, as a process killed by SIGPIPE does.
    """
    try:
        code = invoke(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the flush at exit does not fail again
        code = 141
    sys.exit(code)


COMMAND_MODULES = ("checkpointkit.demo", "checkpointkit.conformance.cli", "checkpointkit.migrate")
"""Modules that register more commands when imported; one that is not shipped is skipped."""


def _register_modules() -> None:
    import importlib

    for name in COMMAND_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:  # not in this build (the suite is optional)
            if exc.name is None or not name.startswith(exc.name):
                raise


_register_modules()
