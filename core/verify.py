"""Offline checks and maintenance of a checkpoint store: `verify` and `rekey`.

`verify` reads every record of a store (the ``index/`` and ``runs/`` keys
of its namespace) and reports, without changing anything, each record that is
damaged: a checksum or length mismatch, a record written for another key
(copied or moved), a plaintext record where encryption is on, a record that
does not decrypt or decode, a step record or checkpoint whose content names
another key, and a run head that is behind its checkpoints (rolled back).

`rekey` rewrites every record of a store under the active encryption key,
bound to its key (envelope format 2). Each record is replaced by one
compare-and-swap on the version read, so a concurrent writer is never
overwritten, and a record already under the active key and bound is skipped:
interrupted at any moment (even by SIGKILL), the store stays readable with the
old and new keys, and running it again finishes the job.

Both take a `CheckpointStore` (its storage, codec
and namespace) or a `Storage` (then pass the
``codec`` and ``namespace``), and report progress through an optional callback.
"""

from __future__ import annotations

import asyncio
import json
import re
import zlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .codec import Codec, default_codec
from .crypto import Encryption
from .envelope import EnvelopeHeader, key_checksum, read_header, reseal
from .errors import (
    CheckpointCorrupted,
    CheckpointkitError,
    ConfigurationError,
    DecodeError,
    DecryptionError,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    StorageError,
)
from .storage import IfMatch, IntegrityChecked, Storage
from .store import CheckpointStore

__all__ = [
    "Finding",
    "Progress",
    "RekeyReport",
    "VerifyReport",
    "rekey",
    "verify",
]

FindingKind = Literal[
    "corrupted",
    "misplaced",
    "plaintext",
    "unbound",
    "undecryptable",
    "undecodable",
    "mismatch",
    "head",
    "orphan",
    "missing",
    "busy",
    "unknown",
    "unreadable",
    "storage",
]
"""What is wrong with a record (see `Finding`)."""

_MAX_SEQ = 2**64 - 1
_CHECKPOINT_NAME = re.compile(r"[0-9a-f]{16}")
_STEP_FIELDS = frozenset({"step", "result", "writes", "deletes", "cleared", "fp", "seq", "epoch"})


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem found in one record.

    Attributes:
        key: The storage key of the record.
        kind: ``"corrupted"`` (checksum, length or framing), ``"misplaced"``
            (written for another key: copied or moved here), ``"plaintext"``
            (not encrypted while encryption is on), ``"unbound"`` (format 1:
            not bound to its key, so a move would go unnoticed),
            ``"undecryptable"`` (unknown key id, wrong key or tampered),
            ``"undecodable"`` (the payload or its structure cannot be decoded),
            ``"mismatch"`` (intact, but its content names another run, step or
            checkpoint), ``"head"`` (the run head is behind its checkpoints,
            names a missing one, or ``latest`` refuses it), ``"orphan"`` (an
            index entry without a run; a LangGraph write or agent-framework
            marker without its checkpoint), ``"missing"`` (a record that
            another one needs is not stored: a LangGraph checkpoint's large
            channel value), ``"busy"`` (``rekey`` only: the record
            changed under every attempt), ``"unknown"`` (a key outside the
            store's layout), ``"unreadable"`` (the storage failed to read the
            record: a damaged page, say), ``"storage"`` (the backend's own check
            of its structures found a problem: the key is empty).
        severity: ``"damage"`` (the record cannot be trusted or read) or
            ``"warning"`` (readable, but weaker than it should be, or an
            interrupted write).
        message: One line that says what is wrong, naming the key.
        written_for: For a misplaced record, the key it was written for, when
            it is among the keys of the store (found by its key checksum).
    """

    key: str
    kind: FindingKind
    severity: Literal["damage", "warning"]
    message: str
    written_for: str | None = None


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a `verify` or `rekey` is, passed to its ``progress`` callback.

    Attributes:
        done: Records handled so far.
        total: Records to handle (known once the store has been listed).
        rewritten: Records rewritten (``rekey`` only).
        problems: Records with a finding (``verify``) or not rewritten (``rekey``).
    """

    done: int
    total: int
    rewritten: int = 0
    problems: int = 0


