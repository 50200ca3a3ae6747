"""``_translate_errors``: every driver, server and network error it maps, the cause chained."""

from __future__ import annotations

import asyncio

import pytest
from asyncpg import exceptions as pgexc
from checkpointkit import OutcomeUnknown, PreconditionFailed, StorageUnavailable
from checkpointkit.adapters.postgres import _translate_errors

WHERE = "postgresql://alice:***@db.internal:5432/app"

# (error, words its message must carry)
SERVER_ERRORS: list[tuple[BaseException, str]] = [
    (pgexc.InvalidPasswordError("password authentication failed"), "authentication failed"),
    (pgexc.InvalidAuthorizationSpecificationError("no pg_hba.conf entry"), "authentication"),
    (pgexc.InvalidCatalogNameError('database "app" does not exist'), "does not exist"),
    (pgexc.TooManyConnectionsError("too many clients"), "no free connection"),
    (pgexc.InsufficientPrivilegeError("permission denied for table"), "permission denied"),
    (pgexc.ReadOnlySQLTransactionError("read-only transaction"), "read-only"),
    (pgexc.DiskFullError("could not extend file"), "out of resources"),
    (pgexc.InsufficientResourcesError("out of memory"), "out of resources"),
    (pgexc.QueryCanceledError("canceling statement due to statement timeout"), "cancelled"),
    (pgexc.CannotConnectNowError("the database system is starting up"), "starting up"),
    (pgexc.UniqueViolationError("duplicate key"), "SQLSTATE 23505"),
    (pgexc.PostgresError("something else"), "PostgresError"),
]
LOST: list[tuple[BaseException, str]] = [
    (pgexc.ConnectionDoesNotExistError("connection was closed"), "connection was lost"),
    (pgexc.PostgresConnectionError("protocol violation"), "connection was lost"),
    (pgexc.InterfaceError("cannot perform operation: another operation is in progress"), ""),
    (pgexc.InternalClientError("protocol state"), ""),
    (TimeoutError(), "timeout"),
    (ConnectionRefusedError(111, "Connection refused"), "could not be reached"),
    (OSError(113, "No route to host"), "could not be reached"),
]


def _raise_through(error: BaseException, *, written: bool = False) -> BaseException:
    with (
        pytest.raises(StorageUnavailable) as caught,
        _translate_errors("put", "key 'runs/r1/a'", WHERE, written=written),
    ):
        raise error
    return caught.value


@pytest.mark.parametrize(("error", "words"), SERVER_ERRORS + LOST)
def test_translate_errors_maps_each_error_with_its_cause_chained(
    error: BaseException, words: str
) -> None:
    translated = _raise_through(error)
    assert type(translated) is StorageUnavailable
    assert translated.__cause__ is error
    message = str(translated)
    assert WHERE in message and "put" in message and "'runs/r1/a'" in message
    assert words in message


@pytest.mark.parametrize(("error", "words"), LOST)
def test_a_sent_write_without_an_answer_is_outcome_unknown(
    error: BaseException, words: str
) -> None:
    translated = _raise_through(error, written=True)
    assert isinstance(translated, OutcomeUnknown)
    assert translated.__cause__ is error
    assert "may have happened" in str(translated)


@pytest.mark.parametrize(("error", "words"), SERVER_ERRORS)
def test_a_sent_write_that_the_server_refused_is_not_outcome_unknown(
    error: BaseException, words: str
) -> None:
    """The server answered with an error: its statement, one transaction, did nothing."""
    translated = _raise_through(error, written=True)
    assert type(translated) is StorageUnavailable


def test_own_errors_and_cancellation_pass_through_unchanged() -> None:
    own = PreconditionFailed("key 'a' exists")
    with pytest.raises(PreconditionFailed) as caught, _translate_errors("put", "key 'a'", WHERE):
        raise own
    assert caught.value is own
    with (
        pytest.raises(asyncio.CancelledError),
        _translate_errors("put", "key 'a'", WHERE, written=True),
    ):
        raise asyncio.CancelledError()
