"""No credential ever reaches a log line, a repr or an error, on any network adapter.

DEBUG is turned on for ``checkpointkit``, ``botocore``, ``aiobotocore``,
``azure`` and ``redis``, and each adapter runs against its real server through
its success path and its failure paths (rejected credentials, a missing bucket
or container, an endpoint where nothing listens): S3 on moto with a session
token, Azure Blob on Azurite with an account key, a SAS and a connection
string, Redis on valkey with ``requirepass``. Then no secret (secret key,
session token, account key, SAS signature, connection string, password), in
any of its spellings (as given, URL-quoted, URL-unquoted), appears in what was
logged, in the storages' reprs or in the errors with their chained tracebacks.
"""

from __future__ import annotations

import logging
import re
import secrets
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, unquote

import pytest
from checkpointkit import CheckpointkitError, ConfigurationError, StorageUnavailable
from checkpointkit.adapters.azure import AzureBlobStorage
from checkpointkit.adapters.redis import RedisStorage
from checkpointkit.adapters.s3 import S3Storage
from checkpointkit.conformance.servers import free_port
from checkpointkit.conformance.servers.azure import (
    ACCOUNT_KEY,
    ACCOUNT_NAME,
    azurite_server,
    connection_string,
)
from checkpointkit.conformance.servers.redis import valkey_standalone
from checkpointkit.conformance.servers.s3 import (
    REGION,
    create_bucket,
    moto_auth_server,
    s3_server,
    unique_bucket_name,
)

LOGGERS = ("checkpointkit", "botocore", "aiobotocore", "azure", "redis")

SECRET_KEY = f"ckkSecretKey{secrets.token_hex(16)}/+Q"
SESSION_TOKEN = f"ckkSessionToken{secrets.token_hex(24)}/+Q=="
ENV_SECRET_KEY = f"ckkEnvSecretKey{secrets.token_hex(16)}"
ENV_SESSION_TOKEN = f"ckkEnvSessionToken{secrets.token_hex(24)}//+=="
PASSWORD = f"ckk-Pa55:word@{secrets.token_hex(8)}"
WRONG_ACCOUNT_KEY = "V3Jvbmcga2V5IGZvciBhIGNoZWNrcG9pbnRraXQgdGVzdCAxMjM0NTY3ODkwYWJj+/=="


# -- what is captured ----------------------------------------------------------------------
class Capture(logging.Handler):
    """Every record of the watched loggers, formatted with its exception text."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@dataclass
class Seen:
    """What a reader of the logs, reprs and errors would see."""

    logs: Capture
    texts: list[str] = field(default_factory=list)
    errors: list[type[BaseException]] = field(default_factory=list)

    def show(self, *objects: object) -> None:
        self.texts.extend(repr(o) for o in objects)
        self.texts.extend(str(o) for o in objects)

    async def attempt(self, operation: Callable[[], Awaitable[Any]]) -> None:
        """Run ``operation``; keep its error's whole chained traceback, if it fails."""
        try:
            await operation()
        except CheckpointkitError as exc:
            self.errors.append(type(exc))
            self.texts.append("".join(traceback.format_exception(exc)))

    def assert_free_of(self, *secret_values: str) -> None:
        corpus = [*self.logs.lines, *self.texts]
        for secret in secret_values:
            for form in {secret, quote(secret, safe=""), quote(secret), unquote(secret)}:
                leaks = [text for text in corpus if form in text]
                if leaks:  # show where, never the secret itself
                    at = leaks[0].index(form)
                    where = leaks[0][max(0, at - 160) : at] + "<SECRET>"
                    pytest.fail(f"a secret leaked ({len(leaks)} times), first after: {where}")


@pytest.fixture
def seen() -> Iterator[Seen]:
    handler = Capture()
    saved = []
    for name in LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level))
        logger.setLevel(logging.DEBUG)
        logger.addHandler(handler)
    try:
        yield Seen(handler)
    finally:
        for logger, level in saved:
            logger.removeHandler(handler)
            logger.setLevel(level)


