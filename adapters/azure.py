"""The Azure Blob adapter: ``az://container/prefix`` on ``azure.storage.blob.aio``.

Each key is the block blob ``prefix/key`` of the container (one to one).
Versions are ETags, which change on every write. Conditional writes are the
service's own: create-only sends ``If-None-Match: *``, if-match sends
``If-Match: <etag>``, on ``Put Blob`` and on ``Put Block List``; a failed
condition (409 ``BlobAlreadyExists``, 412 ``ConditionNotMet``) raises
`PreconditionFailed`. Values above
``block_threshold`` are staged as blocks (``Put Block``) and committed with the
condition in one ``Put Block List``, so a reader never sees a part.

One client per storage, opened on first use and closed by ``aclose()``. The
storage retries transient failures itself (connection errors, timeouts, 5xx,
throttling) with exponential backoff and jitter until its ``timeout``; the
SDK's own retries are off, so that one policy holds and a conditional write
retried after a lost reply can recognize its own success (each conditional
write carries a random token in its metadata, checked when a retried write
meets a failed condition). A write that fails after its request may have left the
client (a timeout, a lost reply, a 500) raises
`OutcomeUnknown`, and so does a retry's failure after
such an attempt (see `checkpointkit.adapters._retry`). ``delete_many`` sends
blob batch requests of 256 deletes.

See ``docs/adapters/azure.md`` for the URL, the options, the costs and the
consistency notes.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import math
import os
import re
import secrets
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from typing import Any, ClassVar, NoReturn, TypeVar
from urllib.parse import urlsplit, urlunsplit

from ..errors import (
    ConfigurationError,
    InvalidKey,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    StorageClosed,
    StorageUnavailable,
)
from ..storage import Capabilities, GetResult, IfMatch, ListPage, PutMode, StorageBase
from ..versions import entity_tag
from ._inflight import Background, CallsUnderWay, no_hidden_resend, track_connections
from ._options import SECRETS, Options, UrlForm
from ._retry import RetryPolicy, call

try:
    import aiohttp
    from azure.core import MatchConditions
    from azure.core import exceptions as aexc
    from azure.core.pipeline.transport import AioHttpTransport
    from azure.storage.blob import BlobBlock
    from azure.storage.blob.aio import ContainerClient
except ImportError as _exc:  # pragma: no cover - exercised without the extra
    raise ConfigurationError(
        f"the azure adapter needs azure-storage-blob and aiohttp ({_exc}); install them with: "
        'pip install "checkpointkit[azure]"'
    ) from _exc

__all__ = ["AzureBlobStorage"]

T = TypeVar("T")

KiB = 1024
MiB = 1024 * KiB

MAX_BLOCKS = 50_000
MAX_BLOCK_SIZE = 4000 * MiB
MAX_PAGE = 5000
MAX_DELETE_BATCH = 256
"""The most sub-requests in one blob batch request."""
STREAM_ABOVE = 1 * MiB
"""Request bodies larger than this are sent from a stream (see ``_body``)."""
READ_BLOCK_SIZE = 256 * KiB
"""Block size of streamed replies (the Storage SDK's own default)."""
DELETE_ROUNDS = 8
"""The most rounds of a plain ``delete``: each reads the blob's ETag, then deletes on it; a
blob written again between the two (412) takes another round. After this many, the delete
raises ``StorageUnavailable`` (it did nothing) instead of running on without a bound."""

ENV_CONNECTION_STRING = "AZURE_STORAGE_CONNECTION_STRING"
ENV_ACCOUNT_KEY = "AZURE_STORAGE_KEY"
ENV_SAS_TOKEN = "AZURE_STORAGE_SAS_TOKEN"

_TOKEN_META = "checkpointkit_write"
"""Metadata name of the random token that a conditional write carries (a C# identifier)."""

_CONDITION_CODES = frozenset(("ConditionNotMet", "BlobAlreadyExists", "TargetConditionNotMet"))
_CREDENTIAL_CODES = frozenset(
    (
        "AuthenticationFailed",
        "InvalidAuthenticationInfo",
        "NoAuthenticationInformation",
        "AuthorizationFailure",
    )
)
_DENIED_CODES = frozenset(
    (
        "AuthorizationPermissionMismatch",
        "AuthorizationResourceTypeMismatch",
        "AuthorizationServiceMismatch",
        "AuthorizationProtocolMismatch",
        "AuthorizationSourceIPMismatch",
        "InsufficientAccountPermissions",
        "AccountIsDisabled",
    )
)
_KEY_CODES = frozenset(("InvalidResourceName", "OutOfRangeInput", "InvalidUri"))
_TRANSIENT_CODES = frozenset(
    ("ServerBusy", "InternalError", "OperationTimedOut", "ServiceUnavailable")
)
_TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    aexc.ServiceRequestError,
    aexc.ServiceResponseError,
    aexc.IncompleteReadError,
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    ConnectionError,
    TimeoutError,
)

