"""Bad configuration gives one clear line, and credentials are never printed (Azure adapter)."""

from __future__ import annotations

import asyncio
import base64
import secrets
import sys
import time
import traceback
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from checkpointkit import ConfigurationError, NotFound, StorageUnavailable, open_storage
from checkpointkit.adapters.azure import AzureBlobStorage
from checkpointkit.conformance.servers import free_port
from checkpointkit.conformance.servers.azure import ACCOUNT_KEY, ACCOUNT_NAME, connection_string

WRONG_KEY = base64.b64encode(b"not the account key, but well-formed" * 2).decode()


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text, text
    return text


def assert_no_secret(exc: BaseException, *secrets: str) -> None:
    shown = str(exc) + repr(exc)
    for secret in (ACCOUNT_KEY, WRONG_KEY, *secrets):
        assert secret not in shown


@pytest.fixture
async def silent_port() -> AsyncIterator[int]:
    """A port on 127.0.0.1 that accepts connections and never answers."""
    release = asyncio.Event()
    writers: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await release.wait()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        release.set()
        for w in writers:
            w.close()
        server.close()
        await server.wait_closed()


async def test_missing_container_names_it_and_offers_create(
    make_az: Callable[..., AzureBlobStorage],
) -> None:
    async with make_az(container="ckk-no-such-container", create=False) as storage:
        with pytest.raises(ConfigurationError) as info:
            await storage.put("k", b"x")
    text = one_line(info.value)
    assert "'ckk-no-such-container'" in text
    assert "does not exist" in text
    assert "create=True" in text


