"""The LangGraph saver's key layout and record formats, without LangGraph.

`CheckpointkitSaver` writes with these, and the
command line reads with them (``checkpointkit runs``, ``ls``, ``show``,
``verify``, ``prune``, ``rm``), so the layout is written down once and the
operator tools work on a base install, LangGraph or not.

Key layout, under the saver's prefix ``{p}`` (``langgraph/`` by default)::

    {p}c/{thread}/{ns}/{~id}                   one record per checkpoint, newest first
    {p}w/{thread}/{ns}/{id}/{task}/r{n}        a task's regular writes of one call (n writes)
    {p}w/{thread}/{ns}/{id}/{task}/s{k}        a special write (error, interrupt, resume...)
    {p}b/{thread}/{ns}/{channel}/{version}     a large channel value, once per version
    {p}h/{thread}/{ns}                         the head: the id of the newest checkpoint
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from urllib.parse import quote, unquote

import msgspec

__all__ = [
    "CODEC_LANGGRAPH_BLOB",
    "CODEC_LANGGRAPH_HEAD",
    "CODEC_LANGGRAPH_RECORD",
    "CODEC_LANGGRAPH_WRITE",
    "FORMAT",
    "CheckpointKey",
    "LangGraphLayout",
    "Record",
    "Writes",
    "decode_record",
    "decode_writes",
    "encode",
    "inverted",
    "seg",
    "uninverted",
    "unseg",
]

CODEC_LANGGRAPH_RECORD = 128
"""Envelope codec tag of a checkpoint record (msgpack, LangGraph-serialized values inside)."""

CODEC_LANGGRAPH_WRITE = 129
"""Envelope codec tag of a pending-write record."""

CODEC_LANGGRAPH_BLOB = 130
"""Envelope codec tag of a large channel value: the bytes of ``serde.dumps_typed``."""

CODEC_LANGGRAPH_HEAD = 131
"""Envelope codec tag of a head: the UTF-8 id of the newest checkpoint of a thread and namespace."""

FORMAT = 1
"""The format number inside the records this checkpointkit writes and reads."""

_COMPLEMENT = bytes(range(255, -1, -1))


class Record(msgspec.Struct, array_like=True, frozen=True):
    """A checkpoint record: the checkpoint without its channel values, and the values.

    Attributes:
        format: `FORMAT`.
        checkpoint: ``serde.dumps_typed`` of the checkpoint (``channel_values`` empty).
        metadata: ``serde.dumps_typed`` of the metadata.
        parent: The parent checkpoint's id, or None.
        values: Channel -> ``(serde type, bytes)`` of each value stored inline.
        blobs: Channel -> ``(version, serde type)`` of each value stored apart.
    """

    format: int
    checkpoint: tuple[str, bytes]
    metadata: tuple[str, bytes]
    parent: str | None
    values: dict[str, tuple[str, bytes]]
    blobs: dict[str, tuple[str, str]]


class Writes(msgspec.Struct, array_like=True, frozen=True):
    """The writes of one ``put_writes`` call (its regular ones), or one special write."""

    format: int
    task_id: str
    task_path: str
    items: list[tuple[int, str, str, bytes]]  # idx, channel, serde type, value


_encoder = msgspec.msgpack.Encoder()
_record_decoder = msgspec.msgpack.Decoder(Record)
_writes_decoder = msgspec.msgpack.Decoder(Writes)


def encode(value: Record | Writes) -> bytes:
    """The payload of a record (what the envelope seals)."""
    return _encoder.encode(value)


def decode_record(payload: bytes, key: str) -> Record:
    """A checkpoint record from its payload.

    Raises:
        ValueError: Malformed, or a format this checkpointkit does not read
            (the message names ``key``).
    """
    try:
        record = _record_decoder.decode(payload)
    except msgspec.MsgspecError as exc:
        raise ValueError(f"the checkpoint record at key {key!r} is malformed: {exc}") from None
    if record.format != FORMAT:
        raise ValueError(
            f"the checkpoint record at key {key!r} has format {record.format}; "
            f"this checkpointkit reads format {FORMAT}"
        )
    return record


def decode_writes(payload: bytes, key: str) -> Writes:
    """A pending-write record from its payload.

    Raises:
        ValueError: Malformed, or a format this checkpointkit does not read.
    """
    try:
        writes = _writes_decoder.decode(payload)
    except msgspec.MsgspecError as exc:
        raise ValueError(f"the pending writes at key {key!r} are malformed: {exc}") from None
    if writes.format != FORMAT:
        raise ValueError(
            f"the pending writes at key {key!r} have format {writes.format}; "
            f"this checkpointkit reads format {FORMAT}"
        )
    return writes


@functools.lru_cache(maxsize=4096)
def seg(text: str) -> str:
    """One key segment for any string: ``_`` and the percent-encoded text (never empty).

    Cached: a put names its thread and namespace several times (record, head, writes)."""
    return "_" + quote(text, safe="")


def unseg(segment: str) -> str:
    """The string of a segment made by `seg`.

    Raises:
        ValueError: Not a segment that `seg` makes.
    """
    if not segment.startswith("_"):
        raise ValueError(f"{segment!r} is not a segment of the LangGraph saver's keys")
    return unquote(segment[1:])


def inverted(checkpoint_id: str) -> str:
    """A key segment that sorts in the opposite order of ``checkpoint_id``.

    Each UTF-8 byte is complemented and written in hex; ``~`` (above every hex
    digit) ends it, so an id sorts after any longer id that it prefixes.
    """
    return checkpoint_id.encode().translate(_COMPLEMENT).hex() + "~"


def uninverted(segment: str) -> str:
    """The checkpoint id of a segment made by `inverted`.

    Raises:
        ValueError: Not such a segment.
    """
    if not segment.endswith("~"):
        raise ValueError(f"{segment!r} is not an inverted checkpoint id")
    return bytes.fromhex(segment[:-1]).translate(_COMPLEMENT).decode()


@dataclass(frozen=True, slots=True)
class CheckpointKey:
    """What a checkpoint record's key names."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str


