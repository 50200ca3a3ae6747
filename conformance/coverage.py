"""Protocol coverage: which cells of the storage protocol's surface a run exercised.

A suite that never makes the call a defect needs cannot catch it, and a pass
then says nothing. So the suite measures what it did. Every storage it opens
(`Target.open`) is wrapped
in a `CoverageProbe`, which classifies each call into cells of ten
matrices and records them in the process-wide `coverage`:

``state``
    each operation and mode (put overwrite, create-only, if-match with the
    key's current version, with a stale one of the key or with one no adapter
    minted; get; delete plain or if-match; ``delete_many``; ``list``) against
    the state the key is in: missing (never written), present, just deleted,
    or present and written through an earlier storage at the same location
    that was closed since (``reopened``), or past its expiry (``expired``: written
    through a storage opened with ``ttl`` that long ago).
``after``
    each operation and mode (the rows of ``state``) against the kind of
    write that last changed its key: an overwrite, a create-only put, an
    if-match put, a delete, an if-match delete, a ``delete_many``. An
    adapter that caches reads or listings and forgets the cache on some
    write paths only answers wrong after the others. A column ``another
    client``: an operation through a storage object that used the key
    before a second one at the same location (of a ``shared`` adapter)
    wrote it; a cache kept in each client object, forgotten by its own
    writes only, answers from before the other's write.
``expiry``
    a key of a storage opened with ``ttl``, by the write that gave it its
    expiry (an overwrite, a create-only put, an if-match put): an operation
    before that expiry but past the expiry the key's write before had
    (``kept``: the write renewed it; a create-only put, of a key that had
    expired), and one past it (``expired``). A write that keeps the expiry
    the key had (Redis's ``KEEPTTL``) or sets none (a ``SET`` without
    ``PX``) is wrong in one of them. A row ``large value``: a key holding
    one of the sizes of ``large values``, whichever put wrote it (an
    adapter that keeps such a value in parts gives them an expiry of their
    own).
``lifecycle``
    each operation while another task writes the same key (a listing: a key
    of its prefix), while another client (a second storage object at the same
    location, of a ``shared`` adapter) writes it, while a listing covers the
    key being written, with an
    ``aclose()`` called while it runs, after ``aclose()``, cancelled, as
    a first call (made before the storage object answered anything: what
    opens its client, connections, files or schema), while the backend is
    down (a put and a delete in each conditional mode in rows of their own,
    `DOWN_MODES`), a listing read on, past its first page, once the backend went
    down (``down at a later page``), one with another client's write of its key between
    two of its exchanges (``written in a gap``: the stall proxy holds the request that
    opens the next one), a ``delete_many`` of a large batch whose
    backend goes down between two of its requests (``down partway``,
    `backend_down_partway`), one
    read on while another listing
    of the same storage object is open (``another listing open``), one
    read on while a put over a present key it has still to yield is in
    flight (``kept key overwritten``: an index row that an overwrite
    deletes and inserts again is missing in between), and
    one that returns a key after keys of its range that expired (``past
    expired keys``: a backend that filters expired items out of a page
    read by the limit answers a short page, or an empty one, before the
    end); a write's ``cancelled`` cell only where a test watched what it
    did after ``CancelledError`` (`watching_landings`);
    ``aclose()`` itself after
    another, while another runs, cancelled, as a first call (of a storage
    never used), while the backend is down, and while a hold keeps it from
    answering (``backend held``); each operation and ``aclose()`` through a
    storage object after another of the same target was closed while it stayed
    open (``another closed``: a client, pool or session shared between storage
    objects, closed by the first ``aclose()``); and a storage's first call (whichever
    operation) while the backend is down (row ``first call``).
``sizes``
    ``put`` and ``get`` of values of 0 and 1 bytes, of every power of two
    from 2 to the target's ``max_value`` (64 MiB by default) and of the value
    limits of common backends (`VALUE_LIMITS`), each also minus and plus one.
``batches``
    ``delete_many`` of 0, 1 and 2 keys, of every power of two up to the
    target's ``max_batch`` (65,537 by default) and one more, and of the batch
    limits of common backends and one more (`BATCH_LIMITS`): an adapter that
    sends one request per batch must split a batch its backend refuses.
``values``
    ``put`` and ``get`` of values of every shape an adapter may read as
    something else (`value_shapes`): every byte value, invalid UTF-8, byte
    order marks, line ends, whitespace around, the streams of zlib, gzip,
    bzip2, xz and zstd and the headers of LZ4 and Snappy, a pickle, JSON.
``large values``
    what can change with a value's size, at one byte over every power of four
    from 1 KiB to the target's ``max_value`` (so that a value crosses any
    power-of-two threshold at which an adapter stores or sends values another
    way: in parts, staged, streamed): an overwrite of a key that holds a
    value, a create-only put, an if-match put, an if-match delete of a key
    that holds such a value, a ``delete_many`` of one (of a storage with its
    own), and a listing that returns one and a key after it (a backend that
    answers a listing a megabyte at a time cuts its page short there).
``keys``
    ``put``, ``get``, ``delete``, ``delete_many`` (of a storage with its own) and
    ``list`` of every shape of key the
    protocol allows (one character, several segments, 100 or more segments, a
    200-byte segment, the longest key the storage holds, characters of two,
    three and four UTF-8 bytes, punctuation, dots), and listings that return
    keys related to each other (a parent and its child; neighbours of ``/``
    in code-point order; keys of 100 or more directories; 1 MiB of names; keys equal
    but for a trailing space, which a SQL PAD SPACE collation takes for one).
``listing``
    ``list`` with the empty prefix, a prefix ending in ``/`` and one ending
    inside a segment, against ``start_after`` (none, inside the prefix, before
    it, past it), ``limit`` (none, 0, 1, more) and more than one page.

A cell is *reachable* when the adapter's declared capabilities and the target
make it possible (an if-match put needs ``conditional_put``; ``reopened`` needs
``durable`` and a factory that takes ``location``; an if-match with the key's
current version needs a key that exists). The report lists every reachable
cell that no test exercised, and such a cell keeps an adapter from the
``full`` level: an unexercised cell is a place where a defect could hide.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import math
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from collections.abc import Set as AbstractSet
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ClassVar, Literal, Protocol, Self

from ..errors import NotFound, PreconditionFailed
from ..keys import MAX_KEY_BYTES
from ..storage import Capabilities, GetResult, IfMatch, PutMode, Storage, StorageBase, delete_many

__all__ = [
    "BATCH_LIMITS",
    "DEFAULT_MAX_BATCH",
    "DEFAULT_MAX_VALUE",
    "DOWN_MODES",
    "LARGE_COLUMNS",
    "MATRICES",
    "PARTWAY_OPS",
    "VALUE_LIMITS",
    "Cell",
    "Coverage",
    "CoverageProbe",
    "CoverageRecorder",
    "Reach",
    "Readers",
    "Surface",
    "active_recorder",
    "backend_down",
    "backend_down_partway",
    "backend_held",
    "batch_cap",
    "batch_label",
    "batch_sizes",
    "coverage",
    "large_sizes",
    "measuring_waits",
    "recording",
    "reply_lost",
    "size_classes",
    "size_label",
    "value_shapes",
    "watching_landings",
]

DEFAULT_MAX_VALUE = 64 * 1024 * 1024
"""The largest value size the ``sizes`` matrix asks for, unless the target sets less."""

DEFAULT_MAX_BATCH = 65537
"""The largest ``delete_many`` the ``batches`` matrix asks for, unless the target sets less."""

BATCH_LIMITS: dict[int, str] = {
    25: "DynamoDB's BatchWriteItem",
    100: "DynamoDB's TransactWriteItems, a Cosmos DB transactional batch",
    256: "an Azure Blob batch",
    999: "host parameters of SQLite before 3.32",
    1000: "S3's DeleteObjects",
    32766: "host parameters of SQLite since 3.32",
    32767: "asyncpg's query arguments",
    65535: "parameters of one PostgreSQL statement, MySQL's placeholders",
}
"""The most keys one request or statement of some common backends takes: the
``batches`` matrix asks for a batch of each and one more (an adapter must split a
batch that its backend refuses)."""

VALUE_LIMITS: dict[int, str] = {
    255 * 1024: "a GridFS chunk (255 KiB)",
    2 * 255 * 1024: "two GridFS chunks",
    400 * 1024: "a DynamoDB item (400 KB, counting its key and attribute names)",
    1024 * 1024: "a Redis, memcached or Firestore item, an Azure Table entity (1 MiB)",
    1536 * 1024: "an etcd request (1.5 MiB)",
    5 * 1024 * 1024: "the smallest part of an S3 multipart upload (5 MiB)",
}
"""Value sizes at which some common backends refuse a value or store it another way: the
``sizes`` matrix asks for each, one byte less and one more (at most the target's
``max_value``). An adapter that keeps a value inline up to the documented limit refuses one
that its key and attribute names push over it; one that reads a value in parts miscounts
them at an exact multiple of the part size."""

Cell = tuple[str, str, str]
"""``(matrix, row, column)``, e.g. ``("state", "put if-match current", "present")``."""

PUT_ROWS = (
    "put overwrite",
    "put create",
    "put if-match current",
    "put if-match stale",
    "put if-match bogus",
)
DELETE_ROWS = (
    "delete",
    "delete if-match current",
    "delete if-match stale",
    "delete if-match bogus",
)
STATE_ROWS = (*PUT_ROWS, "get", *DELETE_ROWS, "delete_many", "list")
STATES = ("missing", "present", "deleted", "reopened", "expired")
AFTER_WRITES = ("overwrite", "create", "if-match put", "delete", "if-match delete", "delete_many")
"""The columns of ``after``: the kind of write that last changed a key."""
ANOTHER_CLIENT = "another client"
"""The column of ``after`` of an operation through a storage object that used its key
before another storage object at the same location wrote it."""
EXPIRY_ROWS = ("put overwrite", "put create", "put if-match", "large value")
"""The rows of ``expiry``: the write that gave a key its expiry, and a key that holds a
large value."""
_EXPIRY_ROW = dict(zip(AFTER_WRITES[:3], EXPIRY_ROWS[:3], strict=True))
"""The row of ``expiry`` of each put among `AFTER_WRITES`."""
EXPIRY_COLUMNS = ("kept", "expired")
"""The columns of ``expiry``: an operation before the key's expiry and past the one its
write before had (``kept``), and one past its expiry (``expired``)."""
OPS = ("put", "get", "delete", "delete_many", "list")
EVENTS = (
    "concurrent write",
    "another client writing",
    "being listed",
    "during aclose",
    "after aclose",
    "cancelled",
    "first call",
    "backend down",
    "down at a later page",
    "down partway",
    "reply lost",
    "request lost",
    "timed out",
    "written in a gap",
    "another listing open",
    "past expired keys",
    "kept key overwritten",
    "another closed",
)
DOWN_MODES = {"put create": "put", "put if-match": "put", "delete if-match": "delete"}
"""The ``lifecycle`` rows of the conditional modes, with one column, ``backend down``: an
adapter that reads any error of a conditional request as its condition failing answers
``PreconditionFailed`` (or ``False``) for a backend that could not be asked. Each is
reachable with its capability, where the target's outage fails its operation; the rows
``put`` and ``delete`` of that column are the unconditional modes."""
ACLOSE_EVENTS = ("during aclose", "after aclose", "cancelled", "first call")
"""The ``lifecycle`` columns of ``aclose()`` itself (``during aclose``: a second call
while the first one runs)."""
SHAPES = (
    "one character",
    "several segments",
    "100+ segments",
    "200-byte segment",
    "longest held",
    "2-byte UTF-8",
    "3-byte UTF-8",
    "4-byte UTF-8",
    "punctuation",
    "dot in a segment",
)
RELATIONS = (
    "parent and child listed",
    "neighbours of '/' listed",
    "100+ directories listed",
    "1 MiB of names listed",
    "twins but for a trailing space listed",
)
NAMES_LISTED = 1024 * 1024
"""A listing that returns this many bytes of key names or more spans more than one answer
of a backend that answers a megabyte at a time (DynamoDB's keys-only ``Query``)."""
MANY_DIRECTORIES = 100
"""A listing that returns keys of this many parents (what comes before their last ``/``)
or more spans more directories, partitions or scopes than an adapter may merge at once."""
KEY_OPS = ("put", "get", "delete", "delete_many", "list")
SHAPED_BATCH = 1000
"""A ``delete_many`` is sorted into ``keys`` by its first this many keys (every key of a
batch of 65,537 would cost seconds; a cell is only ever left out, never claimed)."""
PREFIXES = ("empty prefix", "prefix ending in '/'", "prefix inside a segment")
LIST_OPTIONS = (
    "start_after none",
    "start_after inside",
    "start_after before",
    "start_after past",
    "limit none",
    "limit 0",
    "limit 1",
    "limit more",
    "several pages",
)
MATRICES = (
    "state",
    "after",
    "expiry",
    "lifecycle",
    "sizes",
    "values",
    "large values",
    "batches",
    "keys",
    "listing",
)
"""The matrices, in report order."""

_PUNCTUATION = frozenset(" %+?#:*~=;&@$,'\"[]")
_NEIGHBOURS = frozenset("-./0")


def state_rows(conditional_put: bool, conditional_delete: bool) -> list[str]:
    """The rows of ``state`` (and ``after``) that the conditional capabilities allow."""
    return [
        row
        for row in STATE_ROWS
        if (conditional_put or not row.startswith("put ") or row == "put overwrite")
        and (conditional_delete or not row.startswith("delete if-match"))
    ]


def after_pairs(conditional_put: bool, conditional_delete: bool) -> list[tuple[str, str]]:
    """The cells of ``after`` that the conditional capabilities allow, as ``(row, write)``
    in report order: a deleted key has no current version to give."""
    writes = [
        w
        for w in AFTER_WRITES
        if (conditional_put or w not in ("create", "if-match put"))
        and (conditional_delete or w != "if-match delete")
    ]
    return [
        (row, write)
        for row in state_rows(conditional_put, conditional_delete)
        for write in writes
        if not (row.endswith("current") and write.endswith(("delete", "delete_many")))
    ]


def passed_on(given: Iterable[str], batch: list[str]) -> Iterable[str]:
    """What a wrapper that read ``given`` into ``batch`` hands the adapter: a one-shot
    iterator again where ``given`` was one (an adapter that reads its keys twice must meet
    the caller's generator), else ``batch``."""
    return iter(batch) if isinstance(given, Iterator) else batch


def size_classes(cap: int) -> list[int]:
    """0, 1, each power of two from 2 to ``cap`` and each of `VALUE_LIMITS`, also minus and
    plus one (at most ``cap``)."""
    sizes = {0, 1}
    power = 2
    while power <= cap:
        sizes.update(s for s in (power - 1, power, power + 1) if s <= cap)
        power *= 2
    sizes.update(s for n in VALUE_LIMITS for s in (n - 1, n, n + 1) if s <= cap)
    return sorted(sizes)


@functools.lru_cache(maxsize=4096)
def _key_shapes(key: str) -> tuple[tuple[str, ...], int | None]:
    """The ``keys`` rows that ``key`` belongs to by its text alone (not "longest held",
    which depends on the storage), and its size in UTF-8 (None: it cannot be encoded).
    Cached: the suite sends the same keys again and again, some of them 1 KiB long."""
    try:
        size = len(key.encode())
    except UnicodeEncodeError:
        return (), None
    shapes = []
    segments = key.split("/")
    if len(key) == 1:
        shapes.append("one character")
    if 1 < len(segments) < 100:
        shapes.append("several segments")
    if len(segments) >= 100:
        shapes.append("100+ segments")
    if any(len(s.encode()) >= 200 for s in segments):
        shapes.append("200-byte segment")
    if size != len(key):  # not ASCII: the widths of its distinct characters
        widths = {len(c.encode()) for c in set(key)}
        shapes += [f"{w}-byte UTF-8" for w in (2, 3, 4) if w in widths]
    if not _PUNCTUATION.isdisjoint(key):
        shapes.append("punctuation")
    if any("." in s and s not in (".", "..") for s in segments):
        shapes.append("dot in a segment")
    return tuple(shapes), size


@functools.cache
def value_shapes() -> dict[str, bytes]:
    """The rows of ``values``: small values that an adapter may take for text, or for
    its own compressed or encoded data (a read that decompresses what looks
    compressed, a text column that drops a byte order mark or translates line ends),
    or for its own marker (JSON ``null``, the value of a soft delete's tombstone)."""
    import bz2
    import gzip
    import lzma
    import pickle
    import zlib

    import zstandard

    plain = b"checkpointkit " * 64
    return {
        "every byte value": bytes(range(256)),
        "invalid UTF-8": b"\xc3\x28\xa0\xa1\xe2\x28\xa1\xf0\x28\x8c\xbc\xfe\xff",
        "UTF-8 byte order mark": b"\xef\xbb\xbfvalue",
        "UTF-16 byte order mark": "\ufeffvalue".encode("utf-16-le"),
        "line ends": b"a\r\nb\rc\nd\n\r",
        "whitespace around": b" \t value \t\n ",
        "zlib stream": zlib.compress(plain),
        "gzip stream": gzip.compress(plain, mtime=0),
        "bzip2 stream": bz2.compress(plain),
        "xz stream": lzma.compress(plain),
        "zstd frame": zstandard.ZstdCompressor().compress(plain),
        "LZ4 frame header": b"\x04\x22\x4d\x18\x64\x40\xa7" + plain[:32],
        "Snappy stream header": b"\xff\x06\x00\x00sNaPpY" + plain[:32],
        "pickle": pickle.dumps({"value": [1, 2.5, None]}, protocol=5),
        "JSON": b'{"value": [1, 2.5, null]}',
        "JSON null": b"null",
    }


def batch_sizes(cap: int) -> list[int]:
    """The rows of ``batches``: 0, 1 and 2 keys, each power of two from 4 to ``cap`` and one
    more, and each of `BATCH_LIMITS` and one more (at most ``cap``)."""
    sizes = {0, 1, 2}
    power = 4
    while power <= cap:
        sizes.update(s for s in (power, power + 1) if s <= cap)
        power *= 2
    sizes.update(s for n in BATCH_LIMITS for s in (n, n + 1) if s <= cap)
    return sorted(sizes)


def batch_cap(max_batch: int, *, own: bool) -> int:
    """The largest ``delete_many`` worth sweeping: ``max_batch`` for a storage with a
    ``delete_many`` of its own, else 2 (its batch is one ``delete`` per key)."""
    return max_batch if own else min(max_batch, 2)


def batch_label(n: int) -> str:
    """``n`` as the ``batches`` matrix names it: ``"1 key"``, ``"1001 keys"``."""
    return "1 key" if n == 1 else f"{n} keys"


def large_sizes(cap: int) -> list[int]:
    """One byte over each power of four from 1 KiB to ``cap``: the rows of ``large values``."""
    return [(1 << k) + 1 for k in range(10, 63, 2) if (1 << k) + 1 <= cap]


LARGE_COLUMNS = ("overwrite", "create", "if-match", "delete if-match", "delete_many", "listed")
"""The columns of ``large values``: a put over a value, a create-only put, an if-match put;
an if-match delete of a key that holds such a value, a ``delete_many`` of one, a listing that
returns one."""


def size_label(size: int) -> str:
    """``size`` as the ``sizes`` matrix names it: ``"0 B"``, ``"4 KiB-1"``, ``"64 MiB"``."""
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        base = 1 << shift
        for delta in (-1, 0, 1):
            if size - delta >= base and (size - delta) % base == 0:
                n = (size - delta) >> shift
                return f"{n} {unit}" + ("" if not delta else f"{delta:+d}")
    return f"{size} B"


class Surface(Protocol):
    """What makes the cells of some matrices reachable for one target.

    `Reach` is the storage protocol's; the ecosystem suites have their own
    (`checkpointkit.conformance.ecosystems.coverage`), over a LangGraph saver's
    or an agent-framework storage's methods. `Coverage` and the report render
    any of them.
    """

    @property
    def matrices(self) -> tuple[str, ...]:
        """The matrices, in report order."""
        ...

    def cells(self) -> list[Cell]:
        """Every cell the target makes reachable, in report order."""
        ...

    def reachable(self, exercised: AbstractSet[Cell]) -> list[Cell]:
        """The cells of `cells` that stay reachable given what the run observed
        (``exercised`` holds the markers a probe records beside the cells)."""
        ...

    def unreachable(self, exercised: AbstractSet[Cell] = frozenset()) -> list[str]:
        """Why rows, columns or cells are unreachable, one sentence each (may be empty)."""
        ...


@dataclass(frozen=True)
class Reach:
    """What makes cells of the storage protocol reachable for one target.

    Attributes:
        capabilities: what the adapter declared (or the target overrides).
        reopens: the target's factory takes ``location`` (a second storage on the same data).
        max_value: the largest value size the ``sizes`` matrix asks for.
        max_batch: the largest ``delete_many`` the ``batches`` matrix asks for.
        batches: the storage has a ``delete_many`` of its own (else a batch is
            one ``delete`` per key, and ``batches`` stops at 2 keys).
        paging: the listing's page size can be set (a `StorageBase`).
        deep_keys: the storage holds a key of 100 segments (a server with short
            names may not: SeaweedFS with ``object_names=flat``).
        expires: the target's factory takes ``ttl`` (its keys can expire).
        down: the operations that can be called while the backend is down: those
            that the target's `Outage` fails; every operation when the target
            supplies none (so their cells show as not exercised); none for a
            storage with no backend that can fail (`NoBackend`).
        partway: the target's outage can start partway through a call
            (`Outage.partway`), or the target supplies none.
        lost_replies: the stall proxy can stand between the storage and its server
            (`Target.proxyable`), so a write's reply can be lost after the server
            answered it (``reply lost``).
        timeouts: the target's factory also takes ``timeout`` (`Target.times_out`), so a
            reply can be held past the storage's own deadline (``timed out``).
    """

    capabilities: Capabilities
    reopens: bool
    max_value: int = DEFAULT_MAX_VALUE
    max_batch: int = DEFAULT_MAX_BATCH
    batches: bool = True
    paging: bool = True
    deep_keys: bool = True
    down: tuple[str, ...] = OPS
    partway: bool = True
    expires: bool = False
    lost_replies: bool = False
    timeouts: bool = False

    @property
    def matrices(self) -> tuple[str, ...]:
        """The storage protocol's matrices, in report order (`MATRICES`)."""
        return MATRICES

    def reachable(self, exercised: AbstractSet[Cell]) -> list[Cell]:
        """`cells`: what the run observed (waits) is weighed by `Coverage.reachable`."""
        return self.cells()

    def unreachable(self, exercised: AbstractSet[Cell] = frozenset()) -> list[str]:
        """What the capabilities shown beside do not explain: a storage without a
        ``delete_many`` of its own has no batch beyond one ``delete`` per key; one whose
        ``delete_many`` of a whole batch went out as one request (or every request before
        any answer) has no point between two of them for its backend to go down."""
        out = []
        if not self.batches:
            out.append(
                "batches of more than 2 keys: the storage has no delete_many of its own "
                "(a batch is one delete per key)"
            )
        if self.lost_replies and not self.timeouts:
            out.append(
                "timed out: the target's factory takes no timeout, so no reply can be held "
                "past the storage's own deadline"
            )
        if not self.lost_replies:
            out.append(
                "reply lost: the target takes no endpoint (or names no upstream server), so "
                "the stall proxy cannot lose a write's reply after its server answered (a "
                "network adapter's target should take one)"
            )
        for op in PARTWAY_OPS:
            if _one_request(op) in exercised and _partway_cell(op) not in exercised:
                out.append(
                    f"{op} down partway: the storage sent its batch of the target's max_batch "
                    "keys as one request (or every request before any answer), so its backend "
                    "could not go down between two of them"
                )
        return out

    @property
    def batch_cap(self) -> int:
        """The largest row of ``batches`` (`batch_cap`)."""
        return batch_cap(self.max_batch, own=self.batches)

    def cells(self) -> list[Cell]:
        """Every reachable cell, in report order."""
        caps = self.capabilities
        out: list[Cell] = []
        rows = state_rows(caps.conditional_put, caps.conditional_delete)
        for row in rows:
            for state in STATES:
                if state == "reopened" and not (caps.durable and self.reopens):
                    continue
                if state == "expired" and not (caps.ttl and self.expires):
                    continue
                if row.endswith("current") and state in ("missing", "deleted"):
                    continue  # no current version to give
                if row.endswith("stale") and state == "missing":
                    continue  # a key never written has no stale version
                out.append(("state", row, state))
        out += [
            ("after", row, write)
            for row, write in after_pairs(caps.conditional_put, caps.conditional_delete)
        ]
        if caps.shared and self.reopens:
            out += [("after", row, ANOTHER_CLIENT) for row in rows]
        if caps.ttl and self.expires:
            for row in EXPIRY_ROWS:
                if row == "large value" and not large_sizes(self.max_value):
                    continue  # no value large enough to write
                if row in ("put overwrite", "large value") or caps.conditional_put:
                    out += [("expiry", row, column) for column in EXPIRY_COLUMNS]
        for op in OPS:
            for event in EVENTS:
                if event == "being listed" and op in ("get", "list"):
                    continue  # not a write
                if event == "backend down" and op not in self.down:
                    continue  # the target's outage does not fail it, or nothing can
                if event == "another listing open" and not (op == "list" and self.paging):
                    continue  # a listing read on while another of the same storage is open
                if event == "down at a later page" and not (
                    op == "list" and op in self.down and self.paging
                ):
                    continue  # a listing's next page, after one read while the backend was up
                if event == "down partway" and not (
                    op in PARTWAY_OPS and op in self.down and self.partway and self.batches
                ):
                    continue  # a call whose backend goes down between two of its requests
                if event == "reply lost" and not (op in WRITE_OPS and self.lost_replies):
                    continue  # a write whose reply the stall proxy held, then dropped
                if event == "request lost" and not (
                    op in WRITE_OPS and self.lost_replies and caps.shared and self.reopens
                ):
                    continue  # ...whose request it held while another client wrote, dropped
                if event == "written in a gap" and not (
                    self.lost_replies and caps.shared and self.reopens
                ):
                    continue  # another client's write between two exchanges the proxy held
                if event == "timed out" and not self.timeouts:
                    continue  # a call whose reply the proxy held past the storage's deadline
                if event == "past expired keys" and not (
                    op == "list" and caps.ttl and self.expires
                ):
                    continue  # a listing that returns a key after keys that expired
                if event == "another client writing" and not (caps.shared and self.reopens):
                    continue  # no second client on the same data
                if event == "kept key overwritten" and op != "list":
                    continue  # a listing read on while a key it has still to yield is overwritten
                out.append(("lifecycle", op, event))
            for row, of in DOWN_MODES.items():
                if of != op or not (
                    caps.conditional_put if op == "put" else caps.conditional_delete
                ):
                    continue
                if op in self.down:
                    out.append(("lifecycle", row, "backend down"))
                if self.lost_replies:
                    out.append(("lifecycle", row, "reply lost"))
                    if caps.shared and self.reopens:
                        out.append(("lifecycle", row, "request lost"))
                    out.append(("lifecycle", row, "written in a gap"))
                if self.timeouts:
                    out.append(("lifecycle", row, "timed out"))
        out += [("lifecycle", "aclose", event) for event in (*ACLOSE_EVENTS, "another closed")]
        if self.down:
            out.append(("lifecycle", "aclose", "backend down"))
            out.append(("lifecycle", "first call", "backend down"))
        out.append(("lifecycle", "aclose", "backend held"))
        for size in size_classes(self.max_value):
            out += [("sizes", size_label(size), "put"), ("sizes", size_label(size), "get")]
        for shape in value_shapes():
            out += [("values", shape, "put"), ("values", shape, "get")]
        columns = [
            c
            for c in LARGE_COLUMNS
            if (caps.conditional_put or c not in ("create", "if-match"))
            and (caps.conditional_delete or c != "delete if-match")
            and (self.batches or c != "delete_many")
        ]
        for size in large_sizes(self.max_value):
            out += [("large values", size_label(size), column) for column in columns]
        out += [("batches", batch_label(n), "delete_many") for n in batch_sizes(self.batch_cap)]
        for shape in SHAPES:
            if shape == "100+ segments" and not self.deep_keys:
                continue
            out += [("keys", shape, op) for op in KEY_OPS if op != "delete_many" or self.batches]
        out += [("keys", relation, "list") for relation in RELATIONS]
        for prefix in PREFIXES:
            for option in LIST_OPTIONS:
                if option == "several pages" and not self.paging:
                    continue
                if prefix == "empty prefix" and option in (
                    "start_after before",
                    "start_after past",
                ):
                    continue  # every key starts with the empty prefix
                out.append(("listing", prefix, option))
        return out


# -- the state of keys, per location ---------------------------------------------------
_Known = Literal["missing", "present", "deleted", "unknown"]


@dataclass
class Readers:
    """Which clients (probes, by id) used each name since its last write, and which had
    used it before another client wrote it: a cache kept in such a client answers from
    before that write. Shared by the storage probe (keys) and the ecosystem probes
    (threads, checkpoints, workflows)."""

    used_by: dict[Any, set[int]] = field(default_factory=dict)
    stale_for: dict[Any, set[int]] = field(default_factory=dict)

    def wrote(self, name: Any, by: int) -> None:
        """``by`` changed ``name``: the other clients that used it have it stale."""
        self.stale_for[name] = self.used_by.pop(name, set()) - {by}

    def used(self, name: Any, by: int) -> bool:
        """``by`` uses ``name``; whether it had used it before another client's write."""
        stale = by in self.stale_for.get(name, ())
        self.used_by.setdefault(name, set()).add(by)
        return stale


@dataclass
class _Scope:
    """What the probes of one location saw of its keys."""

    state: dict[str, _Known] = field(default_factory=dict)
    versions: dict[str, list[str]] = field(default_factory=dict)
    writer: dict[str, int] = field(default_factory=dict)  # probe that last wrote the key
    closed_at: dict[int, int] = field(default_factory=dict)  # probe -> order it closed in
    writing: dict[str, int] = field(default_factory=dict)  # writes in flight per key
    overwriting: dict[str, int] = field(default_factory=dict)  # puts in flight over a present key
    writers: dict[str, dict[int, int]] = field(default_factory=dict)  # key -> probe -> writes
    # listings in flight: one left unfinished (a break) leaves when it is collected
    listing: weakref.WeakSet[_ProbedListing] = field(default_factory=weakref.WeakSet)
    deleted: set[str] = field(default_factory=set)  # keys whose last known write deleted them
    large: dict[str, str] = field(default_factory=dict)  # keys holding a large value: its row
    expiry: dict[str, float] = field(default_factory=dict)  # key -> when it expires
    renewed: dict[str, float] = field(default_factory=dict)  # key -> its earlier expiry
    changed_by: dict[str, str] = field(default_factory=dict)  # key -> its last write's kind
    readers: Readers = field(default_factory=Readers)  # who used each key since its write


@dataclass
class _Target:
    reach: Surface
    cells: set[Cell] = field(default_factory=set)


class CoverageRecorder:
    """The cells exercised per target, and what makes cells reachable; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._targets: dict[str, _Target] = {}
        self._scopes: dict[str, _Scope] = {}

    def clear(self) -> None:
        """Forget every target."""
        with self._lock:
            self._targets.clear()
            self._scopes.clear()

    def scope(self, location: str | None) -> _Scope:
        """What the probes of ``location`` saw of its keys (None: a scope of one probe)."""
        if location is None:
            return _Scope()
        with self._lock:
            return self._scopes.setdefault(location, _Scope())

    def target(self, name: str, reach: Surface) -> None:
        """Register ``name`` (once; a later registration keeps the cells)."""
        with self._lock:
            known = self._targets.get(name)
            if known is None:
                self._targets[name] = _Target(reach)
            else:
                known.reach = reach

    def record(self, name: str, cell: Cell) -> None:
        """Mark ``cell`` exercised for target ``name``."""
        with self._lock:
            known = self._targets.get(name)
            if known is not None:
                known.cells.add(cell)

    def targets(self) -> list[str]:
        """The names of the targets recorded."""
        with self._lock:
            return sorted(self._targets)

    def snapshot(self, name: str) -> tuple[Surface, set[Cell]] | None:
        """What makes cells reachable for ``name``, and the cells exercised."""
        with self._lock:
            known = self._targets.get(name)
            return None if known is None else (known.reach, set(known.cells))

    def result(self, name: str) -> Coverage | None:
        """The `Coverage` of target ``name``, or None if nothing was recorded."""
        snapshot = self.snapshot(name)
        return None if snapshot is None else Coverage(*snapshot)

    def merge(self, name: str, reach: Surface, cells: Iterable[Cell]) -> None:
        """Add cells recorded elsewhere (another process of the same run)."""
        with self._lock:
            known = self._targets.setdefault(name, _Target(reach))
            known.cells.update(tuple(c) for c in cells)  # type: ignore[misc]


coverage = CoverageRecorder()
"""The process-wide recorder that every `CoverageProbe` writes to by default."""

_ACTIVE: ContextVar[CoverageRecorder | None] = ContextVar("checkpointkit_coverage", default=None)
_MEASURING: ContextVar[bool] = ContextVar("checkpointkit_measuring_waits", default=False)
_DOWN: ContextVar[bool] = ContextVar("checkpointkit_backend_down", default=False)
_WATCHING: ContextVar[bool] = ContextVar("checkpointkit_watching_landings", default=False)
_OPEN_PROBES: dict[tuple[int, str], weakref.WeakSet[CoverageProbe]] = {}
"""The storage objects of each target (by recorder and name) not closed yet: closing one
marks the others as used after ``another closed``."""
_HELD: ContextVar[bool] = ContextVar("checkpointkit_backend_held", default=False)
_PARTWAY: ContextVar[Callable[[], bool] | None] = ContextVar(
    "checkpointkit_backend_down_partway", default=None
)
_LOST: ContextVar[tuple[Callable[[], bool], str] | None] = ContextVar(
    "checkpointkit_reply_lost", default=None
)
WRITE_OPS = ("put", "delete", "delete_many")
PARTWAY_OPS = ("delete_many",)
"""The operations whose ``down partway`` cell a cut (`backend_down_partway`) marks: a
``delete_many`` of a large batch. The put and the get of a large value cut partway have no
cell: whether a value of a few MiB goes out in one request or several can change from run to
run (a server that answers before the whole request arrived), and with it whether such a
cell would be reachable."""


def _partway_cell(op: str) -> Cell:
    return ("lifecycle", op, "down partway")


def _one_request(op: str) -> Cell:
    """The marker of an ``op`` run under `backend_down_partway` whose backend did not go
    down: it went in one request (or all its requests before an answer)."""
    return ("partway", op, "one request")


@contextlib.contextmanager
def backend_down() -> Iterator[None]:
    """The operations started in this context run while the target's backend is down
    (`outages`): each records its ``backend down`` cell, and nothing else."""
    token = _DOWN.set(True)
    try:
        yield
    finally:
        _DOWN.reset(token)


@contextlib.contextmanager
def backend_held() -> Iterator[None]:
    """An ``aclose()`` started in this context runs while the target's hold keeps the
    backend from answering (`holds`): it records ``aclose`` / ``backend held``."""
    token = _HELD.set(True)
    try:
        yield
    finally:
        _HELD.reset(token)


_ANY_CALL = ("timed out", "written in a gap")
"""The cells of `reply_lost` that a read records too, not only a write."""


@contextlib.contextmanager
def reply_lost(lost: Callable[[], bool], what: str = "reply lost") -> Iterator[None]:
    """A write started in this context may lose its reply (``what``: ``request lost``,
    its request; ``timed out``, any call whose reply is held past its deadline; ``written
    in a gap``, any call that the proxy held between two of its exchanges while another
    client wrote its key):
    ``lost()``, asked when the call ends, says whether that happened (the stall proxy
    held one of the server's replies, or the write's request, and dropped it, or the
    call ended while a reply was held). If so the call records ``what`` in its row
    (its mode's, for a conditional put or delete)."""
    token = _LOST.set((lost, what))
    try:
        yield
    finally:
        _LOST.reset(token)


@contextlib.contextmanager
def backend_down_partway(went_down: Callable[[], bool]) -> Iterator[None]:
    """An operation started in this context runs while the target's backend goes down
    partway (`Outage.down_partway`); a ``delete_many`` (`PARTWAY_OPS`) records ``down
    partway`` if ``went_down()`` says the backend went down before the call ended, else
    that it went out at once (which makes that cell unreachable, unless another run
    exercised it); any other operation records nothing."""
    token = _PARTWAY.set(went_down)
    try:
        yield
    finally:
        _PARTWAY.reset(token)


@contextlib.contextmanager
def measuring_waits() -> Iterator[None]:
    """Record whether the operations started in this context wait (give the loop a turn).

    The cancellation sweep starts each operation once this way, on a storage with
    nothing in its way: an operation that answers there without waiting can never
    be in flight, so its ``cancelled`` and ``during aclose`` cells are unreachable
    (a wait that only contention causes, now and then, does not make them reachable).
    """
    token = _MEASURING.set(True)
    try:
        yield
    finally:
        _MEASURING.reset(token)


@contextlib.contextmanager
def watching_landings() -> Iterator[None]:
    """The writes started in this context are watched for a late landing once cancelled
    (a `SettleWatch` reads their keys over the settle window): only such a write
    records its ``cancelled`` cell. A write cancelled where nothing watches what it
    does after ``CancelledError`` proves nothing of that, and leaves the cell to a test
    that does."""
    token = _WATCHING.set(True)
    try:
        yield
    finally:
        _WATCHING.reset(token)


def active_recorder() -> CoverageRecorder:
    """The recorder of the current context: the one `recording` set, or `coverage`."""
    return _ACTIVE.get() or coverage


@contextlib.contextmanager
def recording(into: CoverageRecorder) -> Iterator[CoverageRecorder]:
    """Record the probes created in this context (and tasks started from it) into ``into``."""
    token = _ACTIVE.set(into)
    try:
        yield into
    finally:
        _ACTIVE.reset(token)


_order = itertools.count()


def _clock() -> float:
    """The probe's clock for expiries (``time.monotonic``; a test may stand in for it)."""
    return time.monotonic()


class CoverageProbe:
    """Delegates to ``inner`` and records the cells each call exercises.

    Args:
        inner: the storage under test.
        target: the name cells are recorded under.
        reach: what makes cells reachable for that target.
        location: the location the storage was opened at; probes of one
            location share what they saw of its keys (None: a fresh one).
        holds_key: whether the storage holds a key (for "longest held").
        into: the recorder (the process-wide `coverage` by default).
        ttl: the ``ttl`` the storage was opened with (a key it wrote is ``expired``
            that long after).
    """

    capabilities: ClassVar[Capabilities] = Capabilities()

    def __init__(
        self,
        inner: Storage,
        target: str,
        reach: Reach,
        *,
        location: str | None = None,
        holds_key: Callable[[str], bool] | None = None,
        into: CoverageRecorder | None = None,
        ttl: float | None = None,
    ) -> None:
        self.inner = inner
        self.__dict__["capabilities"] = inner.capabilities
        self._name = target
        self._rec = into if into is not None else active_recorder()
        self._rec.target(target, reach)
        self._sizes = set(size_classes(reach.max_value))
        self._large = set(large_sizes(reach.max_value))
        self._batches = set(batch_sizes(reach.batch_cap))
        self._shaped = {data: name for name, data in value_shapes().items()}
        self._shaped_max = max(len(data) for data in self._shaped)
        self._scope = self._rec.scope(location)
        self._id = next(_order)
        self._holds = holds_key
        self._running: dict[int, str] = {}  # calls in flight -> their operation
        self._calls = itertools.count()
        self._closing = False
        self._ttl = ttl  # the storage was opened with this ttl: its writes expire
        self._closed = False  # the first aclose() has ended
        self._answered = False  # a call of this storage object has ended
        self._listings: weakref.WeakSet[_ProbedListing] = weakref.WeakSet()  # its listings
        # another storage object of the target was closed while this one was open
        self._another_closed = False
        _OPEN_PROBES.setdefault((id(self._rec), target), weakref.WeakSet()).add(self)

    def __repr__(self) -> str:
        return f"CoverageProbe({self.inner!r})"

    def __getattr__(self, name: str) -> Any:
        if name == "inner" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.inner, name)  # an adapter's own attributes, for the tests

    # -- classification -------------------------------------------------------------------
    def _mark(self, matrix: str, row: str, column: str) -> None:
        self._rec.record(self._name, (matrix, row, column))

    def _state(self, key: str) -> str | None:
        scope = self._scope
        state = scope.state.get(key, "missing")
        if state == "unknown":
            return None
        if state == "present" and _clock() >= scope.expiry.get(key, math.inf):
            return "expired"
        if state == "present":
            writer = scope.writer.get(key)
            closed = scope.closed_at.get(writer) if writer is not None else None
            if writer != self._id and closed is not None and closed < self._id:
                return "reopened"
        return state

    def _mark_expiry(self, key: str, state: str | None) -> None:
        """The ``expiry`` cell of an operation on ``key`` in ``state``, if it has one."""
        scope = self._scope
        if key not in scope.expiry:  # not written through a storage opened with ttl
            return
        written = _EXPIRY_ROW.get(scope.changed_by.get(key, ""))
        if written is None:
            return
        rows = [written, "large value"] if key in scope.large else [written]
        if state == "expired":
            column = "expired"
        elif state in ("present", "reopened") and _clock() >= scope.renewed.get(key, math.inf):
            column = "kept"
        else:
            return
        for row in rows:
            self._mark("expiry", row, column)

    def _mark_after(self, row: str, key: str, state: str | None) -> None:
        """The ``after`` cells of ``row`` on ``key``, if its last write is known: of that
        write, and `ANOTHER_CLIENT` if this probe used the key before another one wrote
        it."""
        write = self._scope.changed_by.get(key)
        stale = self._scope.readers.used(key, self._id)
        if write is not None and state is not None:
            self._mark("after", row, write)
            if stale:
                self._mark("after", row, ANOTHER_CLIENT)

    def _version_kind(self, key: str, version: str) -> str:
        seen = self._scope.versions.get(key, [])
        if seen and self._scope.state.get(key) == "present" and seen[-1] == version:
            return "current"
        return "stale" if version in seen else "bogus"

    def _shapes(self, key: str) -> list[str]:
        shapes, size = _key_shapes(key)
        if size is None:  # not a valid key: the adapter's to refuse
            return []
        if self._holds is not None:
            if self._holds(key) and not self._holds(key + "x"):
                return [*shapes, "longest held"]
        elif size == MAX_KEY_BYTES:
            return [*shapes, "longest held"]
        return list(shapes)

    def _before(self, op: str, row: str | None, keys: Iterable[str], writes: bool) -> None:
        """Cells that depend on the moment a call starts."""
        scope = self._scope
        keys = list(keys)
        if _PARTWAY.get() is not None:
            return  # marked when the call ends: whether the backend went down meanwhile
        if _DOWN.get():
            if not self._answered:
                self._mark("lifecycle", "first call", "backend down")
            mode = None if row is None else " ".join(row.split()[:2])
            self._mark("lifecycle", mode if mode in DOWN_MODES else op, "backend down")
            return
        if self._closing:
            self._mark("lifecycle", op, "after aclose")
            return
        if any(scope.writing.get(k) for k in keys):
            self._mark("lifecycle", op, "concurrent write")
            if any(self._other_writes(k) for k in keys if scope.writing.get(k)):
                self._mark("lifecycle", op, "another client writing")
        elif row is not None:
            states = {k: self._state(k) for k in keys}
            for k, state in states.items():
                self._mark_expiry(k, state)
                self._mark_after(row, k, state)
            for state in set(states.values()) - {None}:
                self._mark("state", row, state)  # type: ignore[arg-type]
        prefixes = [p.prefix for p in list(scope.listing)] if writes else []
        if prefixes and any(k.startswith(tuple(prefixes)) for k in keys):
            self._mark("lifecycle", op, "being listed")
        if op != "list" and op in KEY_OPS:
            shaped = keys[:SHAPED_BATCH] if op == "delete_many" else keys
            for shape in {s for k in shaped for s in self._shapes(k)}:
                self._mark("keys", shape, op)

    async def _call(
        self, op: str, row: str | None, keys: list[str], call: Callable[[], Awaitable[Any]]
    ) -> Any:
        writes = op in ("put", "delete", "delete_many")
        self._before(op, row, keys, writes)
        if not self._answered:
            self._mark("lifecycle", op, "first call")
        if self._another_closed and not self._closing:
            self._mark("lifecycle", op, "another closed")
        scope = self._scope
        n = next(self._calls)
        self._running[n] = op
        # a put over a present key: a listing that reads on meanwhile must still yield it
        overwrites = [k for k in keys if op == "put" and self._state(k) in ("present", "reopened")]
        for k in overwrites:
            scope.overwriting[k] = scope.overwriting.get(k, 0) + 1
        if writes:
            for k in keys:
                scope.writing[k] = scope.writing.get(k, 0) + 1
                mine = scope.writers.setdefault(k, {})
                mine[self._id] = mine.get(self._id, 0) + 1
        # Fires only if the call gives the event loop a turn: then it can be in flight.
        turn = self._measure(op)
        try:
            return await call()
        except asyncio.CancelledError:
            if not writes or _WATCHING.get():  # a write's cell: only where a test watched it
                self._mark("lifecycle", op, "cancelled")
            raise
        finally:
            self._answered = True
            lost = _LOST.get()
            if lost is not None and (writes or lost[1] in _ANY_CALL) and lost[0]():
                mode = None if row is None else " ".join(row.split()[:2])
                self._mark("lifecycle", mode if mode in DOWN_MODES else op, lost[1])
            went_down = _PARTWAY.get()
            if went_down is not None and op in PARTWAY_OPS:
                self._mark(*(_partway_cell(op) if went_down() else _one_request(op)))
            if turn is not None:
                turn.end()
            del self._running[n]
            for k in overwrites:
                scope.overwriting[k] -= 1
                if not scope.overwriting[k]:
                    del scope.overwriting[k]
            if writes:
                for k in keys:
                    scope.writing[k] -= 1
                    if not scope.writing[k]:
                        del scope.writing[k]
                    mine = scope.writers[k]
                    mine[self._id] -= 1
                    if not mine[self._id]:
                        del mine[self._id]
                        if not mine:
                            del scope.writers[k]

    def _other_writes(self, key: str) -> bool:
        """Whether another probe of this location (another client) is writing ``key``."""
        return any(probe != self._id for probe in self._scope.writers.get(key, ()))

    def _measure(self, op: str) -> _Turn | None:
        """Under `measuring_waits`: whether the event loop gets a turn before the call ends."""
        return _Turn(self, op) if _MEASURING.get() else None

    def _learn(
        self, key: str, state: _Known, version: str | None = None, write: str | None = None
    ) -> None:
        """What a call found of ``key``; ``version`` that a write (``write``, one of
        `AFTER_WRITES`) gave it, or the kind of delete (``write``) that deleted it."""
        scope = self._scope
        if write is not None:
            scope.changed_by[key] = write
            scope.readers.wrote(key, self._id)
        scope.state[key] = state
        if state == "deleted":
            scope.deleted.add(key)
            scope.large.pop(key, None)
        else:
            scope.deleted.discard(key)
        if version is not None:
            scope.versions.setdefault(key, []).append(version)
            scope.writer[key] = self._id
            earlier = scope.expiry.pop(key, None)
            scope.renewed.pop(key, None)
            if self._ttl is not None:
                scope.expiry[key] = _clock() + self._ttl
                if earlier is not None:
                    scope.renewed[key] = earlier
        if state != "present":
            for expiries in (scope.expiry, scope.renewed):
                expiries.pop(key, None)

    def _mark_shape(self, data: bytes, column: str) -> None:
        shape = self._shaped.get(data)
        if shape is not None:
            self._mark("values", shape, column)

    # -- the protocol -----------------------------------------------------------------------
    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        """Put through the probe; see `checkpointkit.Storage.put`."""
        if not isinstance(key, str):  # bad input: the adapter's to refuse, nothing to classify
            return await self.inner.put(key, data, mode=mode)
        row: str | None = None
        if isinstance(mode, IfMatch):
            row = f"put if-match {self._version_kind(key, mode.version)}"
        elif mode in ("overwrite", "create"):
            row = f"put {mode}"
        size = len(data) if isinstance(data, bytes | bytearray | memoryview) else -1
        if size in self._large:
            if isinstance(mode, IfMatch):
                self._mark("large values", size_label(size), "if-match")
            elif mode == "create":
                self._mark("large values", size_label(size), "create")
            elif mode == "overwrite" and self._state(key) in ("present", "reopened"):
                self._mark("large values", size_label(size), "overwrite")
        try:
            version = await self._call(
                "put", row, [key], lambda: self.inner.put(key, data, mode=mode)
            )
        except PreconditionFailed:
            if mode == "create":
                self._learn(key, "present")
            raise
        except BaseException:
            self._scope.state[key] = "unknown"
            raise
        write = "if-match put" if isinstance(mode, IfMatch) else str(mode)
        self._learn(key, "present", version, write)
        if size in self._sizes:
            self._mark("sizes", size_label(size), "put")
        if 0 <= size <= self._shaped_max:
            self._mark_shape(bytes(data), "put")
        if size in self._large:
            self._scope.large[key] = size_label(size)
        else:
            self._scope.large.pop(key, None)
        return str(version)

    async def get(self, key: str) -> GetResult:
        """Get through the probe; see `checkpointkit.Storage.get`."""
        if not isinstance(key, str):
            return await self.inner.get(key)
        try:
            result: GetResult = await self._call("get", "get", [key], lambda: self.inner.get(key))
        except NotFound:
            if self._scope.state.get(key) not in ("deleted",):
                self._scope.state[key] = "missing" if key not in self._scope.versions else "deleted"
            raise
        versions = self._scope.versions.setdefault(key, [])
        if not versions or versions[-1] != result.version:
            versions.append(result.version)
        self._scope.state[key] = "present"
        if len(result.data) in self._sizes:
            self._mark("sizes", size_label(len(result.data)), "get")
        if len(result.data) <= self._shaped_max:
            self._mark_shape(bytes(result.data), "get")
        return result

    async def delete(self, key: str, *, if_match: str | None = None) -> bool:
        """Delete through the probe; see `checkpointkit.Storage.delete`."""
        if not isinstance(key, str):
            return await self.inner.delete(key, if_match=if_match)
        row = (
            "delete" if if_match is None else f"delete if-match {self._version_kind(key, if_match)}"
        )
        large = self._scope.large.get(key)
        if large is not None and if_match is not None:
            self._mark("large values", large, "delete if-match")
        try:
            existed = await self._call(
                "delete", row, [key], lambda: self.inner.delete(key, if_match=if_match)
            )
        except PreconditionFailed:
            raise
        except BaseException:
            self._scope.state[key] = "unknown"
            raise
        if existed:
            self._learn(key, "deleted", write="delete" if if_match is None else "if-match delete")
        elif self._scope.state.get(key) == "deleted":
            self._learn(key, "deleted")
        return bool(existed)

    async def delete_many(self, keys: Iterable[str]) -> int:
        """The adapter's own ``delete_many`` (one ``delete`` per key where it has none)."""
        batch = list(keys)
        if not all(isinstance(k, str) for k in batch):
            return await delete_many(self.inner, passed_on(keys, batch))
        large = {row for k in batch if (row := self._scope.large.get(k)) is not None}
        try:
            count = await self._call(
                "delete_many",
                "delete_many",
                batch,
                lambda: delete_many(self.inner, passed_on(keys, batch)),
            )
        except BaseException:
            for k in batch:
                self._scope.state[k] = "unknown"
            raise
        for k in batch:
            if self._scope.state.get(k) in ("present", "unknown", "deleted"):
                self._learn(k, "deleted", write="delete_many")
        if len(batch) in self._batches:
            self._mark("batches", batch_label(len(batch)), "delete_many")
        for label in large:
            self._mark("large values", label, "delete_many")
        return int(count)

    def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> AsyncIterator[str]:
        """List through the probe; see `checkpointkit.Storage.list`."""
        return _ProbedListing(self, prefix, start_after, limit)

    async def aclose(self) -> None:
        """Close the storage; a second call is recorded as ``aclose`` after ``aclose`` (or
        during it, while the first runs)."""
        first = not self._closing
        if first:
            if self._another_closed:
                self._mark("lifecycle", "aclose", "another closed")
            others = _OPEN_PROBES.get((id(self._rec), self._name), weakref.WeakSet())
            others.discard(self)
            for other in list(others):
                other._another_closed = True
        if first and _DOWN.get():
            self._mark("lifecycle", "aclose", "backend down")
        if first and _HELD.get():
            self._mark("lifecycle", "aclose", "backend held")
        if not first:
            self._mark("lifecycle", "aclose", "after aclose" if self._closed else "during aclose")
        else:
            self._closing = True
            if not self._answered and not self._running:
                self._mark("lifecycle", "aclose", "first call")
            for op in set(self._running.values()):
                self._mark("lifecycle", op, "during aclose")
        # whether the first aclose() waits: only then can it be cancelled or overlapped (a
        # wait that a hold of the backend causes, for the calls it holds, does not count)
        turn = _Turn(self, "aclose") if first and not _HELD.get() else None
        try:
            await self.inner.aclose()
        except asyncio.CancelledError:
            self._mark("lifecycle", "aclose", "cancelled")
            raise
        finally:
            if turn is not None:
                turn.end()
            if first:
                self._closed = True
            self._scope.closed_at.setdefault(self._id, next(_order))

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class _Turn:
    """Whether the event loop got a turn while one measured call ran: a callback scheduled
    when it starts runs only if the call gives way. ``end`` records whether it waited."""

    def __init__(self, probe: CoverageProbe, op: str) -> None:
        self.probe, self.op, self.turned = probe, op, False
        self.handle = asyncio.get_running_loop().call_soon(self._turn)

    def _turn(self) -> None:
        self.turned = True

    def end(self) -> None:
        self.handle.cancel()
        self.probe._mark("suspends", self.op, "yes" if self.turned else "no")


class _ProbedListing:
    """A listing through a probe: records its cells at the first step and at the end."""

    def __init__(
        self, probe: CoverageProbe, prefix: str, start_after: str | None, limit: int | None
    ) -> None:
        self._probe = probe
        self._args = (prefix, start_after, limit)
        self.prefix = prefix if isinstance(prefix, str) else ""
        self._inner: AsyncIterator[str] | None = None
        self._seen: list[str] = []
        self._started = False
        self._ended = False
        self._concurrent = False
        self._down = False
        probe._listings.add(self)

    def __aiter__(self) -> _ProbedListing:
        return self

    def _start(self) -> AsyncIterator[str]:
        probe = self._probe
        prefix, start_after, limit = self._args
        self._started = True
        mark = probe._mark
        if _DOWN.get():
            mark("lifecycle", "list", "backend down")
            self._down = True
        elif isinstance(prefix, str):
            kind = (
                "empty prefix"
                if not prefix
                else "prefix ending in '/'"
                if prefix.endswith("/")
                else "prefix inside a segment"
            )
            if start_after is None:
                mark("listing", kind, "start_after none")
            elif isinstance(start_after, str):
                where = (
                    "inside"
                    if start_after.startswith(prefix) and start_after != prefix
                    else "before"
                    if start_after <= prefix
                    else "past"
                )
                mark("listing", kind, f"start_after {where}")
            if limit is None or isinstance(limit, int):
                mark("listing", kind, f"limit {_limit_word(limit)}")
            scope = probe._scope
            if probe._another_closed and not probe._closing:
                mark("lifecycle", "list", "another closed")
            if probe._closing:
                mark("lifecycle", "list", "after aclose")
            elif any(k.startswith(prefix) for k in scope.writing):
                mark("lifecycle", "list", "concurrent write")
                if any(k.startswith(prefix) and probe._other_writes(k) for k in scope.writers):
                    mark("lifecycle", "list", "another client writing")
                self._concurrent = True
            scope.listing.add(self)
        return probe.inner.list(prefix, start_after=start_after, limit=limit)

    async def __anext__(self) -> str:
        probe = self._probe
        first = self._inner is None
        if self._inner is None:
            if not probe._answered:
                probe._mark("lifecycle", "list", "first call")
            self._inner = self._start()
        inner = self._inner
        n = next(probe._calls)
        probe._running[n] = "list"
        # the first step fetches a page; later ones may answer from it without a wait
        turn = probe._measure("list") if first else None
        if not first and not self._down and _DOWN.get():
            probe._mark("lifecycle", "list", "down at a later page")
        if not first and any(
            other is not self and other._inner is not None and not other._ended
            for other in probe._listings
        ):
            probe._mark("lifecycle", "list", "another listing open")
        if self._overwritten_ahead():
            probe._mark("lifecycle", "list", "kept key overwritten")
        try:
            key = await inner.__anext__()
        except StopAsyncIteration:
            self._end()
            raise
        except asyncio.CancelledError:
            probe._mark("lifecycle", "list", "cancelled")
            self._end()
            raise
        except BaseException:
            self._end()
            raise
        finally:
            probe._answered = True
            if turn is not None:
                turn.end()
            probe._running.pop(n, None)
            lost = _LOST.get()
            if lost is not None and lost[1] in _ANY_CALL and lost[0]():
                # a page held past its deadline, or another client's write between two
                # exchanges of the listing
                probe._mark("lifecycle", "list", lost[1])
        self._seen.append(key)
        return key

    def _overwritten_ahead(self) -> bool:
        """Whether a put over a present key that this listing has still to yield (of its
        prefix, past what it yielded and ``start_after``) is in flight."""
        prefix, start_after, _ = self._args
        if not isinstance(prefix, str) or _DOWN.get():
            return False
        passed = self._seen[-1] if self._seen else start_after
        return any(
            k.startswith(prefix) and (not isinstance(passed, str) or k > passed)
            for k in self._probe._scope.overwriting
        )

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        probe = self._probe
        prefix = self._args[0]
        probe._scope.listing.discard(self)
        if self._down:
            return
        seen = self._seen
        for key in seen[:-1]:  # a large value and a key after it (a page cut by bytes)
            large = probe._scope.large.get(key)
            if large is not None:
                probe._mark("large values", large, "listed")
        if isinstance(prefix, str) and not self._concurrent and not probe._closing:
            after = self._args[1]
            if seen and any(
                k.startswith(prefix)
                and (not isinstance(after, str) or k > after)
                and k < seen[-1]
                and probe._state(k) == "expired"
                for k in probe._scope.expiry
            ):
                probe._mark("lifecycle", "list", "past expired keys")
            found = {k: probe._state(k) for k in seen}  # what the listing found
            for k, state in found.items():
                probe._mark_expiry(k, state)
                probe._mark_after("list", k, state)
            states = set(found.values())
            if not seen:
                scope = probe._scope
                deleted = [k for k in scope.deleted if k.startswith(prefix)]
                for k in deleted:
                    probe._mark_after("list", k, "deleted")
                expired = any(
                    k.startswith(prefix) and probe._state(k) == "expired" for k in scope.expiry
                )
                states.add("expired" if expired else "deleted" if deleted else "missing")
            for state in states - {None}:
                probe._mark("state", "list", state)  # type: ignore[arg-type]
        raw = _raw(probe.inner)
        if isinstance(raw, StorageBase) and len(seen) > raw.page_size and isinstance(prefix, str):
            kind = (
                "empty prefix"
                if not prefix
                else "prefix ending in '/'"
                if prefix.endswith("/")
                else "prefix inside a segment"
            )
            probe._mark("listing", kind, "several pages")
        for key in seen:
            for shape in probe._shapes(key):
                probe._mark("keys", shape, "list")
        keys = set(seen)
        if any(k.rsplit("/", 1)[0] in keys for k in keys if "/" in k):
            probe._mark("keys", "parent and child listed", "list")
        if len({k.rpartition("/")[0] for k in keys}) >= MANY_DIRECTORIES:
            probe._mark("keys", "100+ directories listed", "list")
        if sum(len(k.encode()) for k in seen) >= NAMES_LISTED:
            probe._mark("keys", "1 MiB of names listed", "list")
        if any(k + " " in keys for k in keys):
            probe._mark("keys", "twins but for a trailing space listed", "list")
        ordered = sorted(keys)
        for a, b in itertools.pairwise(ordered):
            common = len(_common(a, b))
            if (
                common < len(a)
                and common < len(b)
                and a[common] in _NEIGHBOURS
                and b[common] in _NEIGHBOURS
            ):
                probe._mark("keys", "neighbours of '/' listed", "list")
                break


_ONE_LINE = {
    "sizes": "put and get of {n} sizes from {first} to {last}",
    "values": "put and get of {n} shapes of value",
    "batches": "delete_many of {n} batch sizes from {first} to {last}",
}
"""The matrices that `Coverage.text` shows as one line (their rows are a range), and how."""


def _common(a: str, b: str) -> str:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return a[:n]


def _limit_word(limit: int | None) -> str:
    if limit is None:
        return "none"
    return "0" if limit == 0 else "1" if limit == 1 else "more"


def _raw(storage: Any) -> Any:
    while hasattr(storage, "inner"):
        storage = storage.inner
    return storage


@dataclass
class Coverage:
    """The coverage of one run: which reachable cells were exercised.

    Attributes:
        reach: what made cells reachable: the storage protocol's `Reach`
            (capabilities, reopening, value cap), or an ecosystem's `Surface`.
        exercised: every cell the run's calls fell in (unreachable ones included).
    """

    reach: Surface
    exercised: set[Cell]

    @property
    def never_suspended(self) -> list[str]:
        """The operations that answered without waiting at least once when the cancellation
        sweep started them (`measuring_waits`): only one that waits every time is sure to
        be in flight; and ``aclose`` when no storage's first ``aclose()`` ever waited.
        Storage targets only (an ecosystem's surface has no such cells)."""
        if not isinstance(self.reach, Reach):
            return []
        waits = {c[1] for c in self.exercised if c[0] == "suspends" and c[2] == "yes"}
        at_once = {c[1] for c in self.exercised if c[0] == "suspends" and c[2] == "no"}
        idle = [op for op in OPS if op not in waits or op in at_once]
        # a storage's first aclose() is always measured; one that never waits (a storage
        # with nothing to release) cannot be cancelled or overlapped by a second one
        return idle if "aclose" in waits else [*idle, "aclose"]

    @property
    def reachable(self) -> list[Cell]:
        """Every cell the capabilities and the target make reachable, in report order.

        An operation that answers without waiting cannot be in flight: it cannot be
        cancelled or closed under, and if no write waits, no operation can run while
        a write of its key is in flight. Those cells are unreachable (see
        `measuring_waits`).
        """
        if not isinstance(self.reach, Reach):
            return self.reach.reachable(self.exercised)
        idle = set(self.never_suspended)
        writes_wait = not {"put", "delete", "delete_many"} <= idle
        out = []
        for cell in self.reach.cells():
            matrix, row, column = cell
            if matrix == "lifecycle":
                if column in ("cancelled", "during aclose") and row in idle:
                    continue
                if column in ("concurrent write", "another client writing") and not writes_wait:
                    continue
                if column == "kept key overwritten" and "put" in idle:
                    continue  # a put that never waits is never in flight
                if (
                    column == "down partway"
                    and _one_request(row) in self.exercised
                    and cell not in self.exercised
                ):
                    continue  # one request: no point between two for the outage to start
            out.append(cell)
        return out

    @property
    def unreachable(self) -> list[str]:
        """Why rows, columns or cells are unreachable (the reach's sentences)."""
        return self.reach.unreachable(self.exercised)

    @property
    def missing(self) -> list[Cell]:
        """The reachable cells that no test exercised."""
        return [c for c in self.reachable if c not in self.exercised]

    def counts(self) -> tuple[int, int]:
        """``(exercised, reachable)``, counting reachable cells only."""
        reachable = self.reachable
        return len(reachable) - len(self.missing), len(reachable)

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible: counts, the cells not exercised, and each matrix."""
        done, total = self.counts()

        matrices: dict[str, dict[str, dict[str, str]]] = {}
        for matrix, row, column in self.reachable:
            cell = (matrix, row, column)
            mark = "exercised" if cell in self.exercised else "not exercised"
            matrices.setdefault(matrix, {}).setdefault(row, {})[column] = mark
        return {
            "exercised": done,
            "reachable": total,
            "not_exercised": [list(c) for c in self.missing],
            "never_suspended": self.never_suspended,
            "unreachable": self.unreachable,
            "matrices": matrices,
        }

    def text(self) -> str:
        """The matrices as text grids: ``x`` exercised, ``.`` not exercised, blank unreachable."""
        reachable = self.reachable
        lines: list[str] = []
        for matrix in self.reach.matrices:
            cells = [c for c in reachable if c[0] == matrix]
            if not cells:
                continue
            rows = list(dict.fromkeys(c[1] for c in cells))
            columns = list(dict.fromkeys(c[2] for c in cells))
            summary = _ONE_LINE.get(matrix) if isinstance(self.reach, Reach) else None
            if summary is not None:
                missing = [f"{c[2]} {c[1]}" for c in cells if c not in self.exercised]
                lines.append(
                    f"  {matrix}: "
                    + summary.format(n=len(rows), first=rows[0], last=rows[-1])
                    + ": "
                    + (f"not exercised: {', '.join(missing)}" if missing else "all exercised")
                )
                continue
            width = max(len(r) for r in rows)
            lines.append(f"  {matrix}:")
            for i, column in enumerate(columns):
                lines.append(f"    {' ' * width}  {'| ' * i}{column}")
            here = set(cells)
            for row in rows:
                marks = " ".join(
                    (" " if (matrix, row, c) not in here else
                     "x" if (matrix, row, c) in self.exercised else ".")
                    for c in columns
                )  # fmt: skip
                lines.append(f"    {row:<{width}}  {marks}")
        lines += [f"  unreachable: {note}" for note in self.unreachable]
        return "\n".join(lines)
