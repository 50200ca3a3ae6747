"""Storage keys: the rules every adapter enforces, in one place.

A key is a ``/``-separated UTF-8 string. Keys are portable: a key valid on one
adapter is valid on all of them, so a run can be copied between backends. The
rules exist so that no key can escape an adapter's root or collide with
another key once mapped to a backend name.
"""

from __future__ import annotations

import re

from .errors import InvalidKey

__all__ = ["MAX_KEY_BYTES", "validate_key", "validate_prefix"]

MAX_KEY_BYTES = 1024
"""Longest key, in UTF-8 bytes (S3's limit)."""

_FORBIDDEN = frozenset("\x00\\") | frozenset(chr(c) for c in range(1, 32)) | {"\x7f"}


_PLAIN_KEY = re.compile(r"(?:[\w~@%+=,:-][\w.~@%+=,:-]*/)*[\w~@%+=,:-][\w.~@%+=,:-]*", re.ASCII)
"""A key of ASCII segments that none of the rules can refuse (no segment starts with a dot):
most keys, checked by one C-level match; any other key takes the full walk of the rules."""


def _reason(key: str, *, is_prefix: bool) -> str | None:
    if type(key) is str and len(key) <= MAX_KEY_BYTES and _PLAIN_KEY.fullmatch(key):
        return None  # ASCII, so as many bytes as characters
    if not isinstance(key, str):
        return f"must be a str, not {type(key).__name__}"
    if not key:
        return None if is_prefix else "is empty"
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid UTF-8 (it holds a lone surrogate)"
    if size > MAX_KEY_BYTES:
        return f"is {size} bytes long; the limit is {MAX_KEY_BYTES}"
    bad = _FORBIDDEN.intersection(key)
    if bad:
        names = ", ".join(sorted(repr(c) for c in bad))
        return f"contains a forbidden character ({names})"
    if key.startswith("/"):
        return "starts with '/'"
    segments = key.split("/")
    if is_prefix:
        segments = segments[:-1]  # the last part of a prefix may be partial or empty
    elif key.endswith("/"):
        return "ends with '/'"
    for segment in segments:
        if segment == "":
            return "has an empty segment ('//')"
        if segment in (".", ".."):
            return f"has a {segment!r} segment"
    return None


def validate_key(key: str) -> str:
    """Return ``key`` if it is a valid storage key.

    Args:
        key: the key to check.

    Raises:
        InvalidKey: the key is not a str, is empty, is longer than 1024 UTF-8
            bytes, holds NUL, a backslash or a control character, starts or
            ends with ``/``, or has an empty, ``.`` or ``..`` segment.
    """
    reason = _reason(key, is_prefix=False)
    if reason is not None:
        raise InvalidKey(f"invalid key {key!r}: it {reason}")
    return key


def validate_prefix(prefix: str) -> str:
    """Return ``prefix`` if every key starting with it could be valid.

    The empty prefix is valid; the last segment may be partial or empty
    (``runs/`` and ``runs/ab`` are both valid prefixes).

    Raises:
        InvalidKey: as `validate_key`, for the complete segments.
    """
    reason = _reason(prefix, is_prefix=True)
    if reason is not None:
        raise InvalidKey(f"invalid prefix {prefix!r}: it {reason}")
    return prefix
