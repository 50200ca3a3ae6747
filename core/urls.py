"""A storage URL as it may be shown: in a ``repr``, an error message, a log or a report.

A storage URL may carry a credential: a password in its user part
(``redis://user:PASSWORD@host``) or a query parameter (``?password=``,
``?account_key=``, ``?sig=``). Every place that shows a URL shows `redact_url` of it, so
that a password never reaches a log or a traceback.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["SECRET_WORDS", "redact_url"]

SECRET_WORDS: Final = "password|passwd|pwd|secret|key|token|sig|credential"
"""A query parameter whose name holds one of these words (``password``, ``account_key``,
``sig``, ``sslpassword``...) holds a secret."""

_SECRET_PARAMETER: Final = re.compile(rf"(?i)((?:^|[?&;])[^=&;?]*(?:{SECRET_WORDS})[^=&;]*=)[^&;]*")

_QUERY_START: Final = re.compile(r"[?#]")


def redact_url(url: str, *, hide_user: bool = False) -> str:
    """``url`` with its password and the values of its secret parameters as ``***``.

    Args:
        url: any string; one without ``://`` is returned as it is, less secret parameters.
        hide_user: show the whole user part as ``***``, not only its password (where the
            user name itself is a credential, as an access key id is).

    The user part ends at the last ``@`` before the query (an ``@`` or a ``/`` in a
    password left unquoted is not its end); a user part without a password is shown as it
    is, unless ``hide_user``.
    """
    head, sep, rest = url.partition("://")
    if not sep:
        head, rest = "", url
    query = _QUERY_START.search(rest)
    at = rest.rfind("@", 0, query.start() if query else len(rest))
    userinfo, tail = rest[:at], rest[at + 1 :]
    if at < 0:
        shown = ""
    elif hide_user:
        shown = "***@"
    elif ":" in userinfo:
        shown = f"{userinfo.split(':', 1)[0]}:***@"
    else:
        shown = f"{userinfo}@"
    tail = _SECRET_PARAMETER.sub(r"\1***", tail)
    return f"{head}{sep}{shown}{tail}"
