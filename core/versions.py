"""The forms of the versions that the adapters hand out, to refuse one that cannot match.

Versions are opaque strings compared by exact equality (see
`checkpointkit.storage`). An adapter whose versions have a known form
overrides ``StorageBase._may_match`` with one of these predicates, so that a
version of another form fails its own call with
`PreconditionFailed` before it reaches the
backend: it can neither fail a shared batch (SQLite's group commit) nor match
by a looser rule than string equality (``int("013") == 13``, HTTP's
``If-Match: *``).
"""

from __future__ import annotations

from typing import Final

__all__ = ["MAX_DECIMAL_DIGITS", "decimal_version", "entity_tag", "hex_token"]

MAX_DECIMAL_DIGITS: Final = 19
"""Most digits of a counter version (a signed 64-bit integer holds 19)."""

_HEX: Final = frozenset("0123456789abcdef")


def decimal_version(text: str) -> int | None:
    """The counter behind ``text`` if it is one written in canonical form, else None.

    Canonical: ASCII digits only, no sign, no space, no leading zero, at most
    `MAX_DECIMAL_DIGITS` digits. ``"13"`` is 13; ``"013"``, ``"+13"``,
    ``" 13"``, ``"²"`` and ``"١٣"`` (which ``int`` reads as 13) are None.
    """
    if (
        not isinstance(text, str)
        or not text.isascii()
        or not text.isdigit()
        or len(text) > MAX_DECIMAL_DIGITS
        or (text[0] == "0" and text != "0")
    ):
        return None
    return int(text)


def hex_token(text: str, length: int) -> bool:
    """Whether ``text`` is ``length`` lowercase hexadecimal digits (a random token's form)."""
    return isinstance(text, str) and len(text) == length and _HEX.issuperset(text)


def entity_tag(text: str) -> bool:
    """Whether ``text`` is an HTTP entity tag (RFC 9110 8.8.3): ``"..."`` or ``W/"..."``.

    ``*`` (which matches any stored object in ``If-Match``), an unquoted
    string, or one holding a space, a quote or a control character is not.
    """
    if not isinstance(text, str):
        return False
    body = text[2:] if text.startswith("W/") else text
    if len(body) < 2 or body[0] != '"' or body[-1] != '"':
        return False
    return all(c == "\x21" or "\x23" <= c <= "\x7e" for c in body[1:-1])