@dataclass(slots=True)
class VerifyReport:
    """What `verify` found.

    Attributes:
        records: Records read.
        runs: Runs seen (run ids under ``runs/``).
        findings: Every problem, ordered by key.
    """

    records: int = 0
    runs: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def damaged(self) -> list[Finding]:
        """The findings of severity ``"damage"``."""
        return [f for f in self.findings if f.severity == "damage"]

    @property
    def ok(self) -> bool:
        """Whether no record is damaged (warnings allowed)."""
        return not self.damaged

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: ok, records, runs, damaged, warnings and findings."""
        return {
            "ok": self.ok,
            "records": self.records,
            "runs": self.runs,
            "damaged": len(self.damaged),
            "warnings": len(self.findings) - len(self.damaged),
            "findings": [asdict(f) for f in self.findings],
        }

    def to_json(self, *, indent: int | None = None) -> str:
        """`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)


@dataclass(slots=True)
class RekeyReport:
    """What `rekey` did.

    Attributes:
        key_id: The active key id that every rewritten record is now encrypted with.
        records: Records seen.
        rewritten: Records rewritten by this call.
        current: Records that were already under the active key and bound
            (rewritten by an earlier, interrupted call, or written since).
        gone: Records deleted while rekey ran.
        failures: Records not rewritten, and why (damaged records are never
            re-sealed: that would make a planted or moved record look genuine).
    """

    key_id: str
    records: int = 0
    rewritten: int = 0
    current: int = 0
    gone: int = 0
    failures: list[Finding] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Whether every record is now under the active key and bound."""
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the report."""
        return {
            "complete": self.complete,
            "key_id": self.key_id,
            "records": self.records,
            "rewritten": self.rewritten,
            "current": self.current,
            "gone": self.gone,
            "failures": [asdict(f) for f in self.failures],
        }

    def to_json(self, *, indent: int | None = None) -> str:
        """`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)


ProgressCallback = Callable[[Progress], None]


def _store_of(
    target: CheckpointStore | Storage, codec: Codec | None, namespace: str
) -> CheckpointStore:
    if isinstance(target, CheckpointStore):
        if codec is not None or namespace:
            raise ConfigurationError(
                "codec and namespace come from the CheckpointStore; pass them only with a Storage"
            )
        return target
    if not isinstance(target, Storage):
        raise TypeError(
            f"verify and rekey take a CheckpointStore or a Storage, not {type(target).__name__}"
        )
    return CheckpointStore(
        target, codec=codec if codec is not None else default_codec(), namespace=namespace
    )


def _namespace(store: CheckpointStore) -> str:
    """The key prefix of the store's namespace (``""`` or ``"app/"``)."""
    probe = store.run_prefix("x")
    return probe[: -len("runs/x/")]


async def _keys(storage: Storage, prefix: str) -> list[str]:
    return [key async for key in storage.list(prefix)]


async def _each(
    items: Iterable[str], work: Callable[[str], Awaitable[None]], concurrency: int
) -> None:
    """Run ``work`` on every item, ``concurrency`` at a time; the first error is raised as is."""
    limit = asyncio.Semaphore(concurrency)

    async def one(item: str) -> None:
        async with limit:
            await work(item)

    tasks = [asyncio.ensure_future(one(item)) for item in items]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _check_concurrency(concurrency: int) -> None:
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise ConfigurationError(f"concurrency must be an int >= 1, got {concurrency!r}")


# -- verify ------------------------------------------------------------------------------