@dataclass(frozen=True, slots=True)
class LangGraphLayout:
    """The keys of one saver, under ``p`` (its prefix with a trailing ``/``, or ``""``)."""

    p: str

    @classmethod
    def of(cls, prefix: str) -> LangGraphLayout:
        """The layout of a saver made with ``prefix`` (``"langgraph"``, ``"a/b"`` or ``""``)."""
        prefix = prefix.strip("/")
        return cls(f"{prefix}/" if prefix else "")

    def kind_prefix(self, kind: str, thread_id: str | None = None) -> str:
        """``{p}{kind}/``, or ``{p}{kind}/{thread}/`` (kind: ``c``, ``w``, ``b`` or ``h``)."""
        if thread_id is None:
            return f"{self.p}{kind}/"
        return f"{self.p}{kind}/{seg(thread_id)}/"

    def checkpoint_prefix(self, thread_id: str, ns: str | None = None) -> str:
        """Where the checkpoints of a thread (and namespace) are listed, newest first."""
        if ns is None:
            return self.kind_prefix("c", thread_id)
        return f"{self.kind_prefix('c', thread_id)}{seg(ns)}/"

    def checkpoint_key(self, thread_id: str, ns: str, checkpoint_id: str) -> str:
        """The key of a checkpoint record."""
        return f"{self.checkpoint_prefix(thread_id, ns)}{inverted(checkpoint_id)}"

    def writes_prefix(self, thread_id: str, ns: str, checkpoint_id: str) -> str:
        """Where the pending writes of a checkpoint are."""
        return f"{self.kind_prefix('w', thread_id)}{seg(ns)}/{seg(checkpoint_id)}/"

    def writes_key(
        self, thread_id: str, ns: str, checkpoint_id: str, task_id: str, name: str
    ) -> str:
        """The key of one pending-write record (``name``: ``r{n}`` or ``s{k}``)."""
        return f"{self.writes_prefix(thread_id, ns, checkpoint_id)}{seg(task_id)}/{name}"

    def blob_key(self, thread_id: str, ns: str, channel: str, version: str) -> str:
        """The key of a large channel value."""
        return f"{self.kind_prefix('b', thread_id)}{seg(ns)}/{seg(channel)}/{seg(version)}"

    def head_key(self, thread_id: str, ns: str) -> str:
        """The key of the head of a thread and namespace."""
        return f"{self.kind_prefix('h', thread_id)}{seg(ns)}"

    def parse_checkpoint_key(self, key: str) -> CheckpointKey:
        """What a checkpoint record's key names.

        Raises:
            ValueError: ``key`` is not a checkpoint key of this layout.
        """
        head = self.kind_prefix("c")
        parts = key[len(head) :].split("/") if key.startswith(head) else []
        if len(parts) != 3:
            raise ValueError(f"{key!r} is not a LangGraph checkpoint key under {self.p!r}")
        try:
            return CheckpointKey(unseg(parts[0]), unseg(parts[1]), uninverted(parts[2]))
        except (ValueError, UnicodeDecodeError):
            raise ValueError(
                f"{key!r} is not a LangGraph checkpoint key under {self.p!r}"
            ) from None

    def parse_writes_key(self, key: str) -> tuple[str, str, str, str, str]:
        """``(thread, ns, checkpoint id, task id, name)`` of a pending-write key.

        Raises:
            ValueError: ``key`` is not a pending-write key of this layout.
        """
        head = self.kind_prefix("w")
        parts = key[len(head) :].split("/") if key.startswith(head) else []
        if len(parts) != 5 or parts[4][:1] not in ("r", "s") or not parts[4][1:].isdigit():
            raise ValueError(f"{key!r} is not a LangGraph pending-write key under {self.p!r}")
        thread, ns, checkpoint_id, task = (unseg(p) for p in parts[:4])
        return thread, ns, checkpoint_id, task, parts[4]

    def parse_blob_key(self, key: str) -> tuple[str, str, str, str]:
        """``(thread, ns, channel, version)`` of a large value's key.

        Raises:
            ValueError: ``key`` is not a value key of this layout.
        """
        head = self.kind_prefix("b")
        parts = key[len(head) :].split("/") if key.startswith(head) else []
        if len(parts) != 4:
            raise ValueError(f"{key!r} is not a LangGraph channel value key under {self.p!r}")
        thread, ns, channel, version = (unseg(p) for p in parts)
        return thread, ns, channel, version

    def parse_head_key(self, key: str) -> tuple[str, str]:
        """``(thread, ns)`` of a head's key.

        Raises:
            ValueError: ``key`` is not a head key of this layout.
        """
        head = self.kind_prefix("h")
        parts = key[len(head) :].split("/") if key.startswith(head) else []
        if len(parts) != 2:
            raise ValueError(f"{key!r} is not a LangGraph head key under {self.p!r}")
        return unseg(parts[0]), unseg(parts[1])

    def thread_of(self, key: str) -> str | None:
        """The thread id of any key of this layout (c, w, b or h), or None."""
        if not key.startswith(self.p):
            return None
        parts = key[len(self.p) :].split("/", 2)
        if len(parts) < 3 or parts[0] not in ("c", "w", "b", "h") or not parts[1].startswith("_"):
            return None
        return unquote(parts[1][1:])
