"""``S3Storage._translate_errors`` maps every botocore and aiohttp error it knows, cause chained.

Each case feeds a real exception object, as botocore or aiohttp raises it, to
the adapter's one translation point; an unmapped error still becomes
``StorageUnavailable``, never a raw SDK error. Each case is fed again as the
error of a write, before and after its request may have left the client: only
then do the errors without a definite answer become ``OutcomeUnknown``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from botocore import exceptions as bexc
from checkpointkit import (
    ConfigurationError,
    InvalidKey,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    StorageClosed,
    StorageUnavailable,
)
from checkpointkit.adapters.s3 import S3Storage, _is_transient

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYSECRETKEY"


def client_error(code: str, status: int, message: str = "") -> bexc.ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": message or code},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return bexc.ClientError(response, "PutObject")


URL = "http://127.0.0.1:1/b/k"

CASES: list[tuple[str, BaseException, type[Exception], str, bool]] = [
    # (id, error, expected, text in the message, transient)
    ("no-such-key", client_error("NoSuchKey", 404), NotFound, "'k'", False),
    ("head-404", client_error("404", 404), NotFound, "'k'", False),
    ("no-such-bucket", client_error("NoSuchBucket", 404), ConfigurationError, "create=True", False),
    ("412", client_error("PreconditionFailed", 412), PreconditionFailed, "'k'", False),
    (
        "409-conflict",
        client_error("ConditionalRequestConflict", 409),
        PreconditionFailed,
        "'k'",
        False,
    ),
    (
        "bad-key-id",
        client_error("InvalidAccessKeyId", 403),
        ConfigurationError,
        "credentials",
        False,
    ),
    (
        "bad-signature",
        client_error("SignatureDoesNotMatch", 403),
        ConfigurationError,
        "credentials",
        False,
    ),
    ("expired-token", client_error("ExpiredToken", 400), ConfigurationError, "credentials", False),
    ("denied", client_error("AccessDenied", 403), ConfigurationError, "access denied", False),
    ("key-too-long", client_error("KeyTooLongError", 400), InvalidKey, "too long", False),
    ("redirect", client_error("PermanentRedirect", 301), ConfigurationError, "region", False),
    ("bad-bucket", client_error("InvalidBucketName", 400), ConfigurationError, "bucket", False),
    ("slow-down", client_error("SlowDown", 503), StorageUnavailable, "SlowDown", True),
    ("internal", client_error("InternalError", 500), StorageUnavailable, "InternalError", True),
    ("bad-gateway", client_error("BadGateway", 502), StorageUnavailable, "BadGateway", True),
    ("gateway-timeout", client_error("504", 504), StorageUnavailable, "504", True),
    ("throttled", client_error("Throttling", 400), StorageUnavailable, "Throttling", True),
    (
        "timeout-400",
        client_error("RequestTimeout", 400),
        StorageUnavailable,
        "RequestTimeout",
        True,
    ),
    (
        "other-4xx",
        client_error("InvalidArgument", 400),
        StorageUnavailable,
        "InvalidArgument",
        False,
    ),
    (
        "connect",
        bexc.EndpointConnectionError(endpoint_url=URL),
        StorageUnavailable,
        "cannot connect",
        True,
    ),
    (
        "connect-timeout",
        bexc.ConnectTimeoutError(endpoint_url=URL),
        StorageUnavailable,
        "timed out",
        True,
    ),
    (
        "read-timeout",
        bexc.ReadTimeoutError(endpoint_url=URL),
        StorageUnavailable,
        "timed out",
        True,
    ),
    (
        "closed",
        bexc.ConnectionClosedError(endpoint_url=URL),
        StorageUnavailable,
        "ConnectionClosedError",
        True,
    ),
    (
        "streaming",
        bexc.ResponseStreamingError(error=ConnectionResetError()),
        StorageUnavailable,
        "ResponseStreamingError",
        True,
    ),
    (
        "incomplete",
        bexc.IncompleteReadError(actual_bytes=1, expected_bytes=2),
        StorageUnavailable,
        "IncompleteReadError",
        True,
    ),
    ("no-credentials", bexc.NoCredentialsError(), ConfigurationError, "no usable AWS", False),
    (
        "partial-credentials",
        bexc.PartialCredentialsError(provider="env", cred_var="AWS_SECRET_ACCESS_KEY"),
        ConfigurationError,
        "no usable AWS",
        False,
    ),
    ("no-region", bexc.NoRegionError(), ConfigurationError, "region", False),
    ("profile", bexc.ProfileNotFound(profile="nope"), ConfigurationError, "profile", False),
    (
        "param",
        bexc.ParamValidationError(report="bad"),
        ConfigurationError,
        "refused the request",
        False,
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
    ("timeout", TimeoutError(), StorageUnavailable, "timed out", True),
    ("unknown", RuntimeError("?"), StorageUnavailable, "RuntimeError", False),
]


UNKNOWN_ONCE_SENT = frozenset(
    ("internal", "bad-gateway", "gateway-timeout", "connect", "connect-timeout", "read-timeout",
     "closed", "streaming", "incomplete", "aiohttp-disconnected", "aiohttp-payload", "reset",
     "timeout")
)  # fmt: skip
"""The cases that give no definite answer: a write's outcome is unknown once it was sent."""


