"""Every adapter satisfies the ``Storage`` protocol, for the type checker and at run time.

The ``*_as_storage`` functions below assign an adapter instance to a variable
typed ``Storage``; :func:`test_adapters_type_check_as_storage` runs mypy
(strict, the project's configuration) on this very file, so a signature that
drifts from the protocol (a renamed keyword, a missing method, a sync method
where the protocol has an async one) fails the suite, as obstore's
``tests/obspec/test-store.yml`` does for its stores. A control snippet proves
that the check bites.
"""

from __future__ import annotations

import importlib.util
import os
import textwrap
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from checkpointkit.adapters.file import FileStorage
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.storage import Storage

HAVE = {
    name: importlib.util.find_spec(f"checkpointkit.adapters.{name}") is not None
    and importlib.util.find_spec(sdk) is not None
    for name, sdk in (
        ("s3", "aioboto3"),
        ("azure", "azure.storage.blob"),
        ("redis", "redis"),
        ("postgres", "asyncpg"),
    )
}

# A connection string for a local endpoint that nothing listens on: constructing a
# client must not connect, so these objects never reach the network.
_AZURE = (
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
    "AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/"
    "K1SZFPTOtr/KBHBeksoGMGw==;BlobEndpoint=http://127.0.0.1:9/devstoreaccount1;"
)


# -- the type-checked assignments ------------------------------------------------------------
def memory_as_storage() -> Storage:
    storage: Storage = MemoryStorage()
    return storage


def file_as_storage(root: Path) -> Storage:
    storage: Storage = FileStorage(root)
    return storage


def s3_as_storage() -> Storage:
    from checkpointkit.adapters.s3 import S3Storage

    storage: Storage = S3Storage.from_url(
        "s3://bucket/prefix?endpoint_url=http://127.0.0.1:9",
        access_key_id="test",
        secret_access_key="test",
    )
    return storage


def azure_as_storage() -> Storage:
    from checkpointkit.adapters.azure import AzureBlobStorage

    storage: Storage = AzureBlobStorage.from_url("az://container/prefix", connection_string=_AZURE)
    return storage


def redis_as_storage() -> Storage:
    from checkpointkit.adapters.redis import RedisStorage

    storage: Storage = RedisStorage.from_url("redis://127.0.0.1:9/0?prefix=typing")
    return storage


def postgres_as_storage() -> Storage:
    from checkpointkit.adapters.postgres import PostgresStorage

    storage: Storage = PostgresStorage.from_url("postgresql://u@127.0.0.1:9/db?prefix=typing")
    return storage


def _factories(tmp_path: Path) -> dict[str, Callable[[], Storage]]:
    made: dict[str, Callable[[], Storage]] = {
        "memory": memory_as_storage,
        "file": lambda: file_as_storage(tmp_path / "store"),
    }
    optional: dict[str, Callable[[], Storage]] = {
        "s3": s3_as_storage,
        "azure": azure_as_storage,
        "redis": redis_as_storage,
        "postgres": postgres_as_storage,
    }
    made.update({name: f for name, f in optional.items() if HAVE[name]})
    return made


ADAPTERS = [
    "memory",
    "file",
    *(
        pytest.param(n, marks=pytest.mark.skipif(not HAVE[n], reason=f"checkpointkit[{n}] missing"))
        for n in ("s3", "azure", "redis", "postgres")
    ),
]


# -- at run time -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ADAPTERS)
async def test_adapter_instance_is_a_storage_at_run_time(name: str, tmp_path: Path) -> None:
    storage = _factories(tmp_path)[name]()
    try:
        assert isinstance(storage, Storage)
        assert isinstance(type(storage).capabilities.conditional_put, bool)
        listing = storage.list("")
        assert isinstance(listing, AsyncIterator)
    finally:
        await storage.aclose()


def test_an_object_missing_an_operation_is_not_a_storage() -> None:
    class NoList:
        async def put(self, key: str, data: bytes, *, mode: str = "overwrite") -> str:
            return "1"

    assert not isinstance(NoList(), Storage)


# -- for the type checker -------------------------------------------------------------------
def _mypy(*args: str) -> tuple[str, int]:
    api = pytest.importorskip("mypy.api")
    root = Path(__file__).resolve().parents[2]
    cwd = os.getcwd()
    os.chdir(root)  # the project's [tool.mypy] configuration (strict) applies
    try:
        stdout, stderr, status = api.run([*args, "--no-error-summary", "--show-error-codes"])
    finally:
        os.chdir(cwd)
    return stdout + stderr, status


@pytest.mark.slow
def test_adapters_type_check_as_storage() -> None:
    out, status = _mypy(__file__)
    assert status == 0, out


@pytest.mark.slow
def test_type_check_rejects_an_adapter_that_breaks_the_protocol(tmp_path: Path) -> None:
    snippet = textwrap.dedent(
        """
        from checkpointkit.storage import Storage, StorageBase

        class Drifted(StorageBase):
            async def put(  # type: ignore[override]
                self, key: str, data: bytes, *, overwrite: bool = True
            ) -> str:
                return "1"

        storage: Storage = Drifted()
        """
    )
    module = tmp_path / "drifted.py"
    module.write_text(snippet)
    out, status = _mypy(str(module))
    assert status == 1
    assert '"Drifted"' in out and "Storage" in out and "[assignment]" in out, out
