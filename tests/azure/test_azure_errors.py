"""``AzureBlobStorage._translate_errors`` maps every Azure SDK and aiohttp error it knows.

Each case feeds a real exception object, as azure-core or aiohttp raises it,
to the adapter's one translation point, with the cause chained; an unmapped
error still becomes ``StorageUnavailable``, never a raw SDK error. Each case is
fed again as the error of a write, before and after its request may have left
the client: only then do the errors without a definite answer become
``OutcomeUnknown``.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from azure.core import exceptions as aexc
from checkpointkit import (
    ConfigurationError,
    InvalidKey,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    StorageClosed,
    StorageUnavailable,
)
from checkpointkit.adapters.azure import AzureBlobStorage, _is_transient
from checkpointkit.conformance.servers.azure import ACCOUNT_KEY, connection_string


def http_error(
    cls: type[aexc.HttpResponseError], status: int, code: str | None
) -> aexc.HttpResponseError:
    error = cls(message=f"{code}: something went wrong")
    error.status_code = status
    error.error_code = code  # type: ignore[attr-defined]  # as azure-storage-blob sets it
    return error


CASES: list[tuple[str, BaseException, type[Exception], str, bool]] = [
    # (id, error, expected, text in the message, transient)
    (
        "blob-not-found",
        http_error(aexc.ResourceNotFoundError, 404, "BlobNotFound"),
        NotFound,
        "'k'",
        False,
    ),
    (
        "container-not-found",
        http_error(aexc.ResourceNotFoundError, 404, "ContainerNotFound"),
        ConfigurationError,
        "create=True",
        False,
    ),
    (
        "exists-409",
        http_error(aexc.ResourceExistsError, 409, "BlobAlreadyExists"),
        PreconditionFailed,
        "'k'",
        False,
    ),
    (
        "condition-412",
        http_error(aexc.ResourceModifiedError, 412, "ConditionNotMet"),
        PreconditionFailed,
        "'k'",
        False,
    ),
    (
        "auth-failed",
        http_error(aexc.ClientAuthenticationError, 403, "AuthenticationFailed"),
        ConfigurationError,
        "rejected the credentials",
        False,
    ),
    (
        "authorization-failure",
        http_error(aexc.HttpResponseError, 403, "AuthorizationFailure"),
        ConfigurationError,
        "rejected the credentials",
        False,
    ),
    (
        "permission",
        http_error(aexc.HttpResponseError, 403, "AuthorizationPermissionMismatch"),
        ConfigurationError,
        "access denied",
        False,
    ),
    (
        "bad-name",
        http_error(aexc.HttpResponseError, 400, "InvalidResourceName"),
        InvalidKey,
        "'k'",
        False,
    ),
    (
        "name-too-long",
        http_error(aexc.HttpResponseError, 400, "OutOfRangeInput"),
        InvalidKey,
        "'k'",
        False,
    ),
    (
        "server-busy",
        http_error(aexc.HttpResponseError, 503, "ServerBusy"),
        StorageUnavailable,
        "ServerBusy",
        True,
    ),
    (
        "internal",
        http_error(aexc.HttpResponseError, 500, "InternalError"),
        StorageUnavailable,
        "InternalError",
        True,
    ),
    (
        "bad-gateway",
        http_error(aexc.HttpResponseError, 502, None),
        StorageUnavailable,
        "502",
        True,
    ),
    (
        "timed-out",
        http_error(aexc.HttpResponseError, 500, "OperationTimedOut"),
        StorageUnavailable,
        "OperationTimedOut",
        True,
    ),
    (
        "throttled-429",
        http_error(aexc.HttpResponseError, 429, None),
        StorageUnavailable,
        "429",
        True,
    ),
    (
        "other-4xx",
        http_error(aexc.HttpResponseError, 400, "InvalidHeaderValue"),
        StorageUnavailable,
        "InvalidHeaderValue",
        False,
    ),
    (
        "connect",
        aexc.ServiceRequestError("connection refused"),
        StorageUnavailable,
        "cannot connect",
        True,
    ),
    (
        "connect-timeout",
        aexc.ServiceRequestTimeoutError("timed out"),
        StorageUnavailable,
        "cannot connect",
        True,
    ),
    (
        "read",
        aexc.ServiceResponseError("connection reset"),
        StorageUnavailable,
        "no (whole) reply",
        True,
    ),
    (
        "read-timeout",
        aexc.ServiceResponseTimeoutError("timed out"),
        StorageUnavailable,
        "no (whole) reply",
        True,
    ),
    (
        "incomplete",
        aexc.IncompleteReadError(message="cut"),
        StorageUnavailable,
        "IncompleteReadError",
        True,
    ),
    (
        "aiohttp-disconnected",
        aiohttp.ServerDisconnectedError(),
        StorageUnavailable,
        "ServerDisconnectedError",
        True,
    ),
    (
        "aiohttp-payload",
        aiohttp.ClientPayloadError("cut"),
        StorageUnavailable,
        "ClientPayloadError",
        True,
    ),
    ("reset", ConnectionResetError(), StorageUnavailable, "ConnectionResetError", True),
    ("timeout", TimeoutError(), StorageUnavailable, "no (whole) reply", True),
    ("azure-other", aexc.AzureError("odd"), StorageUnavailable, "AzureError", False),
    ("unknown", RuntimeError("?"), StorageUnavailable, "RuntimeError", False),
]


UNKNOWN_ONCE_SENT = frozenset(
    ("internal", "bad-gateway", "timed-out", "connect", "connect-timeout", "read", "read-timeout",
     "incomplete", "aiohttp-disconnected", "aiohttp-payload", "reset", "timeout")
)  # fmt: skip
"""The cases that give no definite answer: a write's outcome is unknown once it was sent."""


