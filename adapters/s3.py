"""The S3 adapter: ``s3://bucket/prefix`` on aioboto3, for AWS S3 and S3-compatible services.

Each key is the object ``prefix/key`` of the bucket (one to one). Versions are
ETags; each object holds a 16-byte header (``ckv1`` and 12 random bytes) before the
value, so that every write gets a new ETag, also one of the same bytes.

Conditional writes are S3's own: create-only sends ``If-None-Match: *``, if-match
sends ``If-Match: <etag>``, on ``PutObject`` and on
``CompleteMultipartUpload``; the service decides atomically, and a failed
condition (412, or 409 ``ConditionalRequestConflict`` for a concurrent
conditional write) raises `PreconditionFailed`.
``delete`` reads the ETag (``HeadObject``) and deletes with ``If-Match``, so it
tells truthfully whether the key existed; ``delete(if_match=...)`` sends the
caller's ETag.

One client per storage, created on first use and closed by ``aclose()``. The
storage retries transient failures itself (connection errors, timeouts, 5xx,
throttling) with exponential backoff and jitter until its ``timeout``; the
client's own retries are off, so that one policy holds and a conditional write
retried after a lost reply can recognize its own success (each conditional
write carries a random token in its metadata, checked on a 412 after a retry).
A write that fails after its request may have left the client (a timeout, a lost
reply, a 500) raises `OutcomeUnknown`, and so does a
retry's failure after such an attempt (see `checkpointkit.adapters._retry`).
``delete_many`` sends ``DeleteObjects`` per 1000 keys (fewer when their names pass
768 KiB). A logging filter keeps the
session token and signatures out of botocore's DEBUG output.

See ``docs/adapters/s3.md`` for the URL, the options, the costs and the
consistency notes.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import os
import re
import secrets
import ssl
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, ClassVar, NoReturn, TypeVar
from xml.sax.saxutils import escape as xml_escape

from ..errors import (
    ConfigurationError,
    InvalidKey,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    StorageClosed,
    StorageUnavailable,
)
from ..keys import MAX_KEY_BYTES
from ..storage import Capabilities, GetResult, IfMatch, ListPage, PutMode, StorageBase
from ..versions import entity_tag
from ._inflight import Background, CallsUnderWay, no_hidden_resend, track_connections
from ._options import SECRETS, Options, UrlForm
from ._retry import RetryPolicy, call

try:
    import aioboto3  # noqa: F401  (the extra installs it; without it, the error below)
    import aiohttp
    from aiobotocore.config import AioConfig
    from aiobotocore.httpsession import AIOHTTPSession
    from aiobotocore.session import AioSession
    from botocore import exceptions as bexc
    from botocore.httpsession import get_cert_path
except ImportError as _exc:  # pragma: no cover - exercised without the extra
    raise ConfigurationError(
        f'the s3 adapter needs aioboto3 ({_exc}); install it with: pip install "checkpointkit[s3]"'
    ) from _exc

__all__ = ["S3Storage"]

_loader: list[Any] = []  # the process's botocore data loader, once a storage opened


def _botocore_session(profile: str | None) -> AioSession:
    """A new botocore session (of ``profile``, with its own credentials and configuration)
    that shares one data loader with every other storage of the process: botocore reads
    and parses the S3 service model once per loader (a client took 110 to 120 ms of CPU to
    open when each storage had a loader of its own, 10 to 11 ms with the shared one:
    ``benchmarks/s3_client_open.py``). The loader holds only what it read from botocore's
    data files, the same for every session."""
    session = AioSession(profile=profile)
    if _loader:
        session.register_component("data_loader", _loader[0])
    else:
        _loader.append(session.get_component("data_loader"))
    return session


T = TypeVar("T")

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

MIN_PART_SIZE = 5 * MiB
"""S3's smallest part (every part but the last)."""
MAX_PARTS = 10_000
MAX_NAME_BYTES = 1024
"""S3's longest object name, in UTF-8 bytes."""
MAX_SINGLE_PUT = 5 * GiB
"""S3's largest single ``PutObject``."""
MAX_DELETE_BATCH = 1000
"""S3's most keys in one ``DeleteObjects``."""
MAX_DELETE_BODY = 768 * 1024
"""The most bytes of object names (escaped, with their XML) that one ``DeleteObjects`` sends:
1,000 names of 1 KiB make a body over 1 MiB, which aiohttp warns "might lock the event loop"
(a ``ResourceWarning``) when it is given as bytes, as botocore gives it."""
_OBJECT_XML = len("<Object><Key></Key><ETag>&quot;&quot;</ETag></Object>") + 32 + len("-10000")
"""The XML of one object of a ``DeleteObjects`` besides its escaped name: its ``ETag``
condition (32 hex digits, and a multipart upload's part count), quoted."""

HEADER_MAGIC = b"ckv1"
HEADER_SIZE = 16
"""Each stored object is ``ckv1``, 12 random bytes, then the value: S3's ETag of a single
``PutObject`` is the MD5 of the content, so without the random bytes writing the same value
twice (or after a delete) would give the same version, and a stale if-match would succeed."""

EXPECT_CONTINUE_ABOVE = 1 * MiB
"""Bodies up to this size are sent without waiting for ``100 Continue``."""

_TOKEN_META = "checkpointkit-write"
"""Metadata name of the random token that a conditional write carries."""

_NOT_FOUND = frozenset(("NoSuchKey", "NotFound", "404"))
_CONDITION = frozenset(("PreconditionFailed", "412", "ConditionalRequestConflict"))
_CREDENTIALS = frozenset(
    (
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "InvalidClientTokenId",
        "InvalidToken",
        "ExpiredToken",
        "TokenRefreshRequired",
        "AuthorizationHeaderMalformed",
        "MissingSecurityHeader",
        "UnrecognizedClientException",
    )
)
_DENIED = frozenset(("AccessDenied", "AllAccessDisabled", "403", "Forbidden"))
_TRANSIENT_CODES = frozenset(
    (
        "InternalError",
        "ServiceUnavailable",
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "RequestTimeout",
        "RequestTimeoutException",
        "BandwidthLimitExceeded",
        "OperationAborted",
        "500",
        "502",
        "503",
        "504",
    )
)
_TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    bexc.EndpointConnectionError,
    bexc.ConnectionClosedError,
    bexc.ReadTimeoutError,
    bexc.ConnectTimeoutError,
    bexc.ResponseStreamingError,
    bexc.IncompleteReadError,
    bexc.HTTPClientError,
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    ConnectionError,
    TimeoutError,
)

_TIMEOUTS = (TimeoutError, bexc.ReadTimeoutError, bexc.ConnectTimeoutError)
_LOST = (TimeoutError, bexc.BotoCoreError, aiohttp.ClientError, OSError)
"""Errors of a request without a (whole) answer."""
_UNKNOWN_STATUS = frozenset((500, 502, 504))
"""Answers to a write that do not say whether it happened (503 and 429 say it did not)."""

_SDK_LOGGERS = ("botocore", "aiobotocore", "boto3", "aioboto3", "s3transfer", "urllib3")
"""The loggers that `SECRETS` filters."""

OBJECT_NAMES = ("keys", "flat")
"""How keys become object names: ``keys`` as they are, ``flat`` with ``.`` and ``/`` escaped."""
_FLAT_ESCAPES = {".": ".-", "/": "._"}
_FLAT_UNESCAPES = {"-": ".", "_": "/"}
_FLAT_ESCAPED = re.compile(r"\.(.)", re.DOTALL)

