"""The programs of the ``model`` group: steps, the strategies that draw them, their scripts.

A *program* is a short sequence of steps run against one fresh storage: single
operations (put in every mode, get, delete with or without ``if_match``,
``delete_many``, list with prefix, ``start_after`` and ``limit``), groups of
tasks running at once (`Together`), closing and reopening the storage
at the same location (`Reopen`) and closing it while tasks run
(`CloseDuring`). Any operation may be cancelled at a drawn point.

The steps are frozen dataclasses whose ``repr`` is the Python that builds them,
so that a (shrunk) program prints as a script that replays it:
`replay_script`. Hypothesis draws and shrinks them: `programs`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..keys import MAX_KEY_BYTES

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

__all__ = [
    "CANCEL_POINTS",
    "KEYS_PER_PROGRAM",
    "KEY_FAMILIES",
    "KEY_POOL",
    "CloseDuring",
    "Delete",
    "DeleteMany",
    "Get",
    "List",
    "Op",
    "Program",
    "ProgramOptions",
    "Put",
    "Reopen",
    "Step",
    "Together",
    "programs",
    "replay_script",
    "value_sizes",
]

Ref = Literal["current", "stale", "other", "bogus"]
"""Which version an ``if-match`` uses: the newest seen on the key, an older one of the key,
one of another key, or a string that no adapter minted."""

CANCEL_POINTS: tuple[int | float, ...] = (0, 1, 2, 3, 5, 8, 0.0005, 0.002)
"""When a cancelled operation is cancelled: ints are event-loop iterations, floats seconds."""

_LONG_ASCII = "l" * 1024
_LONG_UTF8 = "é" * 512  # 1024 bytes in 512 characters
_DEEP = "/".join(["d"] * 300)

KEY_FAMILIES: tuple[tuple[str, ...], ...] = (
    ("a", "a/b", "a/b/c", "a-b", "a.b", "a0", "ab", "a b", "a/b-", "a/b.", "a/b0", "a/bc"),
    ("é", "\ue000", "\uff5e", "😀", "😀/x", "𝄞", "日本/語", "u/\uff5e", "u/😀"),
    (_LONG_ASCII, _LONG_UTF8, _DEEP, "l", "d/d"),
    ("b", "B", "~", "k%2F", "k+:#?*", "k"),
    ("e/f", "e%2Ff", "e%2ff", "e%252Ff", "e_f", "e:f", "e f", "e+f", "e%20f", "e&f", "e&amp;f"),
    ("e\x85f", "e\u2028f", "e\u2029f", "e", "f", "e/g"),
)
"""Keys that relate to each other; a program draws most of its keys from one family."""

KEY_POOL: tuple[str, ...] = tuple(k for family in KEY_FAMILIES for k in family)
"""Keys a program draws from: shapes the protocol allows and keys related to each other.