@pytest.fixture
def storage() -> S3Storage:
    return S3Storage(
        "bkt",
        endpoint_url="http://127.0.0.1:1",
        access_key_id="AKIACHECKPOINTKIT",
        secret_access_key=SECRET,
    )


@pytest.mark.parametrize(
    ("error", "expected", "text", "transient"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_translate_errors_maps_each_error(
    storage: S3Storage,
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
    assert SECRET not in message
    assert _is_transient(error) is transient


@pytest.mark.parametrize("sent", [False, True], ids=["not-sent", "sent"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_write_error_is_outcome_unknown_only_without_an_answer_once_sent(
    storage: S3Storage, case: tuple[str, BaseException, type[Exception], str, bool], sent: bool
) -> None:
    name, error, expected, text, _ = case
    if sent and name in UNKNOWN_ONCE_SENT:
        expected, text = OutcomeUnknown, "may have happened"
    with (
        pytest.raises(expected) as info,
        storage._translate_errors("put", "k", condition="c", sent=lambda: sent),
    ):
        raise error
    if expected is not PreconditionFailed:  # the condition only names a failed one
        assert type(info.value) is expected
    assert info.value.__cause__ is error
    message = str(info.value)
    assert text in message
    assert "\n" not in message and SECRET not in message


def test_translated_errors_pass_through_unchanged(storage: S3Storage) -> None:
    original = PreconditionFailed("key 'k': already mapped")
    with pytest.raises(PreconditionFailed) as info, storage._translate_errors("put", "k"):
        raise original
    assert info.value is original


def test_cancellation_is_never_translated(storage: S3Storage) -> None:
    with pytest.raises(asyncio.CancelledError), storage._translate_errors("get", "k"):
        raise asyncio.CancelledError


async def test_errors_after_close_become_storage_closed(storage: S3Storage) -> None:
    await storage.aclose()
    with pytest.raises(StorageClosed), storage._translate_errors("get", "k"):
        raise bexc.ConnectionClosedError(endpoint_url=URL)


async def test_a_write_cut_off_on_the_wire_by_aclose_is_outcome_unknown(storage: S3Storage) -> None:
    # Its request had left: the server may apply it; StorageClosed would say it did not.
    await storage.aclose()
    lost = bexc.ConnectionClosedError(endpoint_url=URL)
    with (
        pytest.raises(OutcomeUnknown, match=r"^S3 put of key 'k' was cut off: the storage "
                      r"was closed; its request was sent, so it may have happened") as info,
        storage._translate_errors("put", "k", sent=lambda: True),
    ):  # fmt: skip
        raise lost
    assert info.value.__cause__ is lost


async def test_the_servers_answer_during_aclose_is_kept(storage: S3Storage) -> None:
    # A definite answer that arrives while aclose() waits for the call is its own answer.
    await storage.aclose()
    with (
        pytest.raises(PreconditionFailed),
        storage._translate_errors("put", "k", condition="create-only", sent=lambda: True),
    ):
        raise client_error("PreconditionFailed", 412)


def test_condition_is_named_in_precondition_failed(storage: S3Storage) -> None:
    with (
        pytest.raises(PreconditionFailed, match="create-only"),
        storage._translate_errors("put", "k", condition="create-only: the key exists"),
    ):
        raise client_error("PreconditionFailed", 412)