_BUCKET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,253}[A-Za-z0-9]$")
_SECRET_PARAMS = frozenset(
    ("access_key_id", "secret_access_key", "session_token", "aws_access_key_id",
     "aws_secret_access_key", "aws_session_token", "password", "secret", "token")
)  # fmt: skip

_OPTS = Options(
    "S3",
    ints=("multipart_threshold", "part_size", "max_concurrency", "retries", "page_size",
          "max_pool_connections", "max_key_bytes"),
    floats=("timeout", "connect_timeout", "read_timeout", "retry_backoff", "retry_backoff_max",
            "cancel_grace"),
    strs=("endpoint_url", "region", "profile", "addressing_style", "object_names"),
    bools=("create",),
)  # fmt: skip
_URL_PARAMS = _OPTS.url_params
_OPTIONS = frozenset(
    (*_URL_PARAMS, "prefix", "access_key_id", "secret_access_key", "session_token", "endpoint")
)

_URL_FORM = UrlForm(
    kind="S3",
    schemes=("s3",),
    container="bucket",
    example="s3://bucket/prefix",
    credentials="credentials do not belong in an s3:// URL: pass access_key_id and "
    "secret_access_key as options, or use the AWS credential chain",
    secret_params=_SECRET_PARAMS,
    secret_hint="use the AWS credential chain",
)


def delete_batches(ordered: list[str], names: dict[str, str]) -> Iterator[list[str]]:
    """``ordered`` cut into the batches of one ``DeleteObjects`` each: at most
    `MAX_DELETE_BATCH` keys, and at most `MAX_DELETE_BODY` bytes of their object names
    (``names``) and ETag conditions as the request's XML holds them."""
    chunk: list[str] = []
    size = 0
    for key in ordered:
        item = len(xml_escape(names[key]).encode()) + _OBJECT_XML
        if chunk and (len(chunk) == MAX_DELETE_BATCH or size + item > MAX_DELETE_BODY):
            yield chunk
            chunk, size = [], 0
        chunk.append(key)
        size += item
    if chunk:
        yield chunk


