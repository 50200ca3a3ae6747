"""The command line's frame: exit statuses, errors, output, the command registry and the
arguments and helpers that commands share."""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import math
import os
import re
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO, TypeVar

from ..codec import Codec
from ..errors import CheckpointkitError, ConfigurationError
from ..registry import open_storage, url_scheme
from ..store import CheckpointStore

__all__ = [
    "COMMANDS",
    "DEFAULT_STORAGE",
    "EXIT_FAILED",
    "EXIT_NO_TESTS",
    "EXIT_OK",
    "EXIT_USAGE",
    "CliError",
    "Command",
    "Handler",
    "Output",
    "command",
    "confirm",
    "destructive_arguments",
    "duration",
    "import_from_working_directory",
    "iso_time",
    "jsonable",
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
