"""Azurite: a blob name that holds only staged (uncommitted) blocks is missing to Get Blob
Properties, yet Delete Blob, plain or with ``If-Match: *``, answers 202 and discards the
blocks. checkpointkit's Azure ``delete`` therefore reads the committed ETag and deletes on it.

Run: ``.venv/bin/python scripts/azurite_delete_takes_staged_blocks.py`` (starts
Azurite from the project's ``node_modules``; prints the versions).
"""

from __future__ import annotations

import asyncio
import json
from importlib.metadata import version
from pathlib import Path

from azure.core import MatchConditions
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.blob.aio import BlobServiceClient
from checkpointkit.conformance.servers.azure import azurite_server

ROOT = Path(__file__).resolve().parents[1]


async def main(connection_string: str) -> None:
    async with BlobServiceClient.from_connection_string(connection_string) as service:
        container = service.get_container_client("repro")
        await container.create_container()
        blob = container.get_blob_client("staged-only")
        for how, options in (
            ("plain Delete Blob", {}),
            ("Delete Blob with If-Match: *", {"match_condition": MatchConditions.IfPresent}),
        ):
            await blob.stage_block("YmxvY2sx", b"x" * 10)
            try:
                await blob.get_blob_properties()
                props = "found"
            except ResourceNotFoundError as exc:
                props = f"{exc.status_code} {exc.error_code}"
            try:
                await blob.delete_blob(**options)
                deleted = "202 (deleted)"
            except ResourceNotFoundError as exc:
                deleted = f"{exc.status_code} {exc.error_code}"
            print(f"staged blocks only: Get Blob Properties {props}; {how}: {deleted}")


if __name__ == "__main__":
    lock = json.loads((ROOT / "package-lock.json").read_text())
    azurite = lock["packages"]["node_modules/azurite"]["version"]
    print(f"azurite {azurite}, azure-storage-blob {version('azure-storage-blob')}")
    with azurite_server() as cs:
        asyncio.run(main(cs))