class _Layout:
    """Which record a key of the store names: ``(run, kind, rest)``."""

    def __init__(self, ns: str) -> None:
        self.runs = f"{ns}runs/"
        self.index = f"{ns}index/"

    def parse(self, key: str) -> tuple[str, str, str] | None:
        if not key.startswith(self.runs):
            return None
        parts = key[len(self.runs) :].split("/", 2)
        if len(parts) == 2 and parts[1] in ("input", "head"):
            return parts[0], parts[1], ""
        if len(parts) == 3 and parts[1] in ("s", "r") and parts[2]:
            return parts[0], parts[1], parts[2]
        if len(parts) == 3 and parts[1] == "c" and _CHECKPOINT_NAME.fullmatch(parts[2]):
            return parts[0], parts[1], parts[2]
        return None


async def verify(
    target: CheckpointStore | Storage,
    *,
    codec: Codec | None = None,
    namespace: str = "",
    progress: ProgressCallback | None = None,
    concurrency: int = 16,
) -> VerifyReport:
    """Check every record of a store: integrity, binding to its key, encryption and content.

    Nothing is written. Each record under ``runs/`` is read and decoded with
    the store's codec (so pass the codec with the encryption keys, and the
    registered classes, that the store is read with); then each run head is
    compared with the run's checkpoints, and ``latest`` is asked for the run
    (so a refusal by the store's own head checks is reported too).

    Args:
        target: A `CheckpointStore`, or a storage
            (then ``codec`` and ``namespace`` say how it is read).
        codec: The codec (with its `Encryption`)
            for a storage; the default codec if ``None``.
        namespace: The store's namespace, for a storage.
        progress: Called after each record with a `Progress`.
        concurrency: Records read at once.

    Returns:
        A `VerifyReport`; ``report.ok`` is False if anything is damaged,
        ``report.to_json()`` is its JSON form.

    Raises:
        ConfigurationError: ``codec`` or ``namespace`` given with a store, or a
            bad ``concurrency``.
        StorageError: The storage failed (nothing can be said about the store).
    """
    _check_concurrency(concurrency)
    store = _store_of(target, codec, namespace)
    storage, the_codec = store.storage, store.codec
    layout = _Layout(_namespace(store))
    keys = await _keys(storage, layout.runs)
    index = await _keys(storage, layout.index)
    by_checksum: dict[int, list[str]] = {}
    for key in keys:
        by_checksum.setdefault(key_checksum(key), []).append(key)
    report = VerifyReport()
    findings: list[Finding] = []
    heads: dict[str, dict[str, Any]] = {}
    checkpoints: dict[str, set[int]] = {}
    runs: set[str] = set()
    state = {"done": 0, "problems": 0}

    async def check(key: str) -> None:
        found: list[Finding] = []  # this record's findings (other records' come meanwhile)
        add = found.append
        parsed = layout.parse(key)
        if parsed is None:
            add(
                Finding(key, "unknown", "warning", f"key {key!r} is not part of the store's layout")
            )
        else:
            run, kind, rest = parsed
            runs.add(run)
            if kind == "c":  # present, whatever its content
                checkpoints.setdefault(run, set()).add(_MAX_SEQ - int(rest, 16))
            try:
                data, _ = await storage.get(key)
            except NotFound:
                data = None  # deleted while verify ran
            except StorageError as exc:  # a damaged page: report it, read the others
                data = None
                add(Finding(key, "unreadable", "damage", f"cannot be read: {exc}"))
            if data is not None:
                value = _open(the_codec, key, data, by_checksum, add)
                if value is not _FAILED:
                    _check_content(store, key, run, kind, rest, value, add, heads, checkpoints)
        findings.extend(found)
        state["done"] += 1
        state["problems"] += bool(found)
        if progress is not None:
            progress(Progress(state["done"], len(keys), 0, state["problems"]))

    await _each(keys, check, concurrency)
    for run in sorted(runs):
        await _check_run(store, run, heads.get(run), checkpoints.get(run, set()), findings)
    indexed = {key[len(layout.index) :] for key in index}
    for run in sorted(indexed - runs):
        findings.append(
            Finding(
                f"{layout.index}{run}",
                "orphan",
                "warning",
                f"the index names run {run!r}, which has no records (deleted half-way?)",
            )
        )
    findings += await _backend_check(storage)
    report.records = len(keys)
    report.runs = len(runs)
    report.findings = sorted(findings, key=lambda f: (f.key, f.kind))
    return report


