"""Bad configuration gives one clear line, and credentials are never printed (S3 adapter)."""

from __future__ import annotations

import asyncio
import sys
import time
import traceback
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
from checkpointkit import ConfigurationError, StorageUnavailable, open_storage
from checkpointkit.adapters.s3 import S3Storage
from checkpointkit.conformance.servers import free_port
from checkpointkit.conformance.servers.s3 import moto_auth_server

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYSECRETKEY"
ACCESS = "AKIACHECKPOINTKITTEST"


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text, text
    return text


def assert_no_secret(exc: BaseException) -> None:
    shown = "".join(traceback.format_exception(exc))
    assert SECRET not in shown
    assert ACCESS not in str(exc)


@pytest.fixture(scope="module")
def auth_endpoint() -> Iterator[str]:
    """A moto server that checks credentials (and so rejects every access key)."""
    with moto_auth_server() as url:
        yield url


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


async def test_missing_bucket_names_it_and_offers_create(
    make_s3: Callable[..., S3Storage],
) -> None:
    async with make_s3(bucket="ckk-no-such-bucket") as storage:
        with pytest.raises(ConfigurationError) as info:
            await storage.put("k", b"x")
    text = one_line(info.value)
    assert "'ckk-no-such-bucket'" in text
    assert "does not exist" in text
    assert "create=True" in text


async def test_wrong_credentials_give_one_clear_line(auth_endpoint: str) -> None:
    storage = S3Storage(
        "bucket",
        endpoint_url=auth_endpoint,
        region="us-east-1",
        access_key_id=ACCESS,
        secret_access_key=SECRET,
        retries=0,
    )
    async with storage:
        with pytest.raises(ConfigurationError) as info:
            await storage.get("k")
    text = one_line(info.value)
    assert "rejected the credentials" in text
    assert_no_secret(info.value)


async def test_unreachable_endpoint_fails_within_the_timeout() -> None:
    port = free_port()  # nothing listens there
    storage = S3Storage(
        "bucket",
        endpoint_url=f"http://127.0.0.1:{port}",
        region="us-east-1",
        access_key_id=ACCESS,
        secret_access_key=SECRET,
        timeout=1.0,
        retry_backoff=0.05,
    )
    started = time.monotonic()
    async with storage:
        with pytest.raises(StorageUnavailable) as info:
            await storage.get("k")
    elapsed = time.monotonic() - started
    assert elapsed < 1.0 + 2.0  # the timeout, plus generous slack
    text = one_line(info.value)
    assert "cannot connect" in text
    assert isinstance(info.value.__cause__, Exception)  # the backend's own error is chained
    assert_no_secret(info.value)


async def test_silent_endpoint_times_out_within_the_timeout(silent_port: int) -> None:
    storage = S3Storage(
        "bucket",
        endpoint_url=f"http://127.0.0.1:{silent_port}",
        region="us-east-1",
        access_key_id=ACCESS,
        secret_access_key=SECRET,
        timeout=1.0,
        read_timeout=0.3,
    )
    started = time.monotonic()
    async with storage:
        with pytest.raises(StorageUnavailable, match="timed out"):
            await storage.put("k", b"x")
    assert time.monotonic() - started < 1.0 + 2.0


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("s3://bucket?multipart_threshold=big", "multipart_threshold"),
        ("s3://bucket?colour=blue", "'colour'"),
        ("s3://bucket?create=maybe", "create"),
        ("s3://bucket?timeout=0", "timeout"),
        ("s3://bucket?part_size=1024", "part_size"),
        ("s3://bucket?page_size=5000", "page_size"),
        ("s3://bucket?endpoint_url=ftp://host", "endpoint_url"),
        ("s3://bucket?region=a&region=b", "'region'"),
        ("s3://b", "bucket name"),
        ("s3:///prefix", "no bucket"),
        ("s3://bucket/a/../b", "prefix"),
        ("s3://bucket?addressing_style=sideways", "addressing_style"),
        ("s3://bucket?cancel_grace=-1", "cancel_grace"),
        ("s3://bucket?cancel_grace=soon", "cancel_grace"),
        ("s3://bucket?max_key_bytes=0", "max_key_bytes"),
        ("s3://bucket?max_key_bytes=1025", "max_key_bytes"),
    ],
)
def test_bad_url_names_what_is_wrong(url: str, named: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        open_storage(url)
    assert named in one_line(info.value)


@pytest.mark.parametrize(
    "url",
    [
        f"s3://{ACCESS}:{SECRET}@bucket/prefix",
        f"s3://bucket?secret_access_key={SECRET}",
        f"s3://bucket?aws_secret_access_key={SECRET}",
    ],
)
def test_credentials_in_the_url_are_refused_without_echoing_them(url: str) -> None:
    with pytest.raises(ConfigurationError, match="credential") as info:
        open_storage(url)
    assert SECRET not in str(info.value)


def test_unknown_option_is_named() -> None:
    with pytest.raises(ConfigurationError, match="'colour'"):
        S3Storage.from_url("s3://bucket", colour="blue")


def test_options_override_url_parameters() -> None:
    storage = S3Storage.from_url("s3://bucket/p?region=eu-west-1&page_size=10", region="us-east-1")
    assert storage.region == "us-east-1"
    assert storage.prefix == "p"


def test_cancel_grace_is_a_url_parameter_and_zero_is_allowed() -> None:
    assert S3Storage.from_url("s3://bucket")._cancel_grace == 0.25
    assert S3Storage.from_url("s3://bucket?cancel_grace=0.5")._cancel_grace == 0.5
    assert S3Storage.from_url("s3://bucket?cancel_grace=0")._cancel_grace == 0.0


def test_half_given_credentials_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="both or neither"):
        S3Storage("bucket", access_key_id=ACCESS)


def test_endpoint_option_replaces_host_and_port() -> None:
    storage = S3Storage("bucket", endpoint_url="http://127.0.0.1:9000/", endpoint=("127.0.0.1", 1))
    assert storage.endpoint_url == "http://127.0.0.1:1/"
    storage = S3Storage("bucket", endpoint="127.0.0.1:2")
    assert storage.endpoint_url == "http://127.0.0.1:2"


def test_repr_shows_where_but_never_credentials() -> None:
    storage = S3Storage(
        "bucket",
        "pre",
        endpoint_url="http://127.0.0.1:9000",
        access_key_id=ACCESS,
        secret_access_key=SECRET,
        session_token="SESSIONTOKEN",
    )
    shown = repr(storage)
    assert "'bucket'" in shown
    assert "'pre'" in shown
    for secret in (SECRET, ACCESS, "SESSIONTOKEN"):
        assert secret not in shown
        assert secret not in str(vars(storage).get("__repr__", ""))


def test_missing_extra_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "aioboto3", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "checkpointkit.adapters.s3")
    with pytest.raises(ConfigurationError, match=r'pip install "checkpointkit\[s3\]"'):
        open_storage("s3://bucket")