async def exercise(storage: Any, seen: Seen) -> None:
    """Every operation once (each one's failure is kept), the storage shown, then closed."""
    async with storage:
        seen.show(storage, getattr(storage, "_policy", None))
        await seen.attempt(lambda: storage.put("k/1", b"v", mode="create"))
        await seen.attempt(lambda: storage.put("k/1", b"w"))
        await seen.attempt(lambda: storage.get("k/1"))
        await seen.attempt(lambda: _keys(storage))
        await seen.attempt(lambda: storage.delete("k/1"))
        await seen.attempt(lambda: storage.delete_many(["k/1", "k/2"]))


async def _keys(storage: Any) -> list[str]:
    return [k async for k in storage.list("k/")]


# -- S3 on moto, with a session token ------------------------------------------------------
@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    with s3_server() as url:
        yield url


def s3(endpoint_url: str, bucket: str, **options: Any) -> S3Storage:
    return S3Storage(
        bucket,
        "secrets",
        endpoint_url=endpoint_url,
        region=REGION,
        access_key_id="AKIACHECKPOINTKITTEST",
        secret_access_key=SECRET_KEY,
        session_token=SESSION_TOKEN,
        **options,
    )


async def test_s3_keeps_its_secret_key_and_session_token_out_of_logs_reprs_and_errors(
    moto: str, seen: Seen, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = unique_bucket_name("ckk-secrets")
    create_bucket(moto, bucket)
    await exercise(s3(moto, bucket), seen)
    # credentials from the environment: the adapter never sees them, the patterns catch them
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIACHECKPOINTKITENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", ENV_SECRET_KEY)
    monkeypatch.setenv("AWS_SESSION_TOKEN", ENV_SESSION_TOKEN)
    await exercise(S3Storage(bucket, "env", endpoint_url=moto, region=REGION), seen)
    assert seen.errors == []  # the success paths
    await exercise(s3(moto, unique_bucket_name("ckk-missing")), seen)
    unreachable = f"http://127.0.0.1:{free_port()}"
    await exercise(s3(unreachable, bucket, timeout=1.0, retries=1), seen)
    with moto_auth_server() as strict:  # rejects every access key
        await exercise(s3(strict, bucket, retries=0), seen)
    assert ConfigurationError in seen.errors and StorageUnavailable in seen.errors
    assert any("x-amz-security-token:***" in line for line in seen.logs.lines)  # redacted
    seen.assert_free_of(SECRET_KEY, SESSION_TOKEN, ENV_SECRET_KEY, ENV_SESSION_TOKEN)


# -- Azure Blob on Azurite: an account key, a SAS, a connection string ---------------------
@pytest.fixture(scope="module")
def azurite() -> Iterator[str]:
    with azurite_server() as conn_str:
        yield conn_str


@pytest.fixture
async def container(azurite: str) -> AsyncIterator[str]:
    name = f"ckk-secrets-{secrets.token_hex(4)}"
    async with AzureBlobStorage(name, connection_string=azurite, create=True) as storage:
        await storage.put("made", b"")  # the container exists
        yield name


def sas_for(container: str, key: str) -> str:
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    return generate_container_sas(
        ACCOUNT_NAME,
        container,
        account_key=key,
        permission=ContainerSasPermissions(read=True, write=True, delete=True, list=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )


def signature(sas: str) -> str:
    match = re.search(r"(?:^|&)sig=([^&]+)", sas)
    assert match is not None
    return match[1]


async def test_azure_keeps_account_keys_sas_signatures_and_connection_strings_out(
    azurite: str, container: str, seen: Seen
) -> None:
    port = int(re.findall(r":(\d+)/", azurite)[0])
    account_url = f"http://127.0.0.1:{port}/{ACCOUNT_NAME}"
    closed = free_port()
    sas, wrong_sas = sas_for(container, ACCOUNT_KEY), sas_for(container, WRONG_ACCOUNT_KEY)
    wrong_conn = azurite.replace(ACCOUNT_KEY, WRONG_ACCOUNT_KEY)
    quick = {"timeout": 1.0, "retries": 1}
    ways_in: list[tuple[str, dict[str, Any]]] = [
        (container, {"connection_string": azurite}),
        (container, {"account_url": account_url, "credential": ACCOUNT_KEY}),
        (container, {"account_url": account_url, "credential": sas}),
    ]
    for name, options in ways_in:  # the success paths
        await exercise(AzureBlobStorage(name, **options), seen)
    assert seen.errors == []
    failures: list[tuple[str, dict[str, Any]]] = [
        ("ckk-missing", {"connection_string": azurite}),
        ("ckk-missing", {"account_url": account_url, "credential": ACCOUNT_KEY}),
        (container, {"connection_string": wrong_conn}),
        (container, {"account_url": account_url, "credential": WRONG_ACCOUNT_KEY}),
        (container, {"account_url": account_url, "credential": wrong_sas}),
        (container, {"connection_string": connection_string(closed), **quick}),
        (
            container,
            {
                "account_url": account_url.replace(str(port), str(closed)),
                **quick,
                "credential": sas,
            },
        ),
    ]
    for name, options in failures:
        await exercise(AzureBlobStorage(name, **options), seen)
    assert ConfigurationError in seen.errors and StorageUnavailable in seen.errors
    seen.assert_free_of(
        ACCOUNT_KEY,
        WRONG_ACCOUNT_KEY,
        azurite,
        wrong_conn,
        connection_string(closed),
        signature(sas),
        signature(wrong_sas),
    )


# -- Redis on valkey, with requirepass -----------------------------------------------------
async def test_redis_keeps_its_password_out_of_logs_reprs_and_errors(seen: Seen) -> None:
    with valkey_standalone(password=PASSWORD) as url:
        good = RedisStorage.from_url(url, prefix="secrets", timeout=5)
        await exercise(good, seen)
        assert seen.errors == []
        wrong = url.replace(quote(PASSWORD, safe=""), "not-the-password")
        assert wrong != url
        await exercise(RedisStorage.from_url(wrong, prefix="secrets", timeout=5), seen)
        port = int(re.findall(r":(\d+)/", url)[0])
        unreachable = url.replace(f":{port}/", f":{free_port()}/")
        await exercise(RedisStorage.from_url(unreachable, prefix="secrets", timeout=1), seen)
    assert StorageUnavailable in seen.errors
    assert any("authentication failed" in text for text in seen.texts)  # the wrong password
    assert any("***" in text for text in seen.texts)  # where the password would have been
    seen.assert_free_of(PASSWORD)


# -- the filter on its own -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("line", "secret"),
    [
        ("x-amz-security-token:TOKENabc/def+ghi==\nhost:127.0.0.1", "TOKENabc/def+ghi=="),
        ("headers={'X-Amz-Security-Token': b'TOKENabc', 'Accept': b'*'}", "TOKENabc"),
        ("Credential=AKIA/x, SignedHeaders=host, Signature=" + "ab12" * 16, "ab12" * 16),
        ("Signature:\n" + "cd34" * 16, "cd34" * 16),
        ("http://h/c/k?sv=2020&sig=SIGabc%2Bdef%3D&se=1", "SIGabc%2Bdef%3D"),
        ("AccountName=a;AccountKey=KEYabc+/==;BlobEndpoint=http://h", "KEYabc+/=="),
        ("BlobEndpoint=http://h;SharedAccessSignature=sv=1&sig=SASabc", "sv=1&sig=SASabc"),
        ("Authorization: SharedKey acct:MACabc+/=", "MACabc+/="),
        ("redis://user:PASSabc@127.0.0.1:6379/0", "PASSabc"),
    ],
)
def test_filter_redacts_every_shape_of_secret_it_knows(line: str, secret: str) -> None:
    from checkpointkit.adapters._options import SecretFilter

    record = logging.LogRecord("botocore.auth", logging.DEBUG, __file__, 1, "%s", (line,), None)
    assert SecretFilter().filter(record) is True  # kept, never dropped
    message = record.getMessage()
    assert secret not in message and "***" in message