async def _backend_check(storage: Storage) -> list[Finding]:
    """The backend's own check of its structures, where the storage has one.

    A record read through a damaged index can come back as missing with no
    error; only the backend's check (`IntegrityChecked`) sees that.
    """
    checked: Any = storage
    while not isinstance(checked, IntegrityChecked) and hasattr(checked, "inner"):
        checked = checked.inner
    if not isinstance(checked, IntegrityChecked):
        return []
    try:
        problems = await checked.check_integrity()
    except StorageError as exc:
        problems = [f"the check could not run: {exc}"]
    return [
        Finding("", "storage", "damage", f"the backend's integrity check: {line}")
        for line in problems
    ]


class _Failed:
    pass


_FAILED: Any = _Failed()


def _open(
    codec: Codec,
    key: str,
    data: bytes,
    by_checksum: dict[int, list[str]],
    add: Callable[[Finding], None],
) -> Any:
    """Decode one record, adding a finding for each problem; ``_FAILED`` if unreadable."""
    try:
        header: EnvelopeHeader = read_header(data, key=key)
    except CheckpointCorrupted as exc:
        add(Finding(key, "corrupted", "damage", str(exc)))
        return _FAILED
    except DecodeError as exc:
        add(Finding(key, "undecodable", "damage", str(exc)))
        return _FAILED
    if header.key_checksum is not None and header.key_checksum != key_checksum(key):
        origins = [k for k in by_checksum.get(header.key_checksum, []) if k != key]
        origin = origins[0] if len(origins) == 1 else None
        where = f"; it was written for key {origin!r}" if origin is not None else ""
        add(
            Finding(
                key,
                "misplaced",
                "damage",
                f"the record at key {key!r} does not belong to this key: it was written for "
                f"another key (copied or moved here){where}",
                written_for=origin,
            )
        )
        return _FAILED
    encryption = codec.encryption
    try:
        value = codec.decode(data, key=key)
    except DecryptionError as exc:
        if not header.encrypted and encryption is not None and not encryption.allow_plaintext:
            add(Finding(key, "plaintext", "damage", str(exc)))
        elif not header.bound and encryption is not None and not encryption.allow_unbound:
            add(Finding(key, "unbound", "damage", str(exc)))
        else:
            add(Finding(key, "undecryptable", "damage", str(exc)))
        return _FAILED
    except CheckpointCorrupted as exc:
        add(Finding(key, "corrupted", "damage", str(exc)))
        return _FAILED
    except DecodeError as exc:
        add(Finding(key, "undecodable", "damage", str(exc)))
        return _FAILED
    if not header.encrypted and encryption is not None:
        add(
            Finding(
                key,
                "plaintext",
                "warning",
                f"the record at key {key!r} is not encrypted (read because allow_plaintext=True); "
                "rekey encrypts it",
            )
        )
    if not header.bound:
        add(
            Finding(
                key,
                "unbound",
                "warning",
                f"the record at key {key!r} is in envelope format 1, not bound to its key: a copy "
                "or move of it would go unnoticed; rekey binds it",
            )
        )
    return value


