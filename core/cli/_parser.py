"""The parser of every registered command, and the entry points ``invoke`` and ``main``."""

from __future__ import annotations

import argparse
import inspect
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn, TextIO

from ._base import COMMANDS, DEFAULT_STORAGE, EXIT_USAGE, CliError, Command, Output

__all__ = [
    "COMMAND_MODULES",
    "build_parser",
    "invoke",
    "main",
]

# -- the parser -------------------------------------------------------------------------------
_EPILOG = """\
exit status:
  0  done, nothing wrong found
  1  a failure found: an unknown run, thread, workflow or checkpoint, a storage error, a failed
     conformance test, a damaged record or nothing recognised (verify), a record not
     re-encrypted (rekey)
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
        from .. import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``checkpointkit`` with every registered command."""
    parser = _Parser(
        prog="checkpointkit",
        description="Durable checkpoints for async workflows: inspect stored runs (and the "
        "LangGraph threads and agent-framework workflows stored through checkpointkit), "
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
                help="key prefix of the application's runs; LangGraph threads and "
                "agent-framework workflows are looked for under NS/langgraph/, "
                "NS/agent-framework/ and NS/ itself",
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
