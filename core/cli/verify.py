"""Commands that check and re-encrypt a whole store: ``verify`` and ``rekey``."""

from __future__ import annotations

import argparse
import base64
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from ..codec import Codec
from ..errors import ConfigurationError
from ..store import CheckpointStore
from ._base import (
    DEFAULT_STORAGE,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Output,
    command,
    confirm,
    destructive_arguments,
    import_from_working_directory,
    storage_url,
    with_store,
)

__all__ = [
    "KEYS_ENV",
    "PROGRESS_INTERVAL",
    "RecordProgress",
    "rekey_command",
    "verify_command",
]

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
        help='the encryption keys, a JSON file {"active": ID, "keys": {ID: base64 key}} '
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
    from ..crypto import Encryption

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
        raise CliError(f"--codec {spec!r} is not a Codec nor a function returning one", EXIT_USAGE)
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
        self.part = ""
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
            self.out.info(f"{self.what} {progress.total} records{self.part}")
        elif now - self.last >= self.interval:
            self.last = now
            self.out.info(f"{line}, {now - self.started:.0f} s")
        self.first = False

    def begin(self, part: str) -> None:
        """A new part of the work, with its own count of records (`` of LangGraph threads``)."""
        self.part = part
        self.first = True

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
    help="Check every record of a store (runs, threads, workflows): integrity, references.",
    arguments=_verify_arguments,
)
def verify_command(args: argparse.Namespace, out: Output) -> int:
    """Check every record of a store and report what is damaged; changes nothing.

    Reads every record under the namespace's runs/ and checks its checksum, its
    binding to its key, its encryption (with --keys or --codec) and its
    content, then each run head against the run's checkpoints. The records of
    LangGraph threads and agent-framework workflows stored through
    checkpointkit are checked too: each envelope, each structure and value
    (decoded without running code), each checkpoint against its key, the
    values it references, its parent and its pending writes or marker, and
    each head. Exit status 1 when a record is damaged; warnings (a format-1
    record, a plaintext record accepted with --allow-plaintext, a write or
    marker that an interrupted save left) do not count. A store where it
    recognises nothing (no checkpointkit run, LangGraph thread or
    agent-framework workflow) is not "ok": it says so, with exit status 1.
    """
    from ..integrations import keeps_heads
    from ..verify import verify
    from ._langgraph import LangGraphData
    from ._layouts import nothing_found, recognise

    _resolve_url(args)
    codec = _codec(args)
    progress = RecordProgress(out, "verifying")

    async def action(store: CheckpointStore) -> dict[str, Any]:
        holdings = await recognise(store.storage, args.namespace)
        try:
            report = await verify(store, progress=progress)
        finally:
            progress.close()
        found = report.to_dict()
        if holdings.nothing and not found["records"]:
            found["unrecognised"] = await nothing_found(store.storage, args.namespace)
            found["ok"] = False
            return found
        threads = workflows = 0
        findings = list(report.findings)
        heads_matter = keeps_heads(store.storage)
        for data in holdings.data(store.storage, store.codec.encryption):
            lg = isinstance(data, LangGraphData)
            what = "LangGraph threads" if lg else "agent-framework workflows"
            progress.begin(f" of {what} (prefix {data.prefix!r})")
            try:
                records, groups, more = await data.verify(
                    heads_matter=heads_matter, progress=progress
                )
            finally:
                progress.close()
            found["records"] += records
            findings += more
            if isinstance(data, LangGraphData):
                threads += groups
            else:
                workflows += groups
        findings.sort(key=lambda f: f.key)
        damaged = sum(1 for f in findings if f.severity == "damage")
        found.update(
            ok=damaged == 0,
            damaged=damaged,
            warnings=len(findings) - damaged,
            findings=[asdict(f) for f in findings],
        )
        if holdings.langgraph:
            found["threads"] = threads
        if holdings.agent_framework:
            found["workflows"] = workflows
        return found

    found = with_store(args, action, codec=codec, read_only=True)
    doc = {"storage": storage_url(args), "namespace": args.namespace, **found}
    if out.json:
        out.document(doc)
    elif "unrecognised" in found:
        out.error(found["unrecognised"]["message"])
    else:
        verdict = out.paint("ok", "green") if found["ok"] else out.paint("DAMAGED", "red")
        groups = f"{found['runs']} run(s)"
        if "threads" in found:
            groups += f", {found['threads']} LangGraph thread(s)"
        if "workflows" in found:
            groups += f", {found['workflows']} agent-framework workflow(s)"
        out.print(
            f"{verdict}: {found['records']} record(s) of {groups}, "
            f"{found['damaged']} damaged, {found['warnings']} warning(s)"
        )
        if found["findings"]:
            out.table(
                ("severity", "kind", "message"),
                [(f["severity"], f["kind"], f["message"]) for f in found["findings"]],
            )
    return EXIT_OK if found["ok"] else EXIT_FAILED


def _rekey_arguments(parser: argparse.ArgumentParser) -> None:
    _store_url_argument(parser)
    destructive_arguments(parser)


async def _rekey_plan(store: CheckpointStore, active: str, allow_plaintext: bool) -> dict[str, int]:
    """What ``rekey --dry-run`` reports, from each record's header (nothing decrypted)."""
    from ..envelope import key_checksum, read_header
    from ..errors import CheckpointCorrupted, DecodeError, NotFound

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
    from ..verify import rekey

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
        out.table(("kind", "message"), [(f["kind"], f["message"]) for f in found["failures"]])
        out.print("keep the old keys: run verify, deal with these records, then rekey again")
    return EXIT_OK if found["complete"] else EXIT_FAILED
