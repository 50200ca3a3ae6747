"""Each storage's client is built from a session of its own that shares the process's
botocore data loader (the S3 model parsed once, not once per storage)."""

from __future__ import annotations

from checkpointkit.adapters.s3 import S3Storage


def _storage(n: int) -> S3Storage:
    return S3Storage(
        f"bucket-{n}",
        endpoint_url="http://127.0.0.1:1",  # nothing answers: opening sends no request
        access_key_id=f"AKIA{n:016d}",
        secret_access_key=f"secret-{n}",
    )


async def test_storages_share_one_data_loader_and_keep_their_own_credentials() -> None:
    clients, loaders = [], []
    for n in range(3):
        storage = _storage(n)
        try:
            client = await storage._open()
            credentials = client._get_credentials()
            clients.append((credentials.access_key, credentials.secret_key))
            loaders.append(client._loader)
        finally:
            await storage.aclose()
    assert clients == [(f"AKIA{n:016d}", f"secret-{n}") for n in range(3)]
    assert loaders[0] is loaders[1] is loaders[2]
    paths = list(loaders[0].search_paths)
    storage = _storage(9)
    try:
        await storage._open()
    finally:
        await storage.aclose()
    assert loaders[0].search_paths == paths  # opening a storage adds no search path