def _check_content(
    store: CheckpointStore,
    key: str,
    run: str,
    kind: str,
    rest: str,
    value: Any,
    add: Callable[[Finding], None],
    heads: dict[str, dict[str, Any]],
    checkpoints: dict[str, set[int]],
) -> None:
    """Whether an intact record's content belongs where it is (and collect heads, checkpoints)."""
    try:
        if kind == "s":
            missing = _STEP_FIELDS.difference(value)
            if missing:
                raise KeyError(f"no {', '.join(sorted(missing))}")
            step = value["step"]
            expected = store.step_key(run, step)
            if expected != key:
                add(
                    Finding(
                        key,
                        "mismatch",
                        "damage",
                        f"the step record at key {key!r} is the record of step {step!r}, whose "
                        f"key is {expected!r}",
                        written_for=expected,
                    )
                )
        elif kind == "c":
            seq = _MAX_SEQ - int(rest, 16)
            stored_run, stored_id = value["run"], value["id"]
            if (stored_run, str(stored_id)) != (run, str(seq)):
                expected = store.run_prefix(stored_run) + f"c/{_MAX_SEQ - int(stored_id):016x}"
                add(
                    Finding(
                        key,
                        "mismatch",
                        "damage",
                        f"the checkpoint at key {key!r} is checkpoint {stored_id} of run "
                        f"{stored_run!r} (key {expected!r}), not checkpoint {seq} of run {run!r}",
                        written_for=expected,
                    )
                )
        elif kind == "head":
            if not isinstance(value, dict) or not isinstance(value.get("seq"), int):
                raise TypeError("a run head is a mapping with an int 'seq'")
            heads[run] = value
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        add(
            Finding(
                key,
                "undecodable",
                "damage",
                f"the record at key {key!r} is malformed: {type(exc).__name__}: {exc}",
            )
        )


async def _check_run(
    store: CheckpointStore,
    run: str,
    head: dict[str, Any] | None,
    seqs: set[int],
    findings: list[Finding],
) -> None:
    """The head against the checkpoints, and whether ``latest`` reads the run."""
    prefix = store.run_prefix(run)
    head_key = f"{prefix}head"
    if head is not None:
        seq = head["seq"]
        newer = sorted(s for s in seqs if s > seq)
        if newer:
            findings.append(
                Finding(
                    head_key,
                    "head",
                    "damage",
                    f"the head of run {run!r} names checkpoint {seq}, but checkpoint "
                    f"{newer[-1]} exists: the head was rolled back",
                )
            )
        elif seq > head.get("floor", 0) and seq not in seqs:  # (pruned up to the floor)
            findings.append(
                Finding(
                    head_key,
                    "head",
                    "warning",
                    f"the head of run {run!r} names checkpoint {seq}, which is missing (a save "
                    "that stopped half-way, or a deleted checkpoint)",
                )
            )
    damaged = {f.key for f in findings if f.severity == "damage"}
    if any(
        k.startswith(prefix) and (k == head_key or k.startswith(f"{prefix}c/")) for k in damaged
    ):
        return  # latest would only repeat what is reported
    try:
        await store.latest(run)
    except CheckpointkitError as exc:
        if not isinstance(exc, NotFound):
            findings.append(Finding(head_key, "head", "damage", f"latest({run!r}) fails: {exc}"))


# -- rekey ---------------------------------------------------------------------------------


