"""Reading an HTTP adapter's URL and options: the parts that S3 and Azure share.

Each adapter describes itself once with an `Options` (its name in
messages, its typed URL parameters, the words that mark a secret) and uses it
to parse URL parameters, check constructor options, redact URLs and check its
prefix and endpoint. What is about one backend (bucket or container names,
credentials, the client) stays in the adapter.

`SECRETS` keeps credentials out of the SDKs' logs: see
`SecretFilter`.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from ..errors import ConfigurationError, InvalidKey
from ..keys import validate_key
from ..urls import redact_url

__all__ = ["SECRETS", "Options", "SecretFilter", "UrlForm"]

_TRUE = frozenset(("1", "true", "yes", "on"))
_FALSE = frozenset(("0", "false", "no", "off"))


@dataclass(frozen=True, slots=True)
class UrlForm:
    """The shape of an adapter's URL, ``scheme://container/prefix?param=value``, for
    `Options.read_url` and its messages.

    Attributes:
        kind: the service in "not an ... URL" (``"S3"``, ``"Azure Blob"``).
        schemes: the URL schemes (lower case).
        container: the keyword argument, and word, for the URL's host part (``"bucket"``).
        example: the URL's form (``"s3://bucket/prefix"``).
        credentials: the message for a ``user:secret@`` in the URL.
        secret_params: parameter names (lower case) that would carry a credential.
        secret_hint: where such a credential goes instead (ends the message).
    """

    kind: str
    schemes: tuple[str, ...]
    container: str
    example: str
    credentials: str
    secret_params: frozenset[str]
    secret_hint: str


class Options:
    """How one adapter names itself and reads its URL parameters and options.

    Args:
        backend: the adapter's name in messages (``"S3"``, ``"Azure"``).
        ints: URL parameters that are integers.
        floats: URL parameters that are numbers.
        strs: URL parameters that are non-empty strings.
        bools: URL parameters that are true or false.
    """

    __slots__ = ("backend", "bools", "floats", "ints", "strs", "url_params")

    def __init__(
        self,
        backend: str,
        *,
        ints: tuple[str, ...],
        floats: tuple[str, ...],
        strs: tuple[str, ...],
        bools: tuple[str, ...],
    ) -> None:
        self.backend = backend
        self.ints = ints
        self.floats = floats
        self.strs = strs
        self.bools = bools
        self.url_params = frozenset((*ints, *floats, *strs, *bools))

    # -- URL parameters ----------------------------------------------------------------
    def read_url(
        self,
        url: object,
        options: dict[str, Any],
        known: frozenset[str],
        form: UrlForm,
        parse: Callable[[str, str], Any] | None = None,
    ) -> dict[str, Any]:
        """The constructor's keyword arguments for ``url``, then ``options`` (which win).

        Args:
            url: ``scheme://container[/prefix][?param=value&...]``.
            options: keyword options given with the URL.
            known: the option names accepted.
            form: the URL's shape.
            parse: types one parameter (default: `parse_param`).

        Raises:
            ConfigurationError: not a str or not this adapter's URL, credentials
                in it, an unknown option, an unknown or malformed parameter.
        """
        backend = self.backend
        if not isinstance(url, str):
            raise ConfigurationError(f"an {backend} URL must be a str, not {type(url).__name__}")
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigurationError(
                f"unknown {backend} option(s) {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(sorted(known))}"
            )
        try:
            parts = urlsplit(url)
        except ValueError as exc:
            raise ConfigurationError(f"bad {backend} URL: {exc}") from None
        if parts.scheme.lower() not in form.schemes:
            raise ConfigurationError(
                f"not an {form.kind} URL: {self.redact(url)!r} (use {form.example})"
            )
        if "@" in parts.netloc or ":" in parts.netloc:  # user:secret@ (no bucket holds either)
            raise ConfigurationError(form.credentials)
        if not parts.netloc:
            raise ConfigurationError(
                f"{backend} URL {self.redact(url)!r} names no {form.container} ({form.example})"
            )
        if parts.fragment:
            raise ConfigurationError(f"{backend} URL {self.redact(url)!r} has a fragment ('#...')")
        kwargs: dict[str, Any] = {form.container: unquote(parts.netloc)}
        prefix = unquote(parts.path).strip("/")
        if prefix:
            kwargs["prefix"] = prefix
        kwargs.update(self.parse_query(parts.query, form.secret_params, form.secret_hint, parse))
        kwargs.update(options)
        return kwargs

    def parse_query(
        self,
        query: str,
        secret_params: frozenset[str],
        secret_hint: str,
        parse: Callable[[str, str], Any] | None = None,
    ) -> dict[str, Any]:
        """The URL's query as typed keyword arguments.

        Args:
            query: the URL's query string.
            secret_params: parameter names (lower case) that would carry a credential.
            secret_hint: where such a credential goes instead (ends the message).
            parse: types one parameter (default: `parse_param`).

        Raises:
            ConfigurationError: a credential in the URL, a parameter given twice,
                an unknown or malformed parameter.
        """
        parse = parse or self.parse_param
        kwargs: dict[str, Any] = {}
        seen: set[str] = set()
        for name, value in parse_qsl(query, keep_blank_values=True):
            if name.lower() in secret_params:
                raise ConfigurationError(
                    f"{self.backend} URL parameter {name!r} would put a credential in the URL: "
                    f"pass it as a keyword option or {secret_hint}"
                )
            if name in seen:
                raise ConfigurationError(f"{self.backend} URL parameter {name!r} is given twice")
            seen.add(name)
            kwargs[name] = parse(name, value)
        return kwargs

    def parse_param(self, name: str, value: str) -> Any:
        """The value of URL parameter ``name``, typed.

        Raises:
            ConfigurationError: an unknown parameter, or a malformed or empty value.
        """
        backend = self.backend
        if name not in self.url_params:
            raise ConfigurationError(
                f"unknown {backend} URL parameter {name!r}; "
                f"known: {', '.join(sorted(self.url_params))}"
            )
        if name in self.ints:
            try:
                return int(value)
            except ValueError:
                raise ConfigurationError(
                    f"{backend} URL parameter {name}={value!r} must be an integer"
                ) from None
        if name in self.floats:
            try:
                return float(value)
            except ValueError:
                raise ConfigurationError(
                    f"{backend} URL parameter {name}={value!r} must be a number"
                ) from None
        if name in self.bools:
            low = value.lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise ConfigurationError(
                f"{backend} URL parameter {name}={value!r} must be true or false"
            )
        if not value:
            raise ConfigurationError(f"{backend} URL parameter {name} is empty")
        return value

    # -- constructor options -----------------------------------------------------------
    def check_int(self, name: str, value: Any, minimum: int) -> int:
        """``value`` if it is an int of at least ``minimum``.

        Raises:
            ConfigurationError: it is not.
        """
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ConfigurationError(
                f"{self.backend} option {name} must be an int >= {minimum}, not {value!r}"
            )
        return value

    def check_float(self, name: str, value: Any, *, zero: bool = False) -> float:
        """``value`` as a float if it is a finite number above 0 (or 0 too, with ``zero``).

        Raises:
            ConfigurationError: it is not.
        """
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or value < 0 or (value == 0 and not zero):
            bound = ">= 0" if zero else "> 0"
            raise ConfigurationError(
                f"{self.backend} option {name} must be a number {bound}, not {value!r}"
            )
        return float(value)

    def check_bool(self, name: str, value: Any) -> bool:
        """``value`` if it is a bool.

        Raises:
            ConfigurationError: it is not.
        """
        if not isinstance(value, bool):
            raise ConfigurationError(
                f"{self.backend} option {name} must be True or False, not {value!r}"
            )
        return value

    def check_prefix(self, prefix: object) -> str:
        """The prefix without surrounding slashes, if it is a valid key (or empty).

        Raises:
            ConfigurationError: not a str, or not a valid key.
        """
        if not isinstance(prefix, str):
            raise ConfigurationError(
                f"the {self.backend} prefix must be a str, not {type(prefix).__name__}"
            )
        prefix = prefix.strip("/")
        if prefix:
            try:
                validate_key(prefix)
            except InvalidKey as exc:
                raise ConfigurationError(
                    f"invalid {self.backend} prefix {prefix!r}: {exc}"
                ) from None
        return prefix

    # -- service URLs ------------------------------------------------------------------
    def check_http_url(self, option: str, url: Any, usage: str) -> None:
        """Check that option ``option`` is an ``http(s)://host[:port]`` URL without credentials.

        Args:
            option: the option's name (``"endpoint_url"``), for the message.
            url: its value.
            usage: the expected form, ending the message about a malformed URL.

        Raises:
            ConfigurationError: not a str, malformed, not http(s), or with a user or password.
        """
        backend = self.backend
        if not isinstance(url, str):
            raise ConfigurationError(f"{backend} {option} must be a str, not {type(url).__name__}")
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - validates the port
        except ValueError as exc:
            raise ConfigurationError(
                f"bad {backend} {option} {self.redact(url)!r}: {exc}"
            ) from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError(f"bad {backend} {option} {self.redact(url)!r}: {usage}")
        if parts.username or parts.password:
            raise ConfigurationError(f"credentials do not belong in the {backend} {option}")

    def replace_endpoint(self, url: str | None, endpoint: tuple[str, int] | str) -> str:
        """``url`` with its host and port replaced by ``endpoint`` (``http://`` it if None).

        Raises:
            ConfigurationError: ``endpoint`` is a str but not ``host:port``.
        """
        if isinstance(endpoint, str):
            host, sep, port_text = endpoint.rpartition(":")
            if not sep or not port_text.isdigit():
                raise ConfigurationError(
                    f"{self.backend} option endpoint must be 'host:port', not {endpoint!r}"
                )
            hostport = (host, int(port_text))
        else:
            hostport = (str(endpoint[0]), int(endpoint[1]))
        if url is None:
            return f"http://{hostport[0]}:{hostport[1]}"
        parts = urlsplit(url)
        return urlunsplit(parts._replace(netloc=f"{hostport[0]}:{hostport[1]}"))

    def redact(self, url: str) -> str:
        """``url`` with its user part and secret parameter values as ``***``."""
        return redact_url(url, hide_user=True)


# -- secrets in logs -----------------------------------------------------------------------

_REDACTED = "***"
_SECRET_PATTERNS = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        # SigV4: the session token header (canonical request, headers dict, presigned query)
        r"(x-amz-security-token['\"]?\s*[:=]\s*b?['\"]?)[^\s'\"&,;]+",
        # SigV4: the signature (Authorization header, presigned query, botocore's own line)
        r"((?:x-amz-)?signature\s*=\s*)[0-9a-f]{16,}",
        r"(signature:\s*)[0-9a-f]{64}",
        # Azure: a SAS's signature, a connection string's key or SAS, a Shared Key header
        r"([?&;]sig=)[^\s'\"&;]+",
        r"((?:AccountKey|SharedAccessSignature)\s*=\s*)[^\s'\";]+",
        r"(SharedKey(?:Lite)?\s+[^:\s'\"]+:)[A-Za-z0-9+/=]+",
        # user:password@ in a URL (redis://:secret@host)
        r"([a-z][a-z0-9+.-]*://[^/@\s:'\"]*:)[^/@\s'\"]+(?=@)",
    )
)


class SecretFilter(logging.Filter):
    """Redacts credentials from log records (a filter of the SDKs' loggers).

    At DEBUG level botocore prints each SigV4 canonical request, which holds
    the session token (``x-amz-security-token:...``), and each prepared request
    with its ``X-Amz-Security-Token`` and ``Authorization`` headers. The filter
    rewrites such a record before any handler sees it: the values of the
    secrets registered with `add` (an adapter's explicit credentials),
    and whatever the patterns recognize (a session token header, a SigV4 or
    SAS signature, a connection string's ``AccountKey``, a Shared Key header,
    a URL's password), become ``***``. A record's exception text is redacted
    too. It never drops a record.

    A filter of a logger sees the records logged on that logger only, not
    those of its children: `install` adds it to every existing logger
    under the given names.
    """

    def __init__(self) -> None:
        super().__init__()
        self._values: set[str] = set()
        self._exact: re.Pattern[str] | None = None

    def add(self, *values: object) -> None:
        """Redact these exact values from now on (non-str and short values are ignored)."""
        new = {v for v in values if isinstance(v, str) and len(v) >= 6} - self._values
        if new:
            self._values |= new
            ordered = sorted(self._values, key=len, reverse=True)  # longest first
            self._exact = re.compile("|".join(map(re.escape, ordered)))

    def redact(self, text: str) -> str:
        """``text`` with every secret that the filter knows or recognizes as ``***``."""
        if self._exact is not None:
            text = self._exact.sub(_REDACTED, text)
        for pattern in _SECRET_PATTERNS:
            text = pattern.sub(rf"\g<1>{_REDACTED}", text)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite ``record``'s message (and exception text) without secrets; keep it."""
        try:
            message = record.getMessage()
        except Exception:  # a broken record: leave it to the logging module's own handling
            return True
        clean = self.redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        return True

    def install(self, *names: str) -> None:
        """Add the filter to the loggers ``names`` and to every existing logger under them.

        Idempotent; call it again once more SDK modules have been imported (an
        adapter does when it opens its client).
        """
        manager = logging.Logger.manager
        loggers = [logging.getLogger(name) for name in names]
        for name, logger in list(manager.loggerDict.items()):
            if isinstance(logger, logging.Logger) and any(
                name.startswith(f"{root}.") for root in names
            ):
                loggers.append(logger)
        for logger in loggers:
            if self not in logger.filters:
                logger.addFilter(self)


SECRETS = SecretFilter()
"""The filter that the S3 and Azure adapters install on their SDKs' loggers."""