_LOST = (TimeoutError, aexc.ServiceRequestError, aexc.ServiceResponseError, aiohttp.ClientError,
         OSError)  # fmt: skip
"""Errors of a request without a (whole) answer."""
_UNKNOWN_STATUS = frozenset((500, 502, 504))
"""Answers to a write that do not say whether it happened (503 and 429 say it did not)."""

_CONTAINER = re.compile(r"^(?:\$root|[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62})$")
_NOT_XML = re.compile("[\ufffe\uffff]")
_SECRET_PARAMS = frozenset(
    ("credential", "connection_string", "account_key", "sas_token", "key", "secret",
     "password", "token", "sig")
)  # fmt: skip
_OPTS = Options(
    "Azure",
    ints=("block_threshold", "block_size", "max_concurrency", "retries", "page_size"),
    floats=("timeout", "connect_timeout", "read_timeout", "retry_backoff", "retry_backoff_max",
            "cancel_grace"),
    strs=("account_url",),
    bools=("create",),
)  # fmt: skip
_URL_PARAMS = _OPTS.url_params
_OPTIONS = frozenset((*_URL_PARAMS, "prefix", "connection_string", "credential", "endpoint"))

_URL_FORM = UrlForm(
    kind="Azure Blob",
    schemes=("az", "azure"),
    container="container",
    example="az://container/prefix",
    credentials="credentials do not belong in an az:// URL: pass connection_string or "
    "credential as options, or use the environment",
    secret_params=_SECRET_PARAMS,
    secret_hint="through the environment",
)