async def rekey(
    target: CheckpointStore | Storage,
    *,
    codec: Codec | None = None,
    namespace: str = "",
    encryption: Encryption | None = None,
    allow_plaintext: bool = False,
    progress: ProgressCallback | None = None,
    concurrency: int = 8,
    retries: int = 10,
) -> RekeyReport:
    """Re-encrypt every record of a store under the active key id, bound to its key.

    Each record under ``runs/`` is read, opened (decrypted with whichever key
    id it names) and sealed again with the active key and its key binding,
    without decoding its payload; then written back by compare-and-swap on
    the version read (``IfMatch``). A record changed meanwhile is read again
    (up to ``retries`` times). A record already encrypted with the active key
    and bound to its key is left alone, so an interrupted rekey (a crash, a
    SIGKILL) leaves every record readable, under the old or the new key, and
    running it again completes it. Keep the old keys in the
    `Encryption` until a rekey reports
    ``complete``.

    A damaged record (corrupted, misplaced, undecryptable, or plaintext
    without ``allow_plaintext``) is not rewritten: it is listed in
    ``failures``, since re-sealing would make it look genuine. Run
    `verify` first: a record in the old format 1 that was moved between
    keys cannot be told apart by its envelope.

    Args:
        target: A `CheckpointStore`, or a storage
            (then ``codec`` or ``encryption``, and ``namespace``, say how).
        codec: For a storage: its encryption is used if ``encryption`` is None.
        namespace: The store's namespace, for a storage.
        encryption: The keys: every key id found in the store, and the active
            one to encrypt with. Defaults to the codec's encryption.
        allow_plaintext: Also encrypt records that are not encrypted (a store
            written before encryption was turned on). Off by default: a
            plaintext record in an encrypted store may have been planted.
        progress: Called after each record with a `Progress`.
        concurrency: Records rewritten at once.
        retries: Compare-and-swap attempts per record before giving up on it.

    Returns:
        A `RekeyReport`; ``complete`` is True when every record is done.

    Raises:
        ConfigurationError: No encryption, a storage without conditional puts,
            or a bad ``concurrency`` or ``retries``.
        StorageError: The storage failed; what was rewritten stays rewritten,
            and running rekey again resumes.
    """
    _check_concurrency(concurrency)
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 1:
        raise ConfigurationError(f"retries must be an int >= 1, got {retries!r}")
    store = _store_of(target, codec, namespace)
    storage = store.storage
    enc = encryption if encryption is not None else store.codec.encryption
    if enc is None:
        raise ConfigurationError(
            "rekey needs an Encryption (encryption=..., or a codec with one): the keys of the "
            "records, and the active key to encrypt them with"
        )
    if not isinstance(enc, Encryption):
        raise ConfigurationError(f"encryption must be an Encryption, got {type(enc).__name__}")
    capabilities = getattr(storage, "capabilities", None)
    if capabilities is not None and not capabilities.conditional_put:
        raise ConfigurationError(
            f"rekey rewrites each record by compare-and-swap, which {storage!r} does not "
            "support (no conditional puts)"
        )
    active = enc.active
    keys = await _keys(storage, _Layout(_namespace(store)).runs)
    report = RekeyReport(key_id=active, records=len(keys))
    done = [0]

    async def one(key: str) -> None:
        failure = await _rekey_one(storage, key, enc, active, allow_plaintext, retries, report)
        if failure is not None:
            report.failures.append(failure)
        done[0] += 1
        if progress is not None:
            progress(Progress(done[0], len(keys), report.rewritten, len(report.failures)))

    await _each(keys, one, concurrency)
    report.failures.sort(key=lambda f: f.key)
    return report


async def _rekey_one(
    storage: Storage,
    key: str,
    enc: Encryption,
    active: str,
    allow_plaintext: bool,
    retries: int,
    report: RekeyReport,
) -> Finding | None:
    checksum = zlib.crc32(key.encode())
    for _ in range(retries):
        try:
            data, version = await storage.get(key)
        except NotFound:
            report.gone += 1
            return None
        try:
            header = read_header(data, key=key)
            if header.key_id == active and header.key_checksum == checksum:
                report.current += 1
                return None
            new = reseal(data, key=key, encryption=enc, allow_plaintext=allow_plaintext or None)
        except CheckpointCorrupted as exc:
            kind: FindingKind = "misplaced" if "does not belong" in str(exc) else "corrupted"
            return Finding(key, kind, "damage", f"not rewritten: {exc}")
        except DecryptionError as exc:
            kind = "plaintext" if "not encrypted" in str(exc) else "undecryptable"
            if "not bound" in str(exc):
                kind = "unbound"
            return Finding(key, kind, "damage", f"not rewritten: {exc}")
        except DecodeError as exc:
            return Finding(key, "undecodable", "damage", f"not rewritten: {exc}")
        try:
            await storage.put(key, new, mode=IfMatch(version))
        except (PreconditionFailed, OutcomeUnknown):
            continue  # changed meanwhile, or unknown: read it again
        except NotFound:
            report.gone += 1
            return None
        report.rewritten += 1
        return None
    return Finding(
        key,
        "busy",
        "warning",
        f"not rewritten: the record at key {key!r} changed under each of {retries} attempts",
    )
