"""Ids of every shape: the thread ids and workflow names a saver or storage must keep apart.

A LangGraph ``thread_id`` and an agent-framework ``workflow_name`` are any string
the application chooses (a user id, an e-mail address, a file name, a title). A
backend compares them in its own way: a SQL ``LIKE`` or a glob treats ``_``, ``%``,
``*`` and ``?`` as wildcards, a regular expression ``.`` and ``[``; a MySQL or SQL
Server collation folds case and pads trailing spaces; a macOS file name is
normalized (NFD and NFC are one name); a ``VARCHAR(255)`` column cuts a long id;
a RediSearch or Lucene query, a JSON path or a file path gives quotes, ``@``,
``:``, ``|`` and ``/`` a meaning; a key ``cp:{name}:{id}`` found by a prefix scan
takes ``orders:v2``'s checkpoints for ``orders``'s. A saver that stores ids exactly but finds them
that way answers another thread's checkpoints, deletes them, or raises.

The ``ids`` matrix has a row per shape (`ID_ROWS`); the sweeps use each group of
`ID_GROUPS` as ids of their own, side by side. A row of twins (ids that some
comparison takes for one) is marked for a call only while the id's twin is
known to the same location (`IdShapes`), so the cell says that the two were
both there.
"""

from __future__ import annotations

import fnmatch
import re
import unicodedata
from typing import Final

__all__ = ["ID_GROUPS", "ID_ROWS", "LONG", "IdShapes"]

LONG: Final = 255
"""Twins longer than this are equal in their first this many characters (a
``VARCHAR(255)`` column, an index prefix)."""

ID_GROUPS: Final[dict[str, tuple[str, ...]]] = {
    "wildcard twins": ("_1", "a1", "b1", "%", ".1", "*", "?1", "[a]1"),
    "case twins": ("Case", "case", "CASE"),
    "trailing-space twins": ("w", "w ", "w  "),
    "normalization twins": ("caf\u00e9", "cafe\u0301", "\u00c5", "\u212b"),
    "long twins": ("x" * (LONG + 45) + "1", "x" * (LONG + 45) + "2"),
    "prefix twins": ("p", "p:v2", "p/v2", "p.v2", "p-v2", "p v2", "p:"),
    "separators": ("a/b", "a:b", "a|b", "a\\b", "/", "..", "a//b", "a/"),
    "query syntax": (
        "'q",
        '"q',
        "q;1",
        "q!1",
        "q@1",
        "q#1",
        "q&1",
        "q=1",
        "q~1",
        "q<1>",
        "q{1}",
        "q(1)",
        "q,1",
        "q 1",
        "q$1",
        "q^1",
        "q+1",
    ),
    "control characters": ("c\t1", "c\n1", "c\r1"),
    "non-ASCII": (
        "\u65e5\u672c",
        "emoji \U0001f389",
        "\u03a9mega",
        "\u0645\u0631\u062d\u0628\u0627",
    ),
}
"""Per row of ``ids``, the suffixes that a sweep appends to a base id of its own (the
twins of a row are twins with that base too: only the suffixes differ)."""
ID_ROWS: Final = tuple(ID_GROUPS)
"""The rows of the ``ids`` matrix."""

_WILDCARDS: Final = frozenset("_%*?[.")
_SEPARATORS: Final = frozenset("/:|\\")
_QUERY: Final = frozenset("'\";!@#&=~<>{}(),$^+ ")
_TWINS: Final = (
    "case twins",
    "trailing-space twins",
    "normalization twins",
    "long twins",
    "prefix twins",
)


def _like(pattern: str, text: str) -> bool:
    """Whether SQL ``text LIKE pattern`` (no escape character) holds."""
    rx = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(rx, text, re.S) is not None


def _matches(pattern: str, text: str) -> bool:
    """Whether ``pattern``, read as a SQL ``LIKE``, a glob or a regular expression,
    matches ``text`` (another id)."""
    if _like(pattern, text) or fnmatch.fnmatchcase(text, pattern):
        return True
    try:
        return re.fullmatch(pattern, text) is not None
    except re.error:
        return False


def _extends(a: str, b: str) -> bool:
    """Whether ``b`` is ``a`` and more than trailing spaces (those are the space twins)."""
    return len(b) > len(a) and b.startswith(a) and b[len(a) :].strip(" ") != ""


def _twins(a: str, b: str) -> list[str]:
    """The twin rows of two different ids."""
    rows = []
    if a.casefold() == b.casefold():
        rows.append("case twins")
    if a.rstrip(" ") == b.rstrip(" "):
        rows.append("trailing-space twins")
    if unicodedata.normalize("NFC", a) == unicodedata.normalize("NFC", b):
        rows.append("normalization twins")
    if min(len(a), len(b)) > LONG and a[:LONG] == b[:LONG]:
        rows.append("long twins")
    if _extends(a, b) or _extends(b, a):
        rows.append("prefix twins")
    if (_WILDCARDS & set(a) and _matches(a, b)) or (_WILDCARDS & set(b) and _matches(b, a)):
        rows.append("wildcard twins")
    return rows


def _shapes(text: str) -> set[str]:
    """The rows of one id on its own (not twins)."""
    chars = set(text)
    rows = set()
    if chars & _SEPARATORS or ".." in text:
        rows.add("separators")
    if chars & _QUERY:
        rows.add("query syntax")
    if any(ord(c) < 32 for c in text):
        rows.add("control characters")
    if any(ord(c) > 127 for c in text):
        rows.add("non-ASCII")
    return rows


class IdShapes:
    """The ids of one location, and the rows of each: its shapes, and its twins among
    the ids seen before it (and theirs, with it)."""

    def __init__(self) -> None:
        self._rows: dict[str, set[str]] = {}

    def rows(self, text: str) -> set[str]:
        """The rows of ``text``, which is seen from now on."""
        known = self._rows.get(text)
        if known is not None:
            return known
        rows = _shapes(text)
        for other, theirs in self._rows.items():
            for row in _twins(text, other):
                rows.add(row)
                theirs.add(row)
        self._rows[text] = rows
        return rows