class AzureBlobStorage(StorageBase):
    """A storage on an Azure Blob Storage container, through ``azure.storage.blob.aio``.

    Open it with `from_url` (``az://container/prefix?account_url=...``)
    or construct it; use it with ``async with``. Give exactly one way in: a
    connection string (option or ``AZURE_STORAGE_CONNECTION_STRING``), or an
    account URL with a credential (an account key, a SAS token, an
    ``AzureNamedKeyCredential``, ``AzureSasCredential`` or token credential;
    or ``AZURE_STORAGE_KEY`` / ``AZURE_STORAGE_SAS_TOKEN``), or an account URL
    that carries a SAS. Credentials are never printed.

    Args:
        container: the container name.
        prefix: a name prefix inside the container: every key is stored as
            ``prefix/key``. Empty: keys are blob names.
        connection_string: an Azure Storage connection string.
        account_url: ``https://<account>.blob.core.windows.net`` (or an
            emulator's ``http://127.0.0.1:10000/devstoreaccount1``).
        credential: the credential for ``account_url``. A token credential
            (``azure.identity.aio``) is used, not closed, by the storage.
        endpoint: ``(host, port)`` or ``"host:port"`` replacing the host and
            port of the account URL (to put a proxy in between).
        create: create the container on first use if it does not exist.
        block_threshold: values larger than this many bytes are staged as
            blocks and committed as a block list (default and most: 1 MiB;
            the SDK sends a single ``Put Blob`` as one buffer, which aiohttp
            warns against above 1 MiB, while blocks are streamed).
        block_size: the size of one staged block (default 8 MiB; grown when a
            value would need more than 50,000 blocks).
        max_concurrency: blocks of one value staged at once (default 4).
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
        page_size: names fetched per ``List Blobs`` request (1 to 5000).
        cancel_grace: when a ``put`` or ``delete`` is cancelled while its
            request is on the wire, the seconds it may still take to finish
            before its connection is reset (default 0.25; 0: reset at once).
            The ``CancelledError`` is raised once the write has settled, so a
            write whose reply arrives in time cannot land later (see the
            documentation). Keep it below the runner's ``cancel_timeout``.

    Raises:
        ConfigurationError: a bad container name, prefix, option, connection
            string, or not exactly one way in.
    """

    capabilities: ClassVar[Capabilities] = Capabilities(
        conditional_put=True, conditional_delete=True, durable=True, shared=True, ttl=False
    )

    def __init__(
        self,
        container: str,
        prefix: str = "",
        *,
        connection_string: str | None = None,
        account_url: str | None = None,
        credential: Any = None,
        endpoint: tuple[str, int] | str | None = None,
        create: bool = False,
        block_threshold: int = 1 * MiB,
        block_size: int = 8 * MiB,
        max_concurrency: int = 4,
        timeout: float = 30.0,
        connect_timeout: float | None = None,
        read_timeout: float | None = None,
        retries: int = 4,
        retry_backoff: float = 0.1,
        retry_backoff_max: float = 2.0,
        page_size: int = MAX_PAGE,
        cancel_grace: float = 0.25,
    ) -> None:
        self._closed = False
        if not isinstance(container, str) or not _CONTAINER.match(container):
            raise ConfigurationError(
                f"invalid Azure container name {container!r}: use 3 to 63 lowercase letters, "
                "digits and single hyphens, starting and ending with a letter or digit"
            )
        self.container = container
        self.prefix = _check_prefix(prefix)
        self._root = f"{self.prefix}/" if self.prefix else ""
        self._create = _OPTS.check_bool("create", create)
        self._threshold = _OPTS.check_int("block_threshold", block_threshold, 1)
        if self._threshold > STREAM_ABOVE:
            raise ConfigurationError(
                f"Azure option block_threshold must be at most {STREAM_ABOVE} (1 MiB), not "
                f"{block_threshold}: the SDK sends a single Put Blob as one buffer"
            )
        self._block_size = _OPTS.check_int("block_size", block_size, 1)
        if self._block_size > MAX_BLOCK_SIZE:
            raise ConfigurationError(f"Azure option block_size must be at most {MAX_BLOCK_SIZE}")
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
        if self._page_size > MAX_PAGE:
            raise ConfigurationError(
                f"Azure option page_size must be at most {MAX_PAGE}, not {page_size}"
            )
        self._cancel_grace = _OPTS.check_float("cancel_grace", cancel_grace, zero=True)
        self._background = Background()
        self._under_way = CallsUnderWay()
        self._client = self._make_client(connection_string, account_url, credential, endpoint)
        self.account_url = _strip_query(self._client.primary_endpoint).rsplit("/", 1)[0]
        self._entered = False  # the client's session is open
        self._opened = False  # ... and the container exists (when create=True)
        self._open_lock = asyncio.Lock()

    def _make_client(
        self,
        connection_string: str | None,
        account_url: str | None,
        credential: Any,
        endpoint: tuple[str, int] | str | None,
    ) -> ContainerClient:
        options: dict[str, Any] = {
            "retry_total": 0,  # the storage retries (see the module documentation)
            "connection_timeout": self._policy.connect_timeout,
            "read_timeout": self._policy.read_timeout,
            "max_single_put_size": max(self._threshold, 1),
            "max_single_get_size": 64 * MiB,
            "max_chunk_get_size": 8 * MiB,
            # the SDK's own transport, its connector tracked for cancelled writes (_inflight)
            "transport": _TrackingTransport(
                connection_timeout=self._policy.connect_timeout,
                read_timeout=self._policy.read_timeout,
                connection_data_block_size=READ_BLOCK_SIZE,
            ),
        }
        if connection_string is None and account_url is None:
            connection_string = os.environ.get(ENV_CONNECTION_STRING) or None
            if connection_string is None:
                raise ConfigurationError(
                    "Azure Blob storage needs a connection string (option connection_string or "
                    f"${ENV_CONNECTION_STRING}) or an account_url (URL parameter or option)"
                )
        _register_secrets(connection_string, account_url, credential)
        if connection_string is not None and account_url is not None:
            raise ConfigurationError(
                "give either an Azure connection string or an account_url, not both"
            )
        if connection_string is not None:
            if credential is not None:
                raise ConfigurationError(
                    "an Azure connection string carries its credential: do not pass credential"
                )
            if not isinstance(connection_string, str) or not connection_string.strip():
                raise ConfigurationError("the Azure connection string must be a non-empty str")
            try:
                client = ContainerClient.from_connection_string(
                    connection_string, self.container, **options
                )
            except (ValueError, TypeError, KeyError) as exc:
                raise ConfigurationError(
                    f"bad Azure connection string ({type(exc).__name__}); expected "
                    "'DefaultEndpointsProtocol=...;AccountName=...;AccountKey=...' or a "
                    "BlobEndpoint with a SharedAccessSignature"
                ) from None
            if endpoint is None:
                return client
            account_url = _strip_query(client.url).rsplit("/", 1)[0]
            credential = client.credential
            query = urlsplit(client.url).query  # a SAS from the connection string
            if query:
                account_url = f"{account_url}?{query}"
        assert account_url is not None
        _OPTS.check_http_url(
            "account_url", account_url, "use https://<account>.blob.core.windows.net"
        )
        if endpoint is not None:
            account_url = _OPTS.replace_endpoint(account_url, endpoint)
        if credential is None:
            credential = os.environ.get(ENV_ACCOUNT_KEY) or os.environ.get(ENV_SAS_TOKEN) or None
            _register_secrets(None, None, credential)
        try:
            return ContainerClient(account_url, self.container, credential=credential, **options)
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(
                f"the Azure client refused the account URL or credential ({type(exc).__name__})"
            ) from None

    # -- construction ------------------------------------------------------------------
    @classmethod
    def from_url(cls, url: str, **options: Any) -> AzureBlobStorage:
        """Open ``az://container[/prefix][?param=value&...]`` (``azure://`` too).

        Parameters: ``account_url``, ``create`` (true/false),
        ``block_threshold``, ``block_size`` (bytes), ``max_concurrency``,
        ``timeout``, ``connect_timeout``, ``read_timeout``, ``retry_backoff``,
        ``retry_backoff_max``, ``cancel_grace`` (seconds), ``retries``,
        ``page_size``. Without
        ``account_url``, the connection string comes from the option or
        ``AZURE_STORAGE_CONNECTION_STRING``. Credentials never go in the URL:
        give them as keyword ``options`` (``connection_string``,
        ``credential``) or through the environment. Keyword ``options`` take
        the constructor's arguments and override the URL.

        Raises:
            ConfigurationError: not an az URL, a credential in the URL, an
                unknown or malformed parameter or option.
        """
        return cls(**_OPTS.read_url(url, options, _OPTIONS, _URL_FORM, _parse_param))

    def __repr__(self) -> str:
        return (
            f"AzureBlobStorage(container={self.container!r}, prefix={self.prefix!r}, "
            f"account_url={self.account_url!r})"
        )

    @property
    def client(self) -> ContainerClient:
        """The underlying ``ContainerClient`` (for diagnostics; do not close it)."""
        return self._client

    # -- the client --------------------------------------------------------------------
    async def _open(self) -> ContainerClient:
        if self._opened:
            return self._client
        async with self._open_lock:
            self._check_open()
            if not self._opened:
                if not self._entered:
                    SECRETS.install("azure")  # the SDK redacts; this is a second line of defence
                    with self._translate_errors("open", None):
                        await self._client.__aenter__()
                    self._entered = True
                if self._create:
                    await self._ensure_container()
                # Only now: a call that finds _opened set must find the container too.
                self._opened = True
        # A call that waited here while aclose() began must not go on: aclose() waits for
        # calls under way only, and then closes the client.
        self._check_open()
        return self._client

    async def _ensure_container(self) -> None:
        client = self._client
        try:
            await self._call("create container", None, lambda: client.create_container())
        except (StorageUnavailable, ConfigurationError, PreconditionFailed) as exc:
            cause = exc.__cause__
            if isinstance(cause, aexc.ResourceExistsError) or _code(cause) in (
                "ContainerAlreadyExists",
                *_DENIED_CODES,  # a SAS for the container only: it may well exist; go on
            ):
                return
            raise

    async def _aclose(self) -> None:
        try:
            # Calls in flight end first, each by its own deadline (`timeout` plus a
            # second per MiB of its body), and none retries once closed: closed under a
            # request, the client would cut it off on the wire, where the service may
            # still apply it after aclose() returned.
            await self._under_way.ended()
            # writes that ignored their cancellation: one request's time, then stop them
            await self._background.wait(self._policy.connect_timeout)
        finally:
            async with self._open_lock:
                await self._client.close()

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
        """Turn Azure SDK and aiohttp errors into checkpointkit errors, the cause chained.

        Args:
            op: what was being done (``"get"``, ``"put"``...), for the message.
            key: the storage key concerned, if any (named in the message).
            condition: the put's or delete's condition, named when it fails.
            sent: for a write, tells whether its request may have left the
                client (it was handed a connection); None for a read.

        Raises:
            NotFound: no such blob.
            PreconditionFailed: 409 ``BlobAlreadyExists``, 412 ``ConditionNotMet``.
            InvalidKey: the service refused the blob name.
            ConfigurationError: a missing container (with the ``create=True``
                hint), rejected credentials, an authorization failure.
            StorageClosed: the storage was closed while the call ran.
            OutcomeUnknown: a write whose request may have left got no definite
                answer: a timeout, a lost connection or reply, HTTP 500
                (``OperationTimedOut`` included), 502 or 504. It may have
                happened, or may still happen.
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
        what = f"Azure {op} of key {key!r}" if key is not None else f"Azure {op}"
        where = f"container {self.container!r} at {self.account_url}"
        unknown = "its request was sent, so it may have happened, or may still happen"
        if self._closed and (  # not the service's answer
            not isinstance(exc, aexc.HttpResponseError) or isinstance(exc, aexc.IncompleteReadError)
        ):
            if sent:  # cut off on the wire by the closing client
                raise OutcomeUnknown(
                    f"{what} was cut off: the storage was closed; {unknown}"
                ) from exc
            raise StorageClosed(f"{what} failed: the storage was closed") from exc
        if isinstance(exc, aexc.IncompleteReadError):  # an HttpResponseError, but transient
            if sent:
                raise OutcomeUnknown(
                    f"{what}: the reply from {where} was cut ({type(exc).__name__}); {unknown}"
                ) from exc
            raise StorageUnavailable(f"{what} failed on {where}: {type(exc).__name__}") from exc
        if isinstance(exc, aexc.HttpResponseError):
            code = _code(exc)
            status = exc.status_code or 0
            if code == "ContainerNotFound":
                raise ConfigurationError(
                    f"Azure {where} does not exist: create it, or pass create=True "
                    "(?create=true in the URL) to create it on first use"
                ) from exc
            if (
                code in _CONDITION_CODES
                or status == 412
                or (status == 409 and condition and not code)
            ):
                cond = f" ({condition})" if condition else ""
                raise PreconditionFailed(
                    f"key {key!r}: the condition failed{cond}"
                    if key is not None
                    else f"{what}: the condition failed{cond}"
                ) from exc
            if code == "BlobNotFound" or status == 404:
                if key is None:
                    raise ConfigurationError(
                        f"Azure {where} does not exist: create it, or pass create=True "
                        "(?create=true in the URL) to create it on first use"
                    ) from exc
                raise NotFound(f"key {key!r} not found") from exc
            if code in _CREDENTIAL_CODES or isinstance(exc, aexc.ClientAuthenticationError):
                raise ConfigurationError(
                    f"Azure rejected the credentials ({code or status}) for {where}: "
                    "check the account key, SAS token or connection string"
                ) from exc
            if code in _DENIED_CODES or status == 403:
                raise ConfigurationError(
                    f"{what}: access denied ({code or status}) to {where}: "
                    "check the credential's permissions"
                ) from exc
            if code in _KEY_CODES and key is not None:
                raise InvalidKey(
                    f"invalid key {key!r}: Azure refused the blob name with the prefix "
                    f"{self.prefix!r} ({code})"
                ) from exc
            if code == "InvalidResourceName":
                raise ConfigurationError(f"Azure refused the container name {self.container!r}")
            if sent and (status in _UNKNOWN_STATUS or code == "OperationTimedOut"):
                raise OutcomeUnknown(
                    f"{what} failed: {code or 'error'} (HTTP {status}) on {where}; {unknown}"
                ) from exc
            raise StorageUnavailable(f"{what} failed: {code or 'error'} (HTTP {status})") from exc
        if sent and isinstance(exc, _LOST):
            # an answer that never came, or came cut: the server may hold the whole request
            lost = f"lost ({type(exc).__name__})"
            detail = "timed out" if isinstance(exc, TimeoutError) else lost
            raise OutcomeUnknown(f"{what} {detail} on {where}; {unknown}") from exc
        if isinstance(exc, aexc.ServiceRequestError):
            raise StorageUnavailable(f"{what} failed: cannot connect to {where}") from exc
        if isinstance(exc, aexc.ServiceResponseError | TimeoutError):
            raise StorageUnavailable(f"{what} failed: no (whole) reply from {where}") from exc
        if isinstance(
            exc, aexc.ClientAuthenticationError
        ):  # pragma: no cover - an HttpResponseError
            raise ConfigurationError(f"Azure authentication failed for {where}") from exc
        if isinstance(exc, aexc.AzureError | aiohttp.ClientError | OSError):
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
        history: list[Exception] | None = None,
    ) -> T:
        """Run ``request`` with retries and backoff for transient failures, errors translated.

        A ``write`` (``Put Blob``, ``Put Block List``, ``Delete Blob``, a batch)
        cancelled while its request is on the wire settles first: see
        `settle` and ``cancel_grace``.
        ``history`` receives each failed attempt's error (see
        `call`).
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
            history=history,
            closed=lambda: self._closed,
            under_way=self._under_way,
        )

    # -- the protocol ------------------------------------------------------------------
    def _name(self, key: str) -> str:
        if _NOT_XML.search(key):
            raise InvalidKey(
                f"invalid key {key!r}: Azure Blob names cannot hold U+FFFE or U+FFFF "
                "(listings are XML)"
            )
        return self._root + key

    def _may_match(self, version: str) -> bool:
        return entity_tag(version)  # an ETag: never "*", which would match any blob

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        name = self._name(key)
        client = await self._open()
        blob = client.get_blob_client(name)
        conditions: dict[str, Any] = {}
        condition = None
        token = ""
        if mode == "create":
            conditions["match_condition"] = MatchConditions.IfMissing
            condition = "create-only: the key exists"
        elif isinstance(mode, IfMatch):
            conditions["etag"] = mode.version
            conditions["match_condition"] = MatchConditions.IfNotModified
            condition = f"if-match {mode.version}: the key is missing or at another version"
        metadata = None
        if conditions:
            token = secrets.token_hex(12)
            metadata = {_TOKEN_META: token}

        async def upload() -> Any:
            return await blob.upload_blob(
                _body(data),
                length=len(data),
                overwrite=True,
                metadata=metadata,
                max_concurrency=1,
                **conditions,
            )

        try:
            if len(data) > self._threshold:
                return await self._put_blocks(blob, key, data, conditions, metadata, condition)
            resp = await self._call(
                "put",
                key,
                upload,
                condition=condition,
                size=len(data),
                write=True,
                # repeated after a create landed and was deleted, a create lands twice; an
                # overwrite could undo a later write; an if-match cannot (every ETag is new)
                repeatable=isinstance(mode, IfMatch),
            )
        except NotFound:  # if-match on a missing blob (some services answer 404)
            raise PreconditionFailed(
                f"key {key!r} does not exist (if-match {getattr(mode, 'version', '')})"
            ) from None
        except PreconditionFailed:
            # A conditional write meets its own write (resent by aiohttp after a lost
            # reply, where aiohttp still does): that is a success. One more request per
            # failed condition tells them apart.
            version = await self._own_write(blob, key, token)
            if version is not None:
                return version
            raise
        except OutcomeUnknown:
            # An attempt that may have landed (and, for an if-match, a retry that failed: see
            # adapters/_retry.py): the put's own write if the blob carries its token. A
            # create-only put is not repeated but looked for. Otherwise the attempt may have
            # landed and been replaced since, or may land later: the outcome stays unknown.
            if token:
                # the look failed, or aclose() came first (StorageClosed would say the put
                # never ran): the outcome stays unknown
                with contextlib.suppress(StorageUnavailable, StorageClosed):
                    version = await self._own_write(blob, key, token)
                    if version is not None:
                        return version
            raise
        return str(resp["etag"])

    async def _own_write(self, blob: Any, key: str, token: str) -> str | None:
        """The ETag of the blob if the stored one is the write that carried ``token``."""
        try:
            props = await self._call("get properties", key, lambda: blob.get_blob_properties())
        except NotFound:
            return None
        if (props.metadata or {}).get(_TOKEN_META) == token:
            return str(props.etag)
        return None

    async def _put_blocks(
        self,
        blob: Any,
        key: str,
        data: bytes,
        conditions: dict[str, Any],
        metadata: dict[str, str] | None,
        condition: str | None,
    ) -> str:
        """Stage ``data`` as blocks, then commit them with the conditions in one request."""
        size = max(self._block_size, math.ceil(len(data) / MAX_BLOCKS))
        for _round in range(3):
            ids = await self._stage_blocks(blob, key, data, size)
            blocks = [BlobBlock(block_id=i) for i in ids]
            try:
                resp = await self._call(
                    "put (commit block list)",
                    key,
                    lambda blocks=blocks: blob.commit_block_list(  # type: ignore[misc]
                        blocks, metadata=metadata, **conditions
                    ),
                    condition=condition,
                    write=True,
                    repeatable="etag" in conditions,  # only an if-match cannot land twice
                )
            except StorageUnavailable as exc:
                # another writer committed this blob meanwhile, discarding our staged blocks
                if _code(exc.__cause__) != "InvalidBlockList":
                    raise
                if metadata is not None:
                    version = await self._own_write(blob, key, metadata[_TOKEN_META])
                    if version is not None:
                        return version
                    if conditions:
                        await self._check_condition(blob, key, conditions, condition)
                continue
            except PreconditionFailed:
                if metadata is not None:
                    version = await self._own_write(blob, key, metadata[_TOKEN_META])
                    if version is not None:
                        return version
                raise
            return str(resp["etag"])
        raise StorageUnavailable(
            f"Azure put of key {key!r}: other writers kept replacing the blob during the upload"
        )

    async def _stage_blocks(self, blob: Any, key: str, data: bytes, size: int) -> list[str]:
        """Stage ``data`` as blocks of ``size`` bytes (a few at once); return their ids."""
        view = memoryview(data)
        offsets = range(0, len(data), size)
        # fresh ids per upload: concurrent writers of one blob never share a block
        stem = secrets.token_hex(8)
        ids = [base64.b64encode(f"{stem}-{i:06d}".encode()).decode() for i in range(len(offsets))]
        gate = asyncio.Semaphore(self._concurrency)

        async def stage(index: int, offset: int) -> None:
            body = bytes(view[offset : offset + size])
            async with gate:
                await self._call(
                    f"put (block {index + 1} of {len(offsets)})",
                    key,
                    lambda: blob.stage_block(ids[index], _body(body), length=len(body)),
                    size=len(body),
                )

        try:
            async with asyncio.TaskGroup() as group:
                for index, offset in enumerate(offsets):
                    group.create_task(stage(index, offset))
        except BaseExceptionGroup as exc:
            # a block failed: raise its (already translated) error, not the group
            first = exc.exceptions[0]
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            raise first from None
        return ids

    async def _check_condition(
        self, blob: Any, key: str, conditions: dict[str, Any], condition: str | None
    ) -> None:
        """Raise PreconditionFailed if the put's condition no longer holds."""
        try:
            props = await self._call("get properties", key, lambda: blob.get_blob_properties())
            etag: str | None = str(props.etag)
        except NotFound:
            etag = None
        if conditions.get("match_condition") == MatchConditions.IfMissing:
            holds = etag is None
        else:
            holds = etag is not None and etag == conditions.get("etag")
        if not holds:
            raise PreconditionFailed(f"key {key!r}: the condition failed ({condition})")

    async def _get(self, key: str) -> GetResult:
        name = self._name(key)
        client = await self._open()
        blob = client.get_blob_client(name)

        async def download() -> tuple[bytes, str]:
            downloader = await blob.download_blob(max_concurrency=1)
            data = await downloader.readall()
            return data, str(downloader.properties.etag)

        for _ in range(3):
            try:
                data, etag = await self._call("get", key, download)
            except PreconditionFailed:
                continue  # a large blob changed between two ranged reads: read it again
            return GetResult(data, etag)
        raise StorageUnavailable(  # pragma: no cover - needs a blob rewritten 3 times mid-read
            f"Azure get of key {key!r}: the blob kept changing while being read"
        )

    async def _delete(self, key: str, if_match: str | None) -> bool:
        name = self._name(key)
        client = await self._open()
        blob = client.get_blob_client(name)
        if if_match is None:
            # The committed blob's ETag, then a delete on it: a plain Delete Blob (and
            # one with If-Match: *, on Azurite) also takes a name that holds only the
            # blocks a put has staged, a key no reader finds, and answers 202.
            for _round in range(DELETE_ROUNDS):
                try:
                    props = await self._call("delete", key, lambda: blob.get_blob_properties())
                except NotFound:
                    return False
                etag = props.etag
                try:
                    await self._call(
                        "delete",
                        key,
                        partial(
                            blob.delete_blob,
                            delete_snapshots="include",
                            etag=etag,
                            match_condition=MatchConditions.IfNotModified,
                        ),
                        condition=f"delete of key {key!r}: written again since it was read",
                        write=True,
                        repeatable=False,  # repeated, it would answer for its own delete
                    )
                except NotFound:
                    return False
                except PreconditionFailed:
                    continue  # written again since its ETag was read: read it again
                return True
            raise StorageUnavailable(
                f"Azure delete of key {key!r}: the blob was written again between each of "
                f"{DELETE_ROUNDS} reads of its ETag and the delete on it; nothing was deleted"
            )
        condition = f"if-match delete {if_match}: the key is at another version"
        try:
            await self._call(
                "delete",
                key,
                lambda: blob.delete_blob(
                    delete_snapshots="include",
                    etag=if_match,
                    match_condition=MatchConditions.IfNotModified,
                ),
                condition=condition,
                write=True,
            )
        except NotFound:
            return False
        except PreconditionFailed:
            # the service answers 412 for a missing blob too: tell the two apart
            try:
                await self._call("delete", key, lambda: blob.get_blob_properties())
            except NotFound:
                return False
            raise
        return True

    async def _delete_many(self, keys: list[str]) -> int:
        """Delete ``keys`` with blob batch requests, 256 a request; return how many existed.

        Each sub-request answers on its own: 202 (deleted) or 404 (did not
        exist), so the count is the service's. A service that refuses the batch
        as a whole (an emulator or a gateway without the blob batch API) gets
        one ``Delete Blob`` per key instead. Not atomic: on an error, any
        earlier batch is deleted.

        Raises:
            OutcomeUnknown: a batch was sent again after an attempt whose
                outcome is unknown, and answered 404 for some keys: they are
                deleted, but whether they existed is unknown.
        """
        client = await self._open()
        ordered = list(dict.fromkeys(keys))  # each key once, as one delete after another
        existed = 0
        for start in range(0, len(ordered), MAX_DELETE_BATCH):
            chunk = ordered[start : start + MAX_DELETE_BATCH]
            names = [self._name(key) for key in chunk]
            history: list[Exception] = []

            async def batch(names: list[str] = names) -> list[Any]:
                parts = await client.delete_blobs(
                    *names,
                    delete_snapshots="include",
                    raise_on_any_failure=False,
                    raw_request_hook=_plain_boundary,
                )
                return [part async for part in parts]

            parts = await self._call(
                f"delete of {len(chunk)} keys", None, batch, write=True, history=history
            )
            if len(parts) != len(chunk):  # refused as a whole: one answer for the batch
                for key in chunk:
                    existed += await self._delete(key, None)
                continue
            missing = 0
            for key, part in zip(chunk, parts, strict=True):
                status = part.status_code
                if status == 404 and part.headers.get("x-ms-error-code") in (None, "BlobNotFound"):
                    missing += 1
                elif not 200 <= status < 300:
                    with self._translate_errors("delete (in a batch)", key):
                        raise aexc.HttpResponseError(response=part)
            if missing and any(isinstance(e, OutcomeUnknown) for e in history):
                raise OutcomeUnknown(
                    f"Azure delete of {len(chunk)} keys: every key is deleted, but an earlier "
                    f"attempt's outcome is unknown, so whether the {missing} that answered "
                    "'not found' existed is unknown"
                ) from history[-1]
            existed += len(chunk) - missing
        return existed

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        if _NOT_XML.search(prefix):
            return ListPage([], None)  # no stored name can hold these characters
        client = await self._open()
        root = self._root
        cut = len(root)
        per_page = min(max(limit, 1), self._page_size)
        # the cursor: the service's continuation token and the last key handed out
        token, last = cursor if cursor is not None else (None, None)
        while True:
            keys: list[str] = []

            async def page(token: str | None = token) -> tuple[list[str], str | None]:
                pages: Any = client.list_blobs(
                    name_starts_with=root + prefix, results_per_page=per_page
                ).by_page(continuation_token=token)
                names = [b.name async for b in await pages.__anext__()]
                return names, pages.continuation_token

            names, token = await self._call(f"list of prefix {prefix!r}", None, page)
            for name in names:
                k = name[cut:]
                # Azure has no start-after: names up to it are read and skipped here
                if start_after is None or k > start_after:
                    keys.append(k)
            keys.sort()  # code-point order within a page, whatever the service's order
            if keys and last is not None and keys[0] <= last:
                raise StorageUnavailable(
                    f"Azure listed {keys[0]!r} after {last!r} (prefix {prefix!r}): not in "
                    "code-point order, which checkpointkit's listings need (Azurite sorts "
                    "by UTF-16 code units: a character above U+FFFF comes before one in "
                    "U+E000 to U+FFFD); see docs/adapters/azure.md"
                )
            if keys:
                last = keys[-1]
            if keys or not token:
                return ListPage(keys, (token, last) if token else None)