@pytest.fixture
def storage() -> AzureBlobStorage:
    return AzureBlobStorage("ckk", connection_string=connection_string(1))


@pytest.mark.parametrize(
    ("error", "expected", "text", "transient"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_translate_errors_maps_each_error(
    storage: AzureBlobStorage,
    error: BaseException,
    expected: type[Exception],
    text: str,
    transient: bool,
) -> None:
    with pytest.raises(expected) as info, storage._translate_errors("put", "k"):
        raise error
    assert type(info.value) is expected
    assert info.value.__cause__ is error  # the backend's own error is chained
    message = str(info.value)
    assert text in message
    assert "\n" not in message
    assert ACCOUNT_KEY not in message
    assert _is_transient(error) is transient


@pytest.mark.parametrize("sent", [False, True], ids=["not-sent", "sent"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_write_error_is_outcome_unknown_only_without_an_answer_once_sent(
    storage: AzureBlobStorage,
    case: tuple[str, BaseException, type[Exception], str, bool],
    sent: bool,
) -> None:
    name, error, expected, text, _ = case
    if sent and name in UNKNOWN_ONCE_SENT:
        expected, text = OutcomeUnknown, "may have happened"
    with (
        pytest.raises(expected) as info,
        storage._translate_errors("put", "k", sent=lambda: sent),
    ):
        raise error
    assert type(info.value) is expected
    assert info.value.__cause__ is error
    message = str(info.value)
    assert text in message
    assert "\n" not in message and ACCOUNT_KEY not in message


def test_conflict_409_is_a_failed_condition_only_for_a_conditional_write(
    storage: AzureBlobStorage,
) -> None:
    bare = http_error(aexc.ResourceExistsError, 409, None)
    with pytest.raises(PreconditionFailed), storage._translate_errors("put", "k", condition="c"):
        raise bare
    with pytest.raises(StorageUnavailable), storage._translate_errors("put", "k"):
        raise bare
    lease = http_error(aexc.ResourceExistsError, 409, "LeaseIdMissing")
    with pytest.raises(StorageUnavailable), storage._translate_errors("put", "k", condition="c"):
        raise lease


def test_translated_errors_pass_through_unchanged(storage: AzureBlobStorage) -> None:
    original = NotFound("key 'k' not found")
    with pytest.raises(NotFound) as info, storage._translate_errors("get", "k"):
        raise original
    assert info.value is original


def test_cancellation_is_never_translated(storage: AzureBlobStorage) -> None:
    with pytest.raises(asyncio.CancelledError), storage._translate_errors("get", "k"):
        raise asyncio.CancelledError


async def test_errors_after_close_become_storage_closed(storage: AzureBlobStorage) -> None:
    await storage.aclose()
    with pytest.raises(StorageClosed), storage._translate_errors("get", "k"):
        raise aexc.ServiceResponseError("closed")


@pytest.mark.parametrize(
    "lost",
    [aexc.ServiceResponseError("closed"), aexc.IncompleteReadError(message="cut")],
    ids=["no-reply", "reply-cut"],
)
async def test_a_write_cut_off_on_the_wire_by_aclose_is_outcome_unknown(
    storage: AzureBlobStorage, lost: Exception
) -> None:
    # Its request had left: the service may apply it; StorageClosed would say it did not.
    await storage.aclose()
    with (
        pytest.raises(OutcomeUnknown, match=r"^Azure put of key 'k' was cut off: the storage "
                      r"was closed; its request was sent, so it may have happened") as info,
        storage._translate_errors("put", "k", sent=lambda: True),
    ):  # fmt: skip
        raise lost
    assert info.value.__cause__ is lost


async def test_the_services_answer_during_aclose_is_kept(storage: AzureBlobStorage) -> None:
    # A definite answer that arrives while aclose() waits for the call is its own answer.
    await storage.aclose()
    with (
        pytest.raises(PreconditionFailed),
        storage._translate_errors("put", "k", condition="create-only", sent=lambda: True),
    ):
        raise http_error(aexc.ResourceExistsError, 409, "BlobAlreadyExists")