async def test_create_makes_the_container_before_any_concurrent_first_call(
    make_az: Callable[..., AzureBlobStorage], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first calls of a fresh ``create=True`` storage, made at once, wait for the container.

    A call that found the storage open while another was still creating the
    container used to reach the missing container and fail with "does not exist".
    """
    events: list[str] = []
    async with make_az(container=f"ckk-fresh-{secrets.token_hex(6)}", prefix="") as storage:
        client = storage.client
        real_create, real_blob = client.create_container, client.get_blob_client

        async def create_container(**kwargs: Any) -> Any:
            events.append("create")
            for _ in range(5):  # let every other ready call run as far as it can
                await asyncio.sleep(0)
            result = await real_create(**kwargs)
            events.append("created")
            return result

        def get_blob_client(blob: Any, **kwargs: Any) -> Any:
            events.append("blob")
            return real_blob(blob, **kwargs)

        monkeypatch.setattr(client, "create_container", create_container)
        monkeypatch.setattr(client, "get_blob_client", get_blob_client)
        results = await asyncio.gather(
            *(storage.get(f"k{i}") for i in range(8)), return_exceptions=True
        )
    assert [type(r) for r in results] == [NotFound] * 8, results
    assert events[:2] == ["create", "created"], events  # no blob request before the container


async def test_wrong_credentials_give_one_clear_line(azurite: str, az_container: str) -> None:
    wrong = azurite.replace(ACCOUNT_KEY, WRONG_KEY)
    async with AzureBlobStorage(az_container, connection_string=wrong, retries=0) as storage:
        with pytest.raises(ConfigurationError) as info:
            await storage.get("k")
    text = one_line(info.value)
    assert "rejected the credentials" in text
    assert_no_secret(info.value)
    assert WRONG_KEY not in "".join(traceback.format_exception(info.value, chain=False))


async def test_unreachable_endpoint_fails_within_the_timeout() -> None:
    port = free_port()  # nothing listens there
    storage = AzureBlobStorage(
        "ckk", connection_string=connection_string(port), timeout=1.0, retry_backoff=0.05
    )
    started = time.monotonic()
    async with storage:
        with pytest.raises(StorageUnavailable) as info:
            await storage.get("k")
    assert time.monotonic() - started < 1.0 + 2.0
    text = one_line(info.value)
    assert "cannot connect" in text
    assert isinstance(info.value.__cause__, Exception)
    assert_no_secret(info.value)


async def test_silent_endpoint_times_out_within_the_timeout(silent_port: int) -> None:
    storage = AzureBlobStorage(
        "ckk", connection_string=connection_string(silent_port), timeout=1.0, read_timeout=0.3
    )
    started = time.monotonic()
    async with storage:
        with pytest.raises(StorageUnavailable):
            await storage.put("k", b"x")
    assert time.monotonic() - started < 1.0 + 2.0


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("az://ckk?block_threshold=big", "block_threshold"),
        ("az://ckk?colour=blue", "'colour'"),
        ("az://ckk?create=maybe", "create"),
        ("az://ckk?timeout=-1", "timeout"),
        ("az://ckk?page_size=6000", "page_size"),
        ("az://ckk?block_threshold=2097152", "block_threshold"),
        ("az://ckk?account_url=ftp://host", "account_url"),
        ("az://ckk?account_url=http://h/a?sig=x", "SAS"),
        ("az://ckk?retries=1&retries=2", "'retries'"),
        ("az://Bad_Name", "container name"),
        ("az:///prefix", "no container"),
        ("az://ckk/a/../b", "prefix"),
        ("az://ckk", "connection string"),
        ("az://ckk?cancel_grace=-1", "cancel_grace"),
        ("az://ckk?cancel_grace=soon", "cancel_grace"),
    ],
)
def test_bad_url_names_what_is_wrong(url: str, named: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    with pytest.raises(ConfigurationError) as info:
        open_storage(url)
    assert named in one_line(info.value)


@pytest.mark.parametrize(
    "url",
    [
        f"az://{ACCOUNT_NAME}:{ACCOUNT_KEY}@ckk/prefix",
        f"az://ckk?account_key={ACCOUNT_KEY}",
        f"az://ckk?connection_string=AccountKey%3D{ACCOUNT_KEY}",
        f"az://ckk?sas_token=sig%3D{ACCOUNT_KEY}",
    ],
)
def test_credentials_in_the_url_are_refused_without_echoing_them(url: str) -> None:
    with pytest.raises(ConfigurationError, match="credential") as info:
        open_storage(url)
    assert ACCOUNT_KEY not in str(info.value)


def test_bad_connection_string_is_not_echoed() -> None:
    bad = f"AccountKey={ACCOUNT_KEY};Nonsense"
    with pytest.raises(ConfigurationError, match="connection string") as info:
        AzureBlobStorage("ckk", connection_string=bad)
    assert ACCOUNT_KEY not in str(info.value)
    assert info.value.__cause__ is None  # the SDK's message could quote the string


def test_two_ways_in_are_refused(azurite: str) -> None:
    with pytest.raises(ConfigurationError, match="not both"):
        AzureBlobStorage("ckk", connection_string=azurite, account_url="http://127.0.0.1:1/a")
    with pytest.raises(ConfigurationError, match="carries its credential"):
        AzureBlobStorage("ckk", connection_string=azurite, credential=ACCOUNT_KEY)


def test_unknown_option_is_named(azurite: str) -> None:
    with pytest.raises(ConfigurationError, match="'colour'"):
        AzureBlobStorage.from_url("az://ckk", connection_string=azurite, colour="blue")


def test_options_override_url_parameters(azurite: str) -> None:
    storage = AzureBlobStorage.from_url(
        "az://ckk/p?page_size=10", connection_string=azurite, page_size=20
    )
    assert storage._page_size == 20
    assert storage.prefix == "p"


def test_cancel_grace_is_a_url_parameter_and_zero_is_allowed(azurite: str) -> None:
    def grace(url: str) -> float:
        return AzureBlobStorage.from_url(url, connection_string=azurite)._cancel_grace

    assert grace("az://ckk") == 0.25
    assert grace("az://ckk?cancel_grace=0.5") == 0.5
    assert grace("az://ckk?cancel_grace=0") == 0.0


def test_endpoint_option_replaces_host_and_port(azurite: str) -> None:
    storage = AzureBlobStorage("ckk", connection_string=azurite, endpoint=("127.0.0.1", 1))
    assert storage.account_url == f"http://127.0.0.1:1/{ACCOUNT_NAME}"


def test_repr_shows_where_but_never_credentials(azurite: str) -> None:
    storage = AzureBlobStorage("ckk", "pre", connection_string=azurite)
    shown = repr(storage)
    assert "'ckk'" in shown
    assert "'pre'" in shown
    assert ACCOUNT_KEY not in shown
    sas = "sv=2024-01-01&sig=SECRETSIGNATURE"
    storage = AzureBlobStorage("ckk", account_url=f"http://127.0.0.1:1/a?{sas}")
    assert "SECRETSIGNATURE" not in repr(storage)


def test_missing_extra_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "azure.storage.blob.aio", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "checkpointkit.adapters.azure")
    with pytest.raises(ConfigurationError, match=r'pip install "checkpointkit\[azure\]"'):
        open_storage("az://ckk")
