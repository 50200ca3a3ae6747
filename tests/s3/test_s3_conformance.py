"""The S3 adapter against the whole conformance suite on moto and SeaweedFS (stall proxy too)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest
from checkpointkit.adapters.s3 import S3Storage
from checkpointkit.conformance import StorageConformance, StorageFixtures, Target, new_location
from checkpointkit.conformance.servers.s3 import moto_descriptor, storage_options

MODEL_BUDGET = 3.0
"""Seconds of the model group per run here (the default, 12, is for users' runs)."""


class S3Fixtures(StorageFixtures):
    @pytest.fixture
    def storage_factory(self, s3_endpoint: str, s3_bucket: str, s3_server_name: str) -> Target:
        # SeaweedFS lists in directory-walk order: its objects must lie in one directory,
        # whose file names hold at most 255 bytes
        seaweedfs = s3_server_name == "seaweedfs"
        names = "flat" if seaweedfs else "keys"
        longest = 255 if seaweedfs else 1024

        async def s3_storage(
            *,
            location: str | None = None,
            endpoint: tuple[str, int] | None = None,
            timeout: float = 20.0,
        ) -> AsyncIterator[S3Storage]:
            async with S3Storage(
                s3_bucket,
                location or new_location(),
                **storage_options(s3_endpoint),
                endpoint=endpoint,
                timeout=timeout,
                object_names=names,
                max_key_bytes=longest,
                # the large values (1 MiB + 1 and 4 MiB + 1) and the sizes above 1 MiB take
                # the multipart path, with its conditional CompleteMultipartUpload
                multipart_threshold=1 << 20,
                part_size=5 << 20,
            ) as storage:
                yield storage

        parts = urlsplit(s3_endpoint)
        assert parts.hostname is not None and parts.port is not None
        moto = s3_server_name == "moto"
        return Target(
            s3_storage,
            name=f"s3 ({s3_server_name}, object_names={names})",
            upstream=(parts.hostname, parts.port),
            # moto answers about 100 requests a second: a fifth of the suite's default volumes;
            # SeaweedFS is faster, but runs twice the tests (all of tests/s3): half
            scale=0.2 if moto else 0.5,
            model_budget=MODEL_BUDGET,
            max_value=16 * 1024 * 1024,  # the size sweep (the default, 64 MiB, for users' runs)
            # past S3's 1000 keys a DeleteObjects (the default, 65,537, for users' runs)
            max_batch=4097 if moto else 2049,
            foreign_descriptors=moto_descriptor if moto else None,  # moto's files of large objects
        )


@pytest.mark.usefixtures("s3_server_name")  # on every server of the conftest's SERVERS
class TestS3Conformance(S3Fixtures, StorageConformance):
    pass
