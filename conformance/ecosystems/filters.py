"""Metadata filters of every shape: what a saver's ``alist(filter=...)`` is asked for.

LangGraph's ``aget_state_history(config, filter=...)`` hands its filter to the saver's
``alist``, and the application's own metadata (``config["metadata"]``: a tenant, a user
id) is in every checkpoint's metadata beside LangGraph's ``source`` and ``step``. Its
savers select the checkpoints whose metadata holds each key of the filter with an equal
value: ``InMemorySaver`` compares in Python, ``AsyncPostgresSaver`` by JSONB
containment; neither takes ``"7"`` for ``7``. A saver that builds a query from the key
compares something else when the key has a shape its query language reads: a JSON path
reads ``user.id`` as the field ``id`` of an object ``user``; a value bound as JSON text
never equals a number or a boolean the path extracts, and one compared as text (``str()``
on both sides) equals a string of the same text; a filter on a key outside an allow-list
of LangGraph's keys is dropped, and every checkpoint answers.

The ``filters`` matrix has a row per key shape (`FILTER_ROWS`) and a column per value
kind (`FILTER_COLUMNS`), ``with another key`` for a filter of two keys (each must hold),
``every thread`` for the filter of ``alist(None, filter=...)``, which a SQL saver
answers with another query than one thread's, and ``sync list`` for the same key through
the synchronous ``list`` (``get_state_history`` of a graph run synchronously), which a
saver with a synchronous and an asynchronous path builds its query twice. LangGraph's
own keys take their own kinds only: ``source`` a string, ``step`` an integer. A saver
may refuse a key it cannot query, out loud (``ValueError``), except a plain identifier
(`REFUSABLE`); a wrong answer is never right.
"""

from __future__ import annotations

import re
from typing import Any, Final

__all__ = [
    "FILTER_COLUMNS",
    "FILTER_KEYS",
    "FILTER_ROWS",
    "FILTER_VALUES",
    "REFUSABLE",
    "TEXT_TWINS",
    "column_of",
    "columns_of",
    "row_of",
]

FILTER_ROWS: Final = ("source", "step", "custom key", "dotted key", "hyphenated key", "odd key")
"""The rows of ``filters``: the shape of a filter's key."""
FILTER_COLUMNS: Final = (
    "str",
    "int",
    "bool",
    "quoted str",
    "non-ASCII str",
    "with another key",
    "every thread",
    "sync list",
)
"""The columns of ``filters``: the kind of a filter's value, a filter of two keys, a
filter of ``alist(None, ...)`` (every thread: another query than one thread's), and a
filter of the synchronous ``list`` (reachable when the saver implements it)."""
FILTER_KEYS: Final[dict[str, str]] = {
    "source": "source",
    "step": "step",
    "custom key": "tenant",
    "dotted key": "user.id",
    "hyphenated key": "user-id",
    "odd key": "it's a cl\u00e9",
}
"""The key the sweep filters on for each row."""
FILTER_VALUES: Final[dict[str, tuple[Any, Any]]] = {
    "str": ("acme", "globex"),
    "int": (7, 8),
    "bool": (True, False),
    "quoted str": ('it\'s "x"', 'it\'s "y"'),
    "non-ASCII str": ("z\u00fcrich", "zurich"),
}
"""For each value kind, the value a filter asks for and a decoy of the same kind."""
TEXT_TWINS: Final = ("int", "bool")
"""The value kinds whose value also gets a decoy of another kind with the same text
(``"7"`` beside ``7``, ``"True"`` beside ``True``): a saver that compares the values' text
(``str()`` on both sides, a JSON path's text against a bound string) matches it."""
REFUSABLE: Final = ("dotted key", "hyphenated key", "odd key")
"""The rows whose key a saver may refuse with ``ValueError`` (it says so: not a wrong
answer)."""

_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOTTED: Final = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)+")
_HYPHENATED: Final = re.compile(r"[A-Za-z0-9_]+(-[A-Za-z0-9_]+)+")


def columns_of(row: str) -> tuple[str, ...]:
    """The columns of ``row``: LangGraph's keys take their own kind only."""
    if row == "source":
        return ("str", "with another key", "every thread", "sync list")
    if row == "step":
        return ("int", "with another key", "every thread", "sync list")
    return FILTER_COLUMNS


def row_of(key: Any) -> str | None:
    """The row of a filter's key (None: not a string)."""
    if not isinstance(key, str):
        return None
    if key in ("source", "step"):
        return key
    if _IDENTIFIER.fullmatch(key):
        return "custom key"
    if _DOTTED.fullmatch(key):
        return "dotted key"
    if _HYPHENATED.fullmatch(key):
        return "hyphenated key"
    return "odd key"


def column_of(value: Any) -> str | None:
    """The column of a filter's value (None: a kind the matrix has no column for)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if not isinstance(value, str):
        return None
    if "'" in value or '"' in value:
        return "quoted str"
    if not value.isascii():
        return "non-ASCII str"
    return "str"
