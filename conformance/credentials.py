"""The secrets a target's SPEC holds, and the check that no repr or error of a storage shows one.

A storage URL may carry a password (``redis://user:PASSWORD@host``, ``?password=``). An
adapter that puts its URL in its ``repr`` or in an error message (``could not connect to
postgresql://user:PASSWORD@db``) hands the password to every log and traceback. The
suite knows the SPEC of a target made from a URL (`Target.spec`) and looks for the
password in every spelling (as given, URL-quoted, URL-unquoted) in what the storage
shows: its ``repr`` and ``str``, and the errors it raises with their chained causes.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Iterable
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from ..urls import SECRET_WORDS
from .checks import fail

__all__ = ["SECRET_WORDS", "expect_no_secret", "secrets_of", "shown"]

_SECRET_PARAMETER = re.compile(f"(?i){SECRET_WORDS}")

_SHORTEST = 4
"""A secret shorter than this is not looked for (it would match by chance)."""


def secrets_of(spec: str | None) -> list[str]:
    """Every spelling of every secret in ``spec`` (a storage URL); [] for none or no URL."""
    if not spec or "://" not in spec:
        return []
    try:
        parts = urlsplit(spec)
        found = [parts.password] if parts.password else []
    except ValueError:
        return []
    found += [v for k, v in parse_qsl(parts.query) if _SECRET_PARAMETER.search(k) and v]
    spellings = {s for f in found for s in (f, unquote(f), quote(unquote(f), safe=""))}
    return sorted(s for s in spellings if len(s) >= _SHORTEST)


def shown(value: object) -> str:
    """What ``value`` shows a log or a user: its repr and str, and for an exception its
    whole traceback with the chained causes."""
    if isinstance(value, BaseException):
        return "".join(traceback.format_exception(value)) + repr(value)
    return f"{value!r}\n{value}"


def expect_no_secret(secrets: Iterable[str], what: str, text: str) -> None:
    """Fail if ``text`` (what ``what`` shows) holds one of ``secrets``."""
    __tracebackhide__ = True
    for secret in secrets:
        if secret in text:
            fail(
                "no repr, error or chained error of a storage may show a password of its URL",
                expected=f"{what} without the URL's password",
                observed=f"it shows it ({len(secret)} characters; not repeated here)",
                detail="To fix it, name the host (and the user) in reprs and messages, never "
                "the URL as given, and do not chain a driver error whose message holds the "
                "password (raise ... from None after copying what is safe)",
            )