Parents and children (``a``, ``a/b``, ``a/b/c``); neighbours of ``/`` in code-point
order (``a-b`` < ``a.b`` < ``a/b`` < ``a0``); a space and punctuation; characters of two,
three and four UTF-8 bytes (U+FF5E sorts before U+1F600 by code point, after it in
UTF-16); the longest keys (1024 bytes, in ASCII and in two-byte characters) and a key
of 300 segments; keys whose character after a prefix (``u/``) is above U+F8FF and
U+FFFF (a prefix listed as a range up to ``prefix + '\\uf8ff'``); keys that a backend's
escaping merges when it is not one to one (``e/f`` and ``e%2Ff``, ``e f`` and ``e+f``);
keys holding the characters ``str.splitlines()`` splits at (U+0085, U+2028, U+2029) and
the keys such a split would make up.
"""


def value_sizes(cap: int) -> tuple[int, ...]:
    """0, 1, and each power of two from 2 up to ``cap``, also minus and plus one."""
    sizes = {0, 1}
    power = 2
    while power <= cap:
        sizes.update((power - 1, power, power + 1))
        power *= 2
    return tuple(sorted(s for s in sizes if s <= cap))


@dataclass(frozen=True)
class Put:
    """``put(key, <size bytes>, mode=...)``; ``ref`` picks the version of an ``if-match``."""

    key: str
    size: int
    mode: Literal["overwrite", "create", "if-match"] = "overwrite"
    ref: Ref | None = None
    cancel: int | float | None = None


@dataclass(frozen=True)
class Get:
    """``get(key)``."""

    key: str
    cancel: int | float | None = None


@dataclass(frozen=True)
class Delete:
    """``delete(key)``, or ``delete(key, if_match=<the version ref picks>)``."""

    key: str
    ref: Ref | None = None
    cancel: int | float | None = None


@dataclass(frozen=True)
class DeleteMany:
    """``delete_many(keys)``; a key may be given more than once."""

    keys: tuple[str, ...]
    cancel: int | float | None = None


@dataclass(frozen=True)
class List:
    """``list(prefix, start_after=..., limit=...)``, read to the end."""

    prefix: str
    start_after: str | None = None
    limit: int | None = None


Op = Put | Get | Delete | DeleteMany | List
"""One operation of a task."""


@dataclass(frozen=True)
class Together:
    """Tasks run at once, each doing its operations in order."""

    tasks: tuple[tuple[Op, ...], ...]


@dataclass(frozen=True)
class Reopen:
    """``aclose()`` the storage, then open a new one at the same location."""


@dataclass(frozen=True)
class CloseDuring:
    """Tasks run at once, and ``aclose()`` is called after ``after`` event-loop iterations.

    Afterwards the storage is reopened at the same location where the target can
    (``durable`` and a factory that accepts ``location``); otherwise the program ends.
    """

    tasks: tuple[tuple[Op, ...], ...]
    after: int = 0


Step = Op | Together | Reopen | CloseDuring
"""One step of a program."""


@dataclass(frozen=True)
class Program:
    """What one example runs: its steps, and the page size of listings (None: the adapter's)."""

    steps: tuple[Step, ...]
    page_size: int | None = None


def _any_valid_key(key: str) -> bool:
    """True for a key of at most 1024 UTF-8 bytes: a target with no shorter limit."""
    return len(key.encode()) <= MAX_KEY_BYTES


@dataclass(frozen=True)
class ProgramOptions:
    """What the target allows a program to draw.

    Attributes:
        conditional_put: ``create`` and ``if-match`` puts.
        conditional_delete: ``delete(if_match=...)``.
        reopen: close and reopen at the same location (``durable``, a factory with ``location``).
        close_during: ``aclose()`` while tasks run.
        paging: the listing's page size can be set (a ``StorageBase`` adapter).
        max_value: the largest value a put writes, in bytes.
        holds_key: whether the target holds a valid key (every one of up to 1024 bytes,
            unless a root prefix or the server's limit takes some: ``holds_key`` of
            `StorageBase`).
        min_steps: the fewest steps of a program (more steps per example find more
            per second; a failure's report leaves out the steps after the failing one).
        max_steps: the most steps of a program.
    """

    conditional_put: bool = True
    conditional_delete: bool = True
    reopen: bool = False
    close_during: bool = True
    paging: bool = True
    max_value: int = 1 << 16
    holds_key: Callable[[str], bool] = _any_valid_key
    min_steps: int = 2
    max_steps: int = 40


KEYS_PER_PROGRAM = 5
"""How many keys of `KEY_POOL` one program draws (its operations pick among them)."""


@functools.cache
def programs(options: ProgramOptions) -> SearchStrategy[Program]:
    """The Hypothesis strategy of programs allowed by ``options``.

    Simpler draws come first, so that Hypothesis shrinks towards them: a put
    before other operations, the first keys of `KEY_POOL`, small values,
    no cancellation, sequential steps before concurrent ones. Operations draw
    the index of one of the program's keys, so that the strategies are built
    once (drawing is then cheap) and the keys are mapped in at the end.
    """
    from hypothesis import strategies as st

    sizes = value_sizes(options.max_value)
    small = [s for s in sizes if s <= 1024]
    size_choices = tuple(small * 3 + [s for s in sizes if s > 1024])
    cancels: tuple[int | float | None, ...] = (None,) * 10 + CANCEL_POINTS
    modes: list[Literal["overwrite", "create", "if-match"]] = ["overwrite"]
    if options.conditional_put:
        modes += ["create", "if-match"]
    refs: tuple[Ref, ...] = ("current", "stale", "other", "bogus")
    key = st.integers(0, KEYS_PER_PROGRAM - 1)
    cancel = st.sampled_from(cancels)
    cut = st.sampled_from((0, 0, 0, 1, 2, 3, 4, 6, 1025))  # 1025: the whole key
    put = st.sampled_from(modes).flatmap(
        lambda mode: st.tuples(
            st.just("put"),
            key,
            st.sampled_from(size_choices),
            st.just(mode),
            st.sampled_from(refs) if mode == "if-match" else st.none(),
            cancel,
        )
    )
    delete_ref = st.sampled_from((None, *refs)) if options.conditional_delete else st.none()
    delete = st.tuples(st.just("delete"), key, delete_ref, cancel)
    get = st.tuples(st.just("get"), key, cancel)
    after = st.one_of(st.none(), st.tuples(key, st.one_of(st.none(), st.integers(1, 8))))
    listing = st.tuples(
        st.just("list"), key, cut, after, st.sampled_from((None, None, 0, 1, 2, 3, 5))
    )
    many = st.tuples(st.just("delete_many"), st.lists(key, min_size=1, max_size=4), cancel)
    op = st.one_of(put, put, get, delete, listing, listing, many)
    tasks = st.lists(st.lists(op, min_size=1, max_size=4), min_size=2, max_size=3)
    choices: list[SearchStrategy[Any]] = [op, op, op, st.tuples(st.just("together"), tasks)]
    if options.reopen:
        choices.append(st.just(("reopen",)))
    if options.close_during:
        choices.append(st.tuples(st.just("close"), tasks, st.sampled_from((0, 1, 2, 3, 5, 8, 13))))
    holds = options.holds_key
    # the keys the target holds (a target may hold fewer: a server's narrower key space)
    pool = tuple(k for k in KEY_POOL if _fit(k, holds))
    families = [tuple(k for k in f if k in pool) for f in KEY_FAMILIES]
    keys = st.sampled_from([f for f in families if f]).flatmap(
        lambda family: st.lists(
            st.sampled_from(family)
            if len(family) >= KEYS_PER_PROGRAM
            else st.sampled_from(family + pool),
            min_size=KEYS_PER_PROGRAM - 1,
            max_size=KEYS_PER_PROGRAM - 1,
            unique=True,
        )
    )
    return st.builds(
        lambda ks, raw, page, stored: _program([_fit(k, holds) for k in ks], raw, page, stored),
        st.tuples(keys, st.sampled_from(pool)).map(lambda ks: _distinct([*ks[0], ks[1]], pool)),
        st.lists(st.one_of(choices), min_size=options.min_steps, max_size=options.max_steps),
        st.sampled_from((None, 1, 2, 3)) if options.paging else st.none(),
        st.lists(st.booleans(), min_size=KEYS_PER_PROGRAM, max_size=KEYS_PER_PROGRAM),
    )  # fmt: skip


def _distinct(keys: list[str], pool: tuple[str, ...] = KEY_POOL) -> list[str]:
    """``keys`` with a repeated last key replaced by the next unused key of the pool."""
    if keys[-1] in keys[:-1]:
        keys[-1] = next(k for k in pool if k not in keys)
    return keys


def _fit(key: str, holds: Callable[[str], bool]) -> str:
    """``key`` cut until the target ``holds`` it (never ending in ``/``; empty if it never
    does)."""
    while key and (not holds(key) or key.endswith("/")):
        key = key[:-1]
    return key


def _program(
    keys: list[str], raw: list[tuple[Any, ...]], page: int | None, stored: list[bool]
) -> Program:
    """The program that the drawn tuples describe, with the program's keys mapped in.

    It starts by storing the keys of ``stored`` (one byte each), so that listings and
    deletes meet keys next to each other from the first step.
    """

    def op(t: tuple[Any, ...]) -> Op:
        kind = t[0]
        if kind == "put":
            return Put(keys[t[1]], t[2], t[3], t[4], t[5])
        if kind == "get":
            return Get(keys[t[1]], t[2])
        if kind == "delete":
            return Delete(keys[t[1]], t[2], t[3])
        if kind == "delete_many":
            return DeleteMany(tuple(keys[i] for i in t[1]), t[2])
        base = keys[t[1]]
        start_after = None
        if t[3] is not None:
            whole = keys[t[3][0]]
            start_after = whole if t[3][1] is None else whole[: t[3][1]]
        return List(base[: t[2]], start_after, t[4])

    def tasks(ts: list[list[tuple[Any, ...]]]) -> tuple[tuple[Op, ...], ...]:
        return tuple(tuple(op(t) for t in task) for task in ts)

    steps: list[Step] = [Put(key, 1) for key, chosen in zip(keys, stored, strict=True) if chosen]
    for t in raw:
        if t[0] == "together":
            steps.append(Together(tasks(t[1])))
        elif t[0] == "reopen":
            steps.append(Reopen())
        elif t[0] == "close":
            steps.append(CloseDuring(tasks(t[1]), t[2]))
        else:
            steps.append(op(t))
    return Program(tuple(steps), page)


def replay_script(program: Program, *, seed: int, why: str) -> str:
    """A standalone Python script that replays ``program`` against the target named by argv[1].

    Args:
        program: the (shrunk) program.
        seed: the model seed that found it.
        why: what the model did not allow, put in the script's docstring.
    """
    lines = [
        f'"""Replay of a program the checkpointkit model group failed (seed {seed}).',
        "",
        *_doc_lines(why),
        "",
        "Run: python replay.py SPEC   (a storage URL, module:factory, 'file' or 'memory')",
        '"""',
        "import asyncio",
        "import sys",
        "",
        "from checkpointkit.conformance.model import replay",
        "from checkpointkit.conformance.programs import (",
        "    CloseDuring, Delete, DeleteMany, Get, List, Program, Put, Reopen, Together,",
        ")",
        "",
        "PROGRAM = Program(",
        "    steps=(",
        *[f"        {step!r}," for step in program.steps],
        "    ),",
        f"    page_size={program.page_size!r},",
        ")",
        "",
        "sys.exit(asyncio.run(replay(sys.argv[1], PROGRAM)))",
    ]
    return "\n".join(lines) + "\n"


def _doc_lines(text: str, limit: int = 8) -> list[str]:
    """The first lines of ``text``, safe inside a triple-quoted docstring."""
    return [line.replace('"' * 3, "'" * 3) for line in text.splitlines()[:limit]]