# -- helpers -------------------------------------------------------------------------------


class _TrackingTransport(AioHttpTransport):  # type: ignore[misc]
    """azure-core's aiohttp transport, its connector wrapped by ``track_connections``.

    So that a write cancelled while on the wire can be settled or reset
    (`checkpointkit.adapters._inflight`), and so that aiohttp never resends
    a write unseen (`no_hidden_resend`).
    The SDK opens the transport before every request; wrapping is done once.
    """

    async def open(self) -> None:
        await super().open()
        if self.session is not None:
            track_connections(self.session.connector)
            no_hidden_resend(self.session)


def _plain_boundary(request: Any) -> None:
    """Give a blob batch request a boundary of letters, digits and ``_`` (a request hook).

    The SDK's multipart boundary comes from `email`, ``===============N==``;
    the service accepts it, but Azurite reads the boundary as the text between
    the first two ``=`` of the Content-Type and refuses every batch. The hook
    runs before the request is signed, so the signature covers the new one.
    """
    http = request.http_request
    ctype = str(http.headers.get("Content-Type", ""))
    old = ctype.partition("boundary=")[2].strip('"')
    if not old or "=" not in old or not isinstance(http.data, bytes):
        return
    new = f"batch_{secrets.token_hex(16)}"
    http.set_bytes_body(http.data.replace(old.encode(), new.encode()))
    http.headers["Content-Type"] = f"multipart/mixed; boundary={new}"