class S3Storage(StorageBase):
    """A storage on an S3 bucket (AWS or S3-compatible), through aioboto3.

    Open it with `from_url` (``s3://bucket/prefix?region=eu-west-1``) or
    construct it; use it with ``async with``. Credentials come from the
    standard AWS chain (environment, shared files, profile, instance role)
    unless given explicitly; they are never printed.

    Args:
        bucket: the bucket name.
        prefix: a key prefix inside the bucket: every key is stored as
            ``prefix/key``. Empty: keys are object names.
        endpoint_url: an S3-compatible service (``http://127.0.0.1:9000``).
        endpoint: ``(host, port)`` or ``"host:port"`` replacing the host and
            port of ``endpoint_url`` (to put a proxy in between).
        region: the bucket's region (default: from the AWS configuration).
        access_key_id: explicit credentials (else the standard chain).
        secret_access_key: explicit credentials; never printed.
        session_token: explicit temporary credentials; never printed.
        profile: a profile of the shared AWS configuration files.
        create: create the bucket on first use if it does not exist.
        multipart_threshold: overwrites larger than this many bytes are sent as
            a multipart upload (default 8 MiB); a conditional put is one
            ``PutObject`` up to `conditional_put_max`.
        part_size: multipart part size in bytes (at least 5 MiB; default 8 MiB;
            grown when a value would need more than 10,000 parts).
        max_concurrency: parts of one multipart upload sent at once (default 4).
        timeout: the deadline, in seconds, of one request including its
            retries; no retry starts after it (default 30). A request carrying
            a body gets one more second per MiB.
        connect_timeout: the deadline of one TCP connect (default
            ``min(timeout, 5)``).
        read_timeout: the longest silence while waiting for or reading a
            reply (default ``timeout``).
        retries: how many times a request is retried after a transient
            failure (default 4).
        retry_backoff: the first backoff in seconds (default 0.1), doubled on
            each retry with full jitter, at most ``retry_backoff_max`` (2).
        page_size: keys fetched per ``ListObjectsV2`` request (1 to 1000).
        max_pool_connections: the client's connection pool size (default 20).
        addressing_style: ``"auto"``, ``"path"`` or ``"virtual"``.
        object_names: ``"keys"`` (default): the object of key ``k`` is
            ``prefix/k``. ``"flat"``: ``.`` becomes ``.-`` and ``/`` becomes
            ``._``, so that every object lies in one "directory" (the prefix)
            and a server that lists in directory-walk order, as SeaweedFS
            does, lists in byte order (the escape keeps the order of keys).
            Objects written with one setting are not seen with the other.
        max_key_bytes: the longest key to accept, in UTF-8 bytes of its object
            name without the prefix (1 to 1024, the default). A server with a
            shorter limit says so here, so that a longer key fails with
            ``InvalidKey`` before a request: SeaweedFS holds at most 255 bytes
            in one name segment, so 255 with ``object_names="flat"``.
        cancel_grace: when a ``put`` or ``delete`` is cancelled while its
            request is on the wire, the seconds it may still take to finish
            before its connection is reset (default 0.25; 0: reset at once).
            The ``CancelledError`` is raised once the write has settled, so a
            write whose reply arrives in time cannot land later (see the
            documentation). Keep it below the runner's ``cancel_timeout``.

    Raises:
        ConfigurationError: a bad bucket name, prefix or option.
    """

    conditional_put_max: ClassVar[int] = MAX_SINGLE_PUT
    """A create-only or if-match put of up to this many bytes is one ``PutObject``, whatever
    ``multipart_threshold`` says: a conditional ``CompleteMultipartUpload`` is not checked
    atomically by every server (SeaweedFS let up to 4 of 4 concurrent create-only
    completions of one key succeed), nor checked at all by some (moto ignores ``If-Match``
    there). Only larger values, which one request cannot carry, use a multipart upload with
    the condition on its completion."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        conditional_put=True, conditional_delete=True, durable=True, shared=True, ttl=False
    )

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        endpoint: tuple[str, int] | str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
        profile: str | None = None,
        create: bool = False,
        multipart_threshold: int = 8 * MiB,
        part_size: int = 8 * MiB,
        max_concurrency: int = 4,
        timeout: float = 30.0,
        connect_timeout: float | None = None,
        read_timeout: float | None = None,
        retries: int = 4,
        retry_backoff: float = 0.1,
        retry_backoff_max: float = 2.0,
        page_size: int = 1000,
        max_pool_connections: int = 20,
        addressing_style: str = "auto",
        cancel_grace: float = 0.25,
        object_names: str = "keys",
        max_key_bytes: int = MAX_KEY_BYTES,
    ) -> None:
        self._closed = False
        if not isinstance(bucket, str) or not _BUCKET.match(bucket):
            raise ConfigurationError(
                f"invalid S3 bucket name {bucket!r}: use 3 to 255 letters, digits, "
                "'.', '-' or '_' (AWS: 3 to 63 lowercase letters, digits, '.' and '-')"
            )
        self.bucket = bucket
        self.prefix = _OPTS.check_prefix(prefix)
        self._root = f"{self.prefix}/" if self.prefix else ""
        if endpoint is not None:
            endpoint_url = _OPTS.replace_endpoint(endpoint_url, endpoint)
        if endpoint_url is not None:
            _OPTS.check_http_url("endpoint_url", endpoint_url, "use http(s)://host[:port]")
        self.endpoint_url = endpoint_url
        self.region = region
        for name, value in (
            ("access_key_id", access_key_id),
            ("secret_access_key", secret_access_key),
            ("session_token", session_token),
            ("profile", profile),
            ("region", region),
        ):
            if value is not None and (not isinstance(value, str) or not value):
                raise ConfigurationError(f"S3 option {name} must be a non-empty str or None")
        if (access_key_id is None) != (secret_access_key is None):
            raise ConfigurationError(
                "S3 options access_key_id and secret_access_key go together: give both or neither"
            )
        self._credentials = (access_key_id, secret_access_key, session_token)
        SECRETS.add(secret_access_key, session_token)  # never in the SDK's logs (see _open)
        self._profile = profile
        self._create = _OPTS.check_bool("create", create)
        self._threshold = _OPTS.check_int("multipart_threshold", multipart_threshold, 1)
        self._part_size = _OPTS.check_int("part_size", part_size, MIN_PART_SIZE)
        self._concurrency = _OPTS.check_int("max_concurrency", max_concurrency, 1)
        self._policy = RetryPolicy.checked(
            _OPTS,
            timeout=timeout,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries=retries,
            retry_backoff=retry_backoff,
            retry_backoff_max=retry_backoff_max,
        )
        self._page_size = _OPTS.check_int("page_size", page_size, 1)
        if self._page_size > 1000:
            raise ConfigurationError(f"S3 option page_size must be at most 1000, not {page_size}")
        self._pool = _OPTS.check_int("max_pool_connections", max_pool_connections, 1)
        if addressing_style not in ("auto", "path", "virtual"):
            raise ConfigurationError(
                f"S3 option addressing_style must be auto, path or virtual, "
                f"not {addressing_style!r}"
            )
        self._addressing = addressing_style
        if object_names not in OBJECT_NAMES:
            raise ConfigurationError(
                f"S3 option object_names must be keys or flat, not {object_names!r}"
            )
        self.object_names = object_names
        self._flat = object_names == "flat"
        self._delete_conditions: bool | None = None  # does DeleteObjects honour ETags? (probed)
        self._key_limit = _OPTS.check_int("max_key_bytes", max_key_bytes, 1)
        if self._key_limit > MAX_KEY_BYTES:
            raise ConfigurationError(
                f"S3 option max_key_bytes must be at most {MAX_KEY_BYTES}, not {max_key_bytes}"
            )
        self._cancel_grace = _OPTS.check_float("cancel_grace", cancel_grace, zero=True)
        self._client: Any = None
        self._client_cm: Any = None
        self._ready = False  # the client is set up and the bucket checked (create=True)
        self._under_way = CallsUnderWay()
        self._open_lock = asyncio.Lock()
        self._background = Background()

    # -- construction ------------------------------------------------------------------
    @classmethod
    def from_url(cls, url: str, **options: Any) -> S3Storage:
        """Open ``s3://bucket[/prefix][?param=value&...]``.

        Parameters: ``endpoint_url``, ``region``, ``profile``, ``create``
        (true/false), ``multipart_threshold``, ``part_size`` (bytes),
        ``max_concurrency``, ``timeout``, ``connect_timeout``,
        ``read_timeout``, ``retry_backoff``, ``retry_backoff_max``,
        ``cancel_grace`` (seconds), ``retries``, ``page_size``,
        ``max_pool_connections``, ``addressing_style``, ``object_names``,
        ``max_key_bytes``. Credentials never go
        in the URL: give them as keyword ``options`` (``access_key_id``,
        ``secret_access_key``, ``session_token``) or through the AWS
        credential chain. Keyword ``options`` take the constructor's arguments
        and override the URL.

        Raises:
            ConfigurationError: not an s3 URL, credentials in the URL, an
                unknown or malformed parameter or option.
        """
        return cls(**_OPTS.read_url(url, options, _OPTIONS, _URL_FORM))

    def __repr__(self) -> str:
        where = f", endpoint_url={self.endpoint_url!r}" if self.endpoint_url else ""
        region = f", region={self.region!r}" if self.region else ""
        return f"S3Storage(bucket={self.bucket!r}, prefix={self.prefix!r}{where}{region})"

    @property
    def client(self) -> Any:
        """The underlying aiobotocore S3 client once opened, else None (do not close it)."""
        return self._client

    # -- the client --------------------------------------------------------------------
    async def _open(self) -> Any:
        client = self._client
        if client is not None and self._ready:
            return client
        async with self._open_lock:
            self._check_open()
            if self._client is None:
                access_key, secret_key, token = self._credentials
                try:
                    session = _botocore_session(self._profile)
                except bexc.ProfileNotFound:
                    raise ConfigurationError(
                        f"AWS profile {self._profile!r} not found in the AWS configuration files"
                    ) from None
                config = AioConfig(
                    connect_timeout=self._policy.connect_timeout,
                    read_timeout=self._policy.read_timeout,
                    retries={"total_max_attempts": 1},  # the storage retries (see the module doc)
                    max_pool_connections=self._pool,
                    s3={"addressing_style": self._addressing},
                    http_session_cls=_TrackingSession,  # for cancelled writes (see _inflight)
                )
                cm = session.create_client(
                    "s3",
                    region_name=self.region,
                    endpoint_url=self.endpoint_url,
                    aws_access_key_id=access_key,
                    aws_secret_access_key=secret_key,
                    aws_session_token=token,
                    config=config,
                )
                with self._translate_errors("open", None):
                    client, interrupted = await _set_up(cm.__aenter__())
                self._client, self._client_cm = client, cm  # aclose() closes it from here
                # botocore's DEBUG lines hold the session token and signatures: redacted
                SECRETS.install(*_SDK_LOGGERS)
                client.meta.events.register("before-send.s3", _expect_only_large_bodies)
                _resolve_endpoints_per_bucket(client, session.get_component("data_loader"))
                if interrupted is not None:
                    raise interrupted
            if not self._ready:
                if self._create:
                    await self._ensure_bucket()
                self._ready = True
        # A call that waited here while aclose() began must not go on: aclose() waits for
        # calls under way only, and then closes the client.
        self._check_open()
        return self._client

    async def _ensure_bucket(self) -> None:
        """Create the bucket if it does not exist (``create=True``)."""
        client = self._client
        try:
            await self._call("create bucket", None, lambda: client.head_bucket(Bucket=self.bucket))
            return
        except ConfigurationError as exc:
            if not _is_missing_bucket(exc.__cause__):
                raise
        kwargs: dict[str, Any] = {"Bucket": self.bucket}
        region = client.meta.region_name
        if region and region != "us-east-1" and self.endpoint_url is None:
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
        try:
            await self._call("create bucket", None, lambda: client.create_bucket(**kwargs))
        except StorageUnavailable as exc:
            if _code(exc.__cause__) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise
        except ConfigurationError as exc:
            if _code(exc.__cause__) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise

    async def _aclose(self) -> None:
        try:
            # Calls in flight end first, each by its own deadline (`timeout` plus a
            # second per MiB of its body), and none retries once closed: the client must
            # outlive them, or a retry would open an aiohttp session that nothing closes
            # (found by the conformance suite's sweeps), and a write cut off on the wire
            # could be applied after aclose() returned.
            await self._under_way.ended()
            # unfinished multipart aborts: one request's time, then stop them
            await self._background.wait(self._policy.connect_timeout)
        finally:
            async with self._open_lock:
                cm, self._client_cm, self._client = self._client_cm, None, None
                self._ready = False
                if cm is not None:
                    await cm.__aexit__(None, None, None)

    # -- errors and retries ------------------------------------------------------------
    @contextlib.contextmanager
    def _translate_errors(
        self,
        op: str,
        key: str | None,
        *,
        condition: str | None = None,
        sent: Callable[[], bool] | None = None,
    ) -> Iterator[None]:
        """Turn botocore and aiohttp errors into checkpointkit errors, the cause chained.

        Args:
            op: what was being done (``"get"``, ``"put"``...), for the message.
            key: the storage key concerned, if any (named in the message).
            condition: the put's or delete's condition, named when it fails.
            sent: for a write, tells whether its request may have left the
                client (it was handed a connection); None for a read.

        Raises:
            NotFound: no such key.
            PreconditionFailed: 412, or 409 ``ConditionalRequestConflict``.
            InvalidKey: the object name is too long or refused.
            ConfigurationError: a missing bucket (with the ``create=True``
                hint), rejected or missing credentials, access denied, a bad
                region or bucket name.
            StorageClosed: the storage was closed while the call ran.
            OutcomeUnknown: a write whose request may have left got no definite
                answer: a timeout, a lost connection or reply, HTTP 500, 502 or
                504. It may have happened, or may still happen.
            StorageUnavailable: anything else (could not connect, 503,
                throttling, an unexpected error).
        """
        try:
            yield
        except (
            NotFound,
            PreconditionFailed,
            InvalidKey,
            ConfigurationError,
            StorageClosed,
            StorageUnavailable,
        ):
            raise
        except Exception as exc:
            self._raise_translated(exc, op, key, condition, sent is not None and sent())

    def _raise_translated(
        self, exc: Exception, op: str, key: str | None, condition: str | None, sent: bool
    ) -> NoReturn:
        what = f"S3 {op} of key {key!r}" if key is not None else f"S3 {op}"
        where = f"bucket {self.bucket!r}" + (
            f" at {self.endpoint_url}" if self.endpoint_url else ""
        )
        unknown = "its request was sent, so it may have happened, or may still happen"
        if self._closed and not isinstance(exc, bexc.ClientError):  # not the server's answer
            if sent:  # cut off on the wire by the closing client
                raise OutcomeUnknown(
                    f"{what} was cut off: the storage was closed; {unknown}"
                ) from exc
            raise StorageClosed(f"{what} failed: the storage was closed") from exc
        if isinstance(exc, bexc.ClientError):
            code = _code(exc)
            status = _status(exc)
            if code in ("NoSuchBucket",):
                raise ConfigurationError(
                    f"S3 {where} does not exist: create it, or pass create=True "
                    "(?create=true in the URL) to create it on first use"
                ) from exc
            if code in _CONDITION or status == 412:
                cond = f" ({condition})" if condition else ""
                raise PreconditionFailed(
                    f"{what}: the condition failed{cond}"
                    if key is None
                    else f"key {key!r}: the condition failed{cond}"
                ) from exc
            if code in _NOT_FOUND or status == 404:
                if key is None:
                    raise ConfigurationError(
                        f"S3 {where} does not exist: create it, or pass create=True "
                        "(?create=true in the URL) to create it on first use"
                    ) from exc
                raise NotFound(f"key {key!r} not found") from exc
            if code in _CREDENTIALS:
                raise ConfigurationError(
                    f"S3 rejected the credentials ({code}) for {where}: "
                    "check the access key id, the secret and the session token"
                ) from exc
            if code in _DENIED or status == 403:
                raise ConfigurationError(
                    f"{what}: access denied ({code}) to {where}: check the credentials' permissions"
                ) from exc
            if code == "KeyTooLongError":
                raise InvalidKey(
                    f"invalid key {key!r}: with the prefix {self.prefix!r} it is too long for S3"
                ) from exc
            if code in ("PermanentRedirect", "IllegalLocationConstraintException", "301"):
                raise ConfigurationError(
                    f"S3 {where} is in another region than {self.region!r}: set region="
                ) from exc
            if code == "InvalidBucketName":
                raise ConfigurationError(f"S3 refused the bucket name {self.bucket!r}") from exc
            if sent and (status in _UNKNOWN_STATUS or code == "InternalError"):
                raise OutcomeUnknown(
                    f"{what} failed: {code} (HTTP {status}) on {where}; {unknown}"
                ) from exc
            raise StorageUnavailable(f"{what} failed: {code} (HTTP {status}) on {where}") from exc
        if isinstance(exc, bexc.NoCredentialsError | bexc.PartialCredentialsError):
            raise ConfigurationError(
                f"no usable AWS credentials for {where}: set them in the environment, "
                "the shared credentials file or a profile, or pass access_key_id and "
                "secret_access_key"
            ) from exc
        if isinstance(exc, bexc.ProfileNotFound):
            raise ConfigurationError(f"AWS profile {self._profile!r} not found") from exc
        if isinstance(exc, bexc.NoRegionError):
            raise ConfigurationError(f"no AWS region for {where}: pass region=") from exc
        if isinstance(exc, bexc.ParamValidationError):
            detail = " ".join(str(exc).split())
            raise ConfigurationError(
                f"{what}: the S3 client refused the request ({detail})"
            ) from exc
        if sent and isinstance(exc, _LOST):
            # an answer that never came, or came cut: the server may hold the whole request
            detail = "timed out" if isinstance(exc, _TIMEOUTS) else f"lost ({type(exc).__name__})"
            raise OutcomeUnknown(f"{what} {detail} on {where}; {unknown}") from exc
        if isinstance(exc, _TIMEOUTS):
            raise StorageUnavailable(f"{what} timed out on {where}") from exc
        if isinstance(exc, bexc.EndpointConnectionError):
            raise StorageUnavailable(f"{what} failed: cannot connect to {where}") from exc
        if isinstance(exc, bexc.BotoCoreError | aiohttp.ClientError | OSError):
            raise StorageUnavailable(f"{what} failed on {where}: {type(exc).__name__}") from exc
        raise StorageUnavailable(f"{what} failed on {where}: {type(exc).__name__}") from exc

    async def _call(
        self,
        op: str,
        key: str | None,
        request: Callable[[], Awaitable[T]],
        *,
        condition: str | None = None,
        size: int = 0,
        write: bool = False,
        repeatable: bool = True,
    ) -> T:
        """Run ``request`` with retries and backoff for transient failures, errors translated.

        A ``write`` (``PutObject``, ``CompleteMultipartUpload``, ``DeleteObject``)
        cancelled while its request is on the wire settles first: see
        `settle` and ``cancel_grace``.
        """
        return await call(
            request,
            self._policy,
            lambda sent: self._translate_errors(op, key, condition=condition, sent=sent),
            _is_transient,
            size=size,
            write=write,
            repeatable=repeatable,
            grace=self._cancel_grace,
            adopt=self._background.spawn,
            closed=lambda: self._closed,
            under_way=self._under_way,
        )

    # -- the protocol ------------------------------------------------------------------
    def _encode(self, key: str) -> str:
        """The object-name form of ``key`` (or of a prefix or bound), without the root."""
        if not self._flat:
            return key
        # "." first: the escape of "/" holds a "." that must not be escaped again
        return key.replace(".", _FLAT_ESCAPES["."]).replace("/", _FLAT_ESCAPES["/"])

    def _decode(self, name: str) -> str:
        """The key of an object name without the root (the inverse of `_encode`)."""
        if not self._flat or "." not in name:
            return name
        # an escape that this adapter never writes (a foreign object) is kept as it is
        return _FLAT_ESCAPED.sub(lambda m: _FLAT_UNESCAPES.get(m[1], m[0]), name)

    def holds_key(self, key: str) -> bool:
        """Whether ``key``'s object name fits ``max_key_bytes`` and, with the prefix, S3's
        1024 bytes."""
        encoded = len(self._encode(key).encode())
        return encoded <= self._key_limit and len(self._root.encode()) + encoded <= MAX_NAME_BYTES

    def _name(self, key: str) -> str:
        encoded = self._encode(key)
        if len(encoded.encode()) > self._key_limit:
            raise InvalidKey(
                f"invalid key {key!r}: its object name is longer than max_key_bytes="
                f"{self._key_limit}, the longest this storage was opened to accept"
            )
        name = self._root + encoded
        if len(name.encode()) > MAX_NAME_BYTES:
            raise InvalidKey(
                f"invalid key {key!r}: with the prefix {self.prefix!r} it is too long for S3 "
                f"(object names hold at most {MAX_NAME_BYTES} UTF-8 bytes)"
            )
        return name

    def _may_match(self, version: str) -> bool:
        return entity_tag(version)  # an ETag: never "*", which would match any object

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        name = self._name(key)
        client = await self._open()
        # a fresh header makes every write's ETag new, also for the same bytes (see the doc)
        data = HEADER_MAGIC + os.urandom(HEADER_SIZE - len(HEADER_MAGIC)) + data
        conditions: dict[str, Any] = {}
        token = ""
        condition = None
        if mode == "create":
            conditions["IfNoneMatch"] = "*"
            condition = "create-only: the key exists"
        elif isinstance(mode, IfMatch):
            conditions["IfMatch"] = mode.version
            condition = f"if-match {mode.version}: the key is missing or at another version"
        multipart = len(data) > self._threshold and (
            mode == "overwrite" or len(data) > self.conditional_put_max
        )
        if conditions or multipart:
            token = secrets.token_hex(12)
            conditions["Metadata"] = {_TOKEN_META: token}

        async def put_object() -> Any:
            return await client.put_object(Bucket=self.bucket, Key=name, Body=data, **conditions)

        try:
            if multipart:
                return await self._multipart(client, key, name, data, conditions, condition)
            resp = await self._call(
                "put",
                key,
                put_object,
                condition=condition,
                size=len(data),
                write=True,
                # repeated after a create landed and was deleted, a create lands twice; an
                # overwrite could undo a later write; an if-match cannot (every ETag is new)
                repeatable=isinstance(mode, IfMatch),
            )
        except (PreconditionFailed, NotFound) as exc:
            # A write meets its own write (resent by aiohttp after a lost reply, where
            # aiohttp still does): that is a success. One HEAD per failure tells them apart,
            # and tells a missing key from another version.
            version, exists = await self._own_write(client, key, name, token)
            if version is not None:
                return version
            if isinstance(mode, IfMatch) and not exists:
                # AWS answers 404 to if-match on a missing key; SeaweedFS answers 412
                raise PreconditionFailed(
                    f"key {key!r} does not exist (if-match {mode.version})"
                ) from exc
            if isinstance(exc, PreconditionFailed):
                raise
            raise StorageUnavailable(  # NoSuchUpload: the multipart upload vanished
                f"S3 put of key {key!r} failed: the multipart upload was lost"
            ) from exc
        except OutcomeUnknown:
            # An attempt that may have landed (and, for an if-match, a retry that failed: see
            # adapters/_retry.py): the put's own write if the object carries its token. A
            # create-only put is not repeated but looked for. Otherwise the attempt may have
            # landed and been replaced since, or may land later: the outcome stays unknown.
            if token:
                # the look failed, or aclose() came first (StorageClosed would say the put
                # never ran): the outcome stays unknown
                with contextlib.suppress(StorageUnavailable, StorageClosed):
                    version, _ = await self._own_write(client, key, name, token)
                    if version is not None:
                        return version
            raise
        return str(resp["ETag"])

    async def _own_write(
        self, client: Any, key: str, name: str, token: str
    ) -> tuple[str | None, bool]:
        """The ETag of ``name`` if the stored object is the write that carried ``token``
        (else None), and whether ``name`` exists: one ``HeadObject``."""
        head = await self._head(client, key, name)
        if head is None:
            return None, False
        if token and head.get("Metadata", {}).get(_TOKEN_META) == token:
            return str(head["ETag"]), True
        return None, True

    async def _head(self, client: Any, key: str, name: str) -> dict[str, Any] | None:
        """``HeadObject`` of ``name`` (its ETag and metadata), or None if it does not exist."""
        try:
            head: dict[str, Any] = await self._call(
                "head", key, lambda: client.head_object(Bucket=self.bucket, Key=name)
            )
        except NotFound:
            return None
        return head

    async def _multipart(
        self,
        client: Any,
        key: str,
        name: str,
        data: bytes,
        conditions: dict[str, Any],
        condition: str | None,
    ) -> str:
        """Upload ``data`` in parts; complete with the conditions; abort on any failure."""
        size = max(self._part_size, math.ceil(len(data) / MAX_PARTS))
        meta = {"Metadata": conditions["Metadata"]} if "Metadata" in conditions else {}
        created = await self._call(
            "put (start multipart upload)",
            key,
            lambda: client.create_multipart_upload(Bucket=self.bucket, Key=name, **meta),
        )
        upload_id: str = created["UploadId"]
        view = memoryview(data)
        offsets = list(range(0, len(data), size))
        etags: list[str] = [""] * len(offsets)
        gate = asyncio.Semaphore(self._concurrency)

        async def part(index: int, offset: int) -> None:
            body = bytes(view[offset : offset + size])
            async with gate:
                resp = await self._call(
                    f"put (part {index + 1} of {len(offsets)})",
                    key,
                    lambda: client.upload_part(
                        Bucket=self.bucket,
                        Key=name,
                        UploadId=upload_id,
                        PartNumber=index + 1,
                        Body=body,
                    ),
                    size=len(body),
                )
            etags[index] = resp["ETag"]

        complete = {k: v for k, v in conditions.items() if k in ("IfNoneMatch", "IfMatch")}
        try:
            async with asyncio.TaskGroup() as group:
                for index, offset in enumerate(offsets):
                    group.create_task(part(index, offset))
            resp = await self._call(
                "put (complete multipart upload)",
                key,
                lambda: client.complete_multipart_upload(
                    Bucket=self.bucket,
                    Key=name,
                    UploadId=upload_id,
                    MultipartUpload={
                        "Parts": [{"ETag": e, "PartNumber": i + 1} for i, e in enumerate(etags)]
                    },
                    **complete,
                ),
                condition=condition,
                write=True,
            )
        except BaseException as exc:
            abort = self._abort(client, key, name, upload_id)
            if isinstance(exc, asyncio.CancelledError):
                self._background.spawn(abort)  # cancellation stays prompt; aclose() waits for it
            else:
                await abort
            if isinstance(exc, BaseExceptionGroup):
                # a part failed: raise its (already translated) error, not the group, with
                # its own cause (the backend's error; "from None" would drop it)
                first = exc.exceptions[0]
                while isinstance(first, BaseExceptionGroup):
                    first = first.exceptions[0]
                raise first from first.__cause__
            raise
        return str(resp["ETag"])

    async def _abort(self, client: Any, key: str, name: str, upload_id: str) -> None:
        with contextlib.suppress(Exception):
            await self._call(
                "abort multipart upload",
                key,
                lambda: client.abort_multipart_upload(
                    Bucket=self.bucket, Key=name, UploadId=upload_id
                ),
            )

    async def _get(self, key: str) -> GetResult:
        name = self._name(key)
        client = await self._open()

        async def get_object() -> tuple[bytes, str]:
            resp = await client.get_object(Bucket=self.bucket, Key=name)
            body = resp["Body"]
            try:
                data = await body.read()  # at the end of the reply, aiohttp reuses the connection
            except BaseException:
                body.close()  # a half-read reply must never go back to the connection pool
                raise
            if data[: len(HEADER_MAGIC)] == HEADER_MAGIC and len(data) >= HEADER_SIZE:
                data = data[HEADER_SIZE:]
            return data, str(resp["ETag"])

        data, etag = await self._call("get", key, get_object)
        return GetResult(data, etag)

    async def _delete(self, key: str, if_match: str | None) -> bool:
        name = self._name(key)
        client = await self._open()

        def delete(etag: str) -> Callable[[], Awaitable[Any]]:
            return lambda: client.delete_object(Bucket=self.bucket, Key=name, IfMatch=etag)

        if if_match is not None:
            condition = f"if-match delete {if_match}: the key is at another version"
            try:
                await self._call("delete", key, delete(if_match), condition=condition, write=True)
            except NotFound:
                return False
            except PreconditionFailed:
                # AWS answers 404 to a conditional delete of a missing key; SeaweedFS 412
                if await self._head(client, key, name) is None:
                    return False
                raise
            except OutcomeUnknown as exc:
                # a retry after an indeterminate attempt met a 412: from a missing key
                # (perhaps deleted by that attempt) it is the 404 that AWS would give
                cause = exc.__cause__
                if isinstance(cause, PreconditionFailed) and (
                    await self._head(client, key, name) is None
                ):
                    missing = NotFound(f"key {key!r} not found (the server answered 412)")
                    missing.__cause__ = cause
                    exc.__cause__ = missing
                raise
            return True
        for _ in range(16):
            try:
                head = await self._call(
                    "delete", key, lambda: client.head_object(Bucket=self.bucket, Key=name)
                )
                await self._call("delete", key, delete(str(head["ETag"])), write=True)
            except NotFound:
                return False
            except PreconditionFailed:
                continue  # replaced between the two requests: read the new version
            return True
        raise StorageUnavailable(  # pragma: no cover - needs 16 racing overwrites
            f"S3 delete of key {key!r}: the object kept changing under the delete"
        )

    async def _delete_many(self, keys: list[str]) -> int:
        """Delete ``keys`` with ``DeleteObjects``, 1000 a request (fewer when their names
        pass `MAX_DELETE_BODY`); return how many existed.

        ``DeleteObjects`` reports every key as deleted, whether it existed or
        not (only a versioned bucket tells them apart, by delete markers), so
        the keys that exist are found first, with their ETags, from a listing
        of the range that each request covers (``ListObjectsV2`` from its first
        key to its last, under their common prefix): about one listing request
        per 1000 keys when the keys are close together, as a run's are. Each
        listed key is then deleted on the condition of its listed ETag (the
        ``ETag`` of its ``Object``, as AWS documents conditional deletes): one
        deleted by someone else since fails with ``NoSuchKey`` and is not
        counted, so of this batch and a racing `delete` only one counts it; one
        written again since fails with ``PreconditionFailed`` and is deleted
        alone, as `delete` deletes. A server that ignores the condition (moto
        does) would delete such keys anyway and count them twice: the storage
        asks once, with a ``DeleteObjects`` of a name no key maps to under a
        made-up ETag (`_probe_delete_conditions`), and where the condition is
        ignored it deletes each listed key as `delete` does (a ``HeadObject``
        and a conditional ``DeleteObject``, 16 at a time). A key the listing did
        not see is deleted without a condition and not counted. Not atomic: on
        an error, any earlier chunk is deleted.
        """
        sent: list[bool] = []  # one entry once a delete request of this call has been issued
        try:
            return await self._delete_keys(keys, sent)
        except StorageClosed as exc:
            if not sent:
                raise
            # aclose() cut the batch off after some of its deletes had left: they may have
            # happened, and StorageClosed would say that none did
            raise OutcomeUnknown(
                f"S3 delete of {len(keys)} keys was cut off by aclose() after some of its "
                "deletes had been sent; they may have happened"
            ) from exc

    async def _delete_keys(self, keys: list[str], sent: list[bool]) -> int:
        """`_delete_many`'s work; appends to ``sent`` before it issues a ``DeleteObjects``
        request, and once a delete of a key alone has happened."""
        client = await self._open()
        names = {key: self._name(key) for key in keys}
        ordered = sorted(set(keys))
        existed = 0
        if self._delete_conditions is None:
            self._delete_conditions = await self._probe_delete_conditions(client)
        honoured = self._delete_conditions
        cut = len(self._root)
        for chunk in delete_batches(ordered, names):
            etags = await self._existing(chunk)
            # Where conditions hold, every key in one request, each listed one on its
            # ETag; else the unlisted keys only, and each listed one as `delete` deletes it.
            objects = [
                {"Key": names[key], "ETag": etags[key]} if key in etags else {"Key": names[key]}
                for key in chunk
                if honoured or key not in etags
            ]
            if objects:
                sent.append(True)
            errors = await self._delete_objects(client, objects) if objects else []
            alone = [] if honoured else [key for key in chunk if key in etags]
            gone = 0
            failed: list[dict[str, Any]] = []
            for error in errors:
                key = self._decode(str(error.get("Key", ""))[cut:])
                code = error.get("Code", "")
                if key in etags and code == "PreconditionFailed":
                    alone.append(key)  # written again since the listing
                elif key in etags and code == "NoSuchKey":
                    gone += 1  # deleted by someone else since the listing
                else:
                    failed.append(error)
            if failed:
                self._raise_failed_deletes(failed, len(objects))
            existed += len(etags) - len(alone) - gone  # deleted by this request, on its ETag
            for start in range(0, len(alone), 16):
                found = await asyncio.gather(
                    *(self._delete(key, None) for key in alone[start : start + 16]),
                    return_exceptions=True,  # none left running when one fails
                )
                if any(f is True for f in found):
                    # these deletes happened; one that raised StorageClosed deleted nothing
                    # (aclose() began before its request: one ended after it was sent
                    # raises OutcomeUnknown), so none of them marks the call before this
                    sent.append(True)
                failed_alone = [f for f in found if isinstance(f, BaseException)]
                if failed_alone:  # one whose outcome is unknown first: it may have happened
                    raise next(
                        (f for f in failed_alone if isinstance(f, OutcomeUnknown)),
                        failed_alone[0],
                    )
                existed += sum(f for f in found if isinstance(f, bool))
        return existed

    async def _delete_objects(
        self, client: Any, objects: list[dict[str, str]], op: str | None = None
    ) -> list[dict[str, Any]]:
        """Send one ``DeleteObjects`` of ``objects`` (quiet); return its error entries.

        A request that deletes on ETags is not repeated after an attempt whose outcome
        is unknown (`OutcomeUnknown` at once): the repeat's ``NoSuchKey`` entries could
        be the first attempt's own deletes, and the key would go uncounted (the suite's
        lost-reply test caught it on SeaweedFS). Its per-key answers are entries of a
        reply, not errors, so the retry policy cannot turn them into ``OutcomeUnknown``
        as it does a single delete's 404."""

        async def delete_objects() -> Any:
            return await client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True}
            )

        resp = await self._call(
            op or f"delete of {len(objects)} keys",
            None,
            delete_objects,
            write=True,
            repeatable=not any("ETag" in entry for entry in objects),
        )
        return list(resp.get("Errors") or [])

    def _raise_failed_deletes(self, failed: list[dict[str, Any]], total: int) -> NoReturn:
        """Raise the translated error of the first of a ``DeleteObjects``'s failed entries,
        naming its key."""
        first = failed[0]
        key = self._decode(str(first.get("Key", ""))[len(self._root) :])
        error = bexc.ClientError(
            {"Error": {"Code": first.get("Code", ""), "Message": first.get("Message", "")}},
            "DeleteObjects",
        )
        with self._translate_errors(f"delete ({len(failed)} of {total} failed)", key):
            raise error
        raise AssertionError("unreachable: _translate_errors raises")  # pragma: no cover

    async def _probe_delete_conditions(self, client: Any) -> bool:
        """Whether ``DeleteObjects`` keeps an object whose ``ETag`` condition fails: asked
        with a name under the root that no key maps to (keys never hold ``\x7f``), whose
        object does not exist, under a made-up ETag. A server that honours the condition
        answers that entry with an error (``NoSuchKey``, or ``PreconditionFailed``); one
        that ignores it reports it deleted, and deletes nothing (there is nothing)."""
        probe = f"{self._root}\x7fcheckpointkit-delete-condition-{secrets.token_hex(8)}"
        errors = await self._delete_objects(
            client, [{"Key": probe, "ETag": '"0"'}], "delete (a probe of conditional deletes)"
        )
        codes = {str(error.get("Code", "")) for error in errors}
        return bool(codes & {"NoSuchKey", "PreconditionFailed"})

    async def _existing(self, chunk: list[str]) -> dict[str, str]:
        """The keys of ``chunk`` (sorted) that exist, with their ETags, from one listing of
        their range."""
        wanted = set(chunk)
        last = chunk[-1]
        common = 0  # the keys' common prefix (character-wise): that of the first and the last
        while common < min(len(chunk[0]), len(last)) and chunk[0][common] == last[common]:
            common += 1
        prefix = last[:common]
        # start just before the first key: its parent string sorts before it
        start_after: str | None = chunk[0][:-1] or None
        found: dict[str, str] = {}
        cursor: Any = None
        first = True
        while first or cursor is not None:
            page, etags = await self._list_objects(prefix, start_after, cursor, self._page_size)
            first, cursor = False, page.cursor
            found.update(
                (key, etag) for key, etag in zip(page.keys, etags, strict=True) if key in wanted
            )
            if page.keys and page.keys[-1] >= last:
                break
        return found

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        page, _ = await self._list_objects(prefix, start_after, cursor, limit)
        return page

    async def _list_objects(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> tuple[ListPage, list[str]]:
        """A page of the listing (see `_list_page`) and the ETag of each of its keys."""
        client = await self._open()
        root = self._root
        args: dict[str, Any] = {
            "Bucket": self.bucket,
            "Prefix": root + self._encode(prefix),
            "MaxKeys": min(limit, self._page_size),
        }
        # the cursor: S3's continuation token, and the last key listed so far
        bound = start_after
        if cursor is not None:
            args["ContinuationToken"], bound = cursor
        elif start_after is not None:
            args["StartAfter"] = root + self._encode(start_after)
        resp = await self._call(
            f"list of prefix {prefix!r}", None, lambda: client.list_objects_v2(**args)
        )
        cut = len(root)
        contents = resp.get("Contents", ())
        keys = [self._decode(obj["Key"][cut:]) for obj in contents]
        etags = [str(obj.get("ETag", "")) for obj in contents]
        self._check_order(prefix, bound, "start_after" if cursor is None else "the last key", keys)
        more = resp.get("IsTruncated") and resp.get("NextContinuationToken")
        if not more:
            return ListPage(keys, None), etags
        return ListPage(keys, (resp["NextContinuationToken"], keys[-1] if keys else bound)), etags

    def _check_order(self, prefix: str, bound: str | None, what: str, keys: list[str]) -> None:
        """Refuse a page that leaves the prefix or is not in ascending order after ``bound``.

        S3 lists in ascending UTF-8 byte order (the order of Python's ``str``),
        after ``StartAfter`` and after the previous page. A server that lists
        otherwise (SeaweedFS walks its directories: ``a/-`` before ``a b``)
        would make every ordered use of the listing wrong without a sign, the
        checkpoint store's among them; so it is an error, raised here.

        Args:
            prefix: the listing's prefix.
            bound: the key that every key of the page must follow (the
                ``start_after`` of the first page, the last key of the
                previous one), or None.
            what: names ``bound`` in the message.
            keys: the page's keys, as the server ordered them.

        Raises:
            StorageUnavailable: the server listed out of order or outside the prefix.
        """
        where = f"S3 list of prefix {prefix!r} on bucket {self.bucket!r}" + (
            f" at {self.endpoint_url}" if self.endpoint_url else ""
        )
        previous = bound
        for index, key in enumerate(keys):
            if not key.startswith(prefix):
                raise StorageUnavailable(
                    f"{where}: the server returned {key!r}, which is outside the prefix"
                )
            if previous is not None and key <= previous:
                found = (
                    f"{key!r} after {previous!r}"
                    if index
                    else f"{key!r}, which does not come after {what} {bound!r}"
                )
                advice = (
                    "; open the storage with object_names='flat' (see docs/adapters/s3.md) to "
                    "keep every object in one directory, which such a server lists in byte order"
                    if not self._flat
                    else ""
                )
                raise StorageUnavailable(
                    f"{where}: the server listed {found}, out of the ascending byte order that "
                    "S3 promises, so the listing cannot be used. A server that lists in "
                    f"directory-walk order (SeaweedFS does) lists 'a/-' before 'a b'{advice}"
                )
            previous = key


async def _set_up(opening: Awaitable[T]) -> tuple[T, asyncio.CancelledError | None]:
    """Await the client's set-up to its end, even when the caller is cancelled meanwhile;
    return it and the caller's cancellation, to raise once the client is kept.

    The set-up is local (no request is sent) and opens an aiohttp session: cut off
    halfway, that session would be left unclosed. So a cancellation waits for the set-up,
    which ``aclose()`` then closes (found by the conformance suite's model group, which
    cancels the first call of a fresh storage).
    """
    task = asyncio.ensure_future(opening)
    interrupted: asyncio.CancelledError | None = None
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError as exc:
            if task.done():
                raise
            interrupted = exc
    return result, interrupted


# -- helpers -------------------------------------------------------------------------------


class _CaLoadedOnce(ssl.SSLContext):
    """botocore's SSL context for the clients of the process that verify servers with one
    set of CA certificates and present no certificate of their own: it loads them once.

    aiobotocore made a context per client and parsed the CA bundle into it when the client
    sent its first request: 30 ms of CPU per storage (312 of the 33 ms loads in a profile
    of the S3 conformance tests on SeaweedFS, 5% of their time). A context is made to be
    shared by connections, and this one only ever holds that one set of CAs.
    """

    def load_verify_locations(
        self, cafile: Any = None, capath: Any = None, cadata: Any = None
    ) -> None:
        """Load the CA certificates, unless this context has loaded these already."""
        loaded: set[tuple[Any, Any, Any]] = self.__dict__.setdefault("_loaded", set())
        if (cafile, capath, cadata) in loaded:
            return
        super().load_verify_locations(cafile, capath, cadata)
        loaded.add((cafile, capath, cadata))


_ca_contexts: dict[str, _CaLoadedOnce] = {}  # by the CA bundle's path
_ca_lock = threading.Lock()  # storages may open on several event loops, in several threads


class _TrackingSession(AIOHTTPSession):  # type: ignore[misc]
    """aiobotocore's aiohttp session, its connector wrapped by ``track_connections``.

    So that a write cancelled while on the wire can be settled or reset
    (`checkpointkit.adapters._inflight`), and that aiohttp never resends a
    write unseen (`no_hidden_resend`). Once closed, it refuses requests:
    aiobotocore would open a new aiohttp session for a request sent after the
    client was closed, which nothing closes, and send the request on it.
    """

    _closed = False

    async def _get_session(self, *args: Any, **kwargs: Any) -> Any:
        if self._closed:
            raise aiohttp.ClientConnectionError("the S3 client was closed")
        return no_hidden_resend(await super()._get_session(*args, **kwargs))

    async def __aexit__(self, *exc_info: object) -> None:
        self._closed = True
        await super().__aexit__(*exc_info)

    _shared_ca: str | None = None  # the CA bundle of the connector being made, if shared

    def _get_ssl_context(self) -> Any:
        if self._shared_ca is None:
            return super()._get_ssl_context()
        with _ca_lock:
            context = _ca_contexts.get(self._shared_ca)
            if context is None:
                made = super()._get_ssl_context()  # botocore's settings, as they are
                made.__class__ = _CaLoadedOnce  # the same object, loading its CAs once
                made.load_verify_locations(self._shared_ca, None, None)
                context = _ca_contexts[self._shared_ca] = made
            return context

    def _create_connector(self, *args: Any, **kwargs: Any) -> Any:
        # share the SSL context where it is botocore's plus the CA bundle and nothing more:
        # no proxy (whose own CA and certificate go into it), no client certificate
        proxy_url = args[0] if args else kwargs.get("proxy_url")
        if not proxy_url and self._cert_file is None and self._verify:
            self._shared_ca = get_cert_path(self._verify) or None
        try:
            made = super()._create_connector(*args, **kwargs)
        finally:
            self._shared_ca = None
        if inspect.isawaitable(made):  # some aiobotocore versions build it asynchronously

            async def tracked() -> Any:
                return track_connections(await made)

            return tracked()
        return track_connections(made)


_RULE_PARAMETER = re.compile(r"\{(\w+)")
"""A parameter named in a rule's template string (``"https://{Bucket}.{url#authority}"``)."""


def _rule_parameters(node: object, found: set[str]) -> set[str]:
    """Every parameter that the rules under ``node`` read: as a ``{"ref": name}`` argument
    or in a template string."""
    if isinstance(node, dict):
        ref = node.get("ref")
        if isinstance(ref, str):
            found.add(ref)
        for value in node.values():
            _rule_parameters(value, found)
    elif isinstance(node, list):
        for value in node:
            _rule_parameters(value, found)
    elif isinstance(node, str):
        found.update(_RULE_PARAMETER.findall(node))
    return found


_RULES_READ: list[tuple[object, frozenset[str]]] = []
"""The rules last walked and the parameters they read: the walk of S3's rules takes about
3 ms, and every storage of the process shares one loader, which parses the rules once."""


def _parameters_read(rules: object) -> frozenset[str]:
    for walked, read in _RULES_READ:
        if walked is rules:
            return read
    read = frozenset(_rule_parameters(rules, set()))
    _RULES_READ[:] = [(rules, read)]
    return read


def _resolve_endpoints_per_bucket(client: Any, loader: Any) -> None:
    """Let botocore resolve an operation's endpoint once per bucket, not once per key.

    botocore caches the endpoint that its S3 rules give for each set of parameters it
    passes them. The set includes ``Key``, ``Prefix`` and ``CopySource``, which S3's rules
    declare and never read, so every new key missed the cache and evaluated the rules
    again. The client passes only the parameters that the rules read, so the endpoint is
    the same by construction, and a put, a get and a listing of a new 1 KiB key take about
    0.85 of the client CPU they took (``benchmarks/s3_endpoint_rules.py``). botocore's pull
    request 3692 makes the same change upstream; aioboto3 15.5.0, the newest, allows
    botocore up to 1.40.61, before it. A client without the resolver's parameter table is
    left as it is.
    """
    resolver: Any = getattr(client, "_ruleset_resolver", None)
    definitions = getattr(resolver, "_param_definitions", None)
    if not isinstance(definitions, dict):
        return
    read = _parameters_read(loader.load_service_model("s3", "endpoint-rule-set-1")["rules"])
    resolver._param_definitions = {
        name: definition for name, definition in definitions.items() if name in read
    }


def _expect_only_large_bodies(request: Any, **_: Any) -> None:
    """Send small bodies at once, without ``Expect: 100-continue`` (one round trip less).

    botocore asks for the server's go-ahead before every ``PutObject`` and
    ``UploadPart`` body; that saves bandwidth when a large upload is refused,
    and costs a round trip for a small one.
    """
    headers = request.headers
    if "Expect" in headers:
        try:
            length = int(headers.get("Content-Length", -1))
        except (TypeError, ValueError):
            return
        if 0 <= length <= EXPECT_CONTINUE_ABOVE:
            del headers["Expect"]


def _code(exc: BaseException | None) -> str:
    if isinstance(exc, bexc.ClientError):
        error = exc.response.get("Error", {})
        return str(error.get("Code", "") or _status(exc))
    return ""


def _status(exc: bexc.ClientError) -> int:
    meta = exc.response.get("ResponseMetadata", {})
    return int(meta.get("HTTPStatusCode", 0) or 0)


def _is_missing_bucket(exc: BaseException | None) -> bool:
    return isinstance(exc, bexc.ClientError) and (
        _code(exc) in ("NoSuchBucket", "404", "NotFound") or _status(exc) == 404
    )


def _is_transient(exc: BaseException | None) -> bool:
    """Whether a retry may succeed: connection errors, timeouts, 5xx, throttling."""
    if isinstance(exc, bexc.ClientError):
        return _code(exc) in _TRANSIENT_CODES or _status(exc) >= 500 or _status(exc) == 429
    return isinstance(exc, _TRANSIENT_ERRORS)
