"""The agent-framework storage's key layout and record formats, without agent-framework.

`CheckpointkitCheckpointStorage` writes
with these, and the command line reads with them, so the layout is written
down once and the operator tools work on a base install.

Key layout, under the storage's prefix ``{p}`` (``agent-framework/`` by default)::

    {p}cp/_{checkpoint_id}                       the checkpoint
    {p}wf/_{workflow_name}/{~time}-{id}          an empty marker, newest first
    {p}head/_{workflow_name}                     names the workflow's newest marker

Names and ids are percent-encoded; ``{~time}`` is the checkpoint's timestamp
in microseconds, offset and inverted, in 16 hex digits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, unquote

import msgspec

__all__ = [
    "CODEC_AGENT_FRAMEWORK_HEAD",
    "CODEC_AGENT_FRAMEWORK_JSON",
    "CODEC_AGENT_FRAMEWORK_MSGPACK",
    "AgentFrameworkLayout",
    "decode_checkpoint",
    "marker_time",
    "micros",
]

CODEC_AGENT_FRAMEWORK_MSGPACK = 140
"""Envelope codec tag: agent-framework's encoded checkpoint structure, as msgpack."""

CODEC_AGENT_FRAMEWORK_JSON = 141
"""Envelope codec tag: the same structure as JSON (when an integer exceeds msgpack's range)."""

CODEC_AGENT_FRAMEWORK_HEAD = 142
"""Envelope codec tag of a workflow's head: the UTF-8 name of its newest marker."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TIME_OFFSET = 2**62  # microseconds, so that times before 1970 stay positive
_TIME_MAX = 2**64 - 1
_MARKER_TIME = 16  # hex digits of {~time}
_msgpack_decoder = msgspec.msgpack.Decoder()


def micros(timestamp: str) -> int:
    """Microseconds since 1970 of an ISO 8601 timestamp (naive means UTC).

    Raises:
        ValueError: Not ISO 8601.
    """
    if not isinstance(timestamp, str):
        raise ValueError(f"{timestamp!r} is not an ISO 8601 timestamp")
    moment = datetime.fromisoformat(timestamp)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(microseconds=1)


def marker_time(name: str) -> float | None:
    """Seconds since 1970 that a marker's name (``{~time}-{id}``) holds; None if it holds none."""
    try:
        inverted = int(name[:_MARKER_TIME], 16)
    except ValueError:
        return None
    return (_TIME_MAX - inverted - _TIME_OFFSET) / 1e6


def decode_checkpoint(tag: int, payload: bytes, key: str) -> dict[str, Any]:
    """The encoded checkpoint structure (nothing unpickled) from an opened envelope.

    Raises:
        ValueError: Not an agent-framework checkpoint, or not a mapping
            (the message names ``key``).
    """
    try:
        if tag == CODEC_AGENT_FRAMEWORK_MSGPACK:
            encoded = _msgpack_decoder.decode(payload)
        elif tag == CODEC_AGENT_FRAMEWORK_JSON:
            encoded = json.loads(payload)
        else:
            raise ValueError(
                f"the envelope at key {key!r} has codec tag {tag}, which is not an "
                "agent-framework checkpoint"
            )
    except (msgspec.DecodeError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"the checkpoint at key {key!r} is malformed: {exc}") from None
    if not isinstance(encoded, dict):
        raise ValueError(f"the checkpoint at key {key!r} is not a mapping")
    return encoded


@dataclass(frozen=True, slots=True)
class AgentFrameworkLayout:
    """The keys of one storage, under ``p`` (its prefix with a trailing ``/``, or ``""``)."""

    p: str

    @classmethod
    def of(cls, prefix: str) -> AgentFrameworkLayout:
        """The layout of a storage made with ``prefix`` (``"agent-framework"`` or ``""``)."""
        prefix = prefix.strip("/")
        return cls(f"{prefix}/" if prefix else "")

    @property
    def checkpoints(self) -> str:
        """``{p}cp/``: where every checkpoint is, whatever its workflow."""
        return f"{self.p}cp/"

    @property
    def workflows(self) -> str:
        """``{p}wf/``: where the markers of every workflow are."""
        return f"{self.p}wf/"

    @property
    def heads(self) -> str:
        """``{p}head/``: where the workflows' heads are."""
        return f"{self.p}head/"

    def checkpoint_key(self, checkpoint_id: str) -> str:
        """The key of a checkpoint."""
        return f"{self.checkpoints}_{quote(checkpoint_id, safe='')}"

    def workflow_prefix(self, workflow_name: str) -> str:
        """Where a workflow's markers are listed, newest first."""
        return f"{self.workflows}_{quote(workflow_name, safe='')}/"

    def marker_key(self, workflow_name: str, timestamp: str, checkpoint_id: str) -> str:
        """The key of a checkpoint's marker.

        Raises:
            ValueError: ``timestamp`` is not ISO 8601.
        """
        inverted = _TIME_MAX - (micros(timestamp) + _TIME_OFFSET)
        return (
            f"{self.workflow_prefix(workflow_name)}{inverted:016x}-{quote(checkpoint_id, safe='')}"
        )

    def head_key(self, workflow_name: str) -> str:
        """The key of a workflow's head."""
        return f"{self.heads}_{quote(workflow_name, safe='')}"

    @staticmethod
    def marker_id(key: str) -> str:
        """The checkpoint id that a marker key (or a marker's name) names."""
        return unquote(key[key.rfind("/") + _MARKER_TIME + 2 :])

    def checkpoint_id_of(self, key: str) -> str:
        """The checkpoint id of a checkpoint key.

        Raises:
            ValueError: Not a checkpoint key of this layout.
        """
        rest = key[len(self.checkpoints) :] if key.startswith(self.checkpoints) else ""
        if not rest.startswith("_") or "/" in rest:
            raise ValueError(f"{key!r} is not an agent-framework checkpoint key under {self.p!r}")
        return unquote(rest[1:])

    def workflow_of(self, key: str) -> str:
        """The workflow name of a marker key.

        Raises:
            ValueError: Not a marker key of this layout.
        """
        rest = key[len(self.workflows) :] if key.startswith(self.workflows) else ""
        parts = rest.split("/")
        if len(parts) != 2 or not parts[0].startswith("_") or marker_time(parts[1]) is None:
            raise ValueError(f"{key!r} is not an agent-framework marker key under {self.p!r}")
        return unquote(parts[0][1:])