def _register_secrets(connection_string: Any, account_url: Any, credential: Any) -> None:
    """Have `SECRETS` redact these credentials."""
    values: list[object] = [connection_string, credential]
    if isinstance(connection_string, str):  # its AccountKey and SharedAccessSignature
        values += [part.partition("=")[2] for part in connection_string.split(";")]
    for text in (connection_string, account_url, credential):
        if isinstance(text, str):  # a SAS: its signature
            values += re.findall(r"(?:^|[?&;])sig=([^&;]+)", text)
    named = getattr(credential, "named_key", None)  # AzureNamedKeyCredential
    if named is not None:
        values.append(getattr(named, "key", None))
    signature = getattr(credential, "signature", None)  # AzureSasCredential
    values.append(signature)
    SECRETS.add(*values)


def _body(data: bytes) -> bytes | io.BytesIO:
    """A request body: large ones as a stream, which aiohttp sends in chunks.

    aiohttp writes a ``bytes`` body in one go (and warns above 1 MiB that this can
    hold up the event loop); a fresh stream per attempt, so that a retry starts at 0.
    """
    return io.BytesIO(data) if len(data) > STREAM_ABOVE else data


def _code(exc: BaseException | None) -> str:
    if isinstance(exc, aexc.HttpResponseError):
        code = getattr(exc, "error_code", None)
        response: Any = exc.response
        if code is None and response is not None:
            code = response.headers.get("x-ms-error-code")
        return str(getattr(code, "value", code) or "")
    return ""


def _is_transient(exc: BaseException | None) -> bool:
    """Whether a retry may succeed: connection errors, timeouts, 5xx, throttling."""
    if isinstance(exc, aexc.HttpResponseError) and not isinstance(exc, aexc.IncompleteReadError):
        status = exc.status_code or 0
        return _code(exc) in _TRANSIENT_CODES or status >= 500 or status in (408, 429)
    return isinstance(exc, _TRANSIENT_ERRORS)


def _check_prefix(prefix: str) -> str:
    prefix = _OPTS.check_prefix(prefix)
    if prefix and _NOT_XML.search(prefix):
        raise ConfigurationError(f"invalid Azure prefix {prefix!r}: it holds U+FFFE or U+FFFF")
    return prefix


def _strip_query(url: str) -> str:
    return urlunsplit(urlsplit(url)._replace(query="", fragment="")).rstrip("/")


def _parse_param(name: str, value: str) -> Any:
    parsed = _OPTS.parse_param(name, value)
    if name == "account_url" and urlsplit(value).query:
        raise ConfigurationError(
            "the account_url URL parameter must not carry a SAS: pass it as the credential option"
        )
    return parsed
