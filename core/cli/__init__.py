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

from . import runs as runs  # registers runs, ls, show, rm and prune, in --help's order
from ._base import (
    COMMANDS,
    DEFAULT_STORAGE,
    EXIT_FAILED,
    EXIT_NO_TESTS,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Command,
    Output,
    command,
    confirm,
    destructive_arguments,
    duration,
    import_from_working_directory,
    iso_time,
    jsonable,
    require_run,
    run_argument,
    storage_url,
    with_store,
)
from ._parser import COMMAND_MODULES, _register_modules, build_parser, invoke, main
from .verify import KEYS_ENV, PROGRESS_INTERVAL, RecordProgress

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

_register_modules()  # the commands of demo, migrate and the conformance suite
