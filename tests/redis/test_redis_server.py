"""The test Redis server (valkey-server) starts as the one answering on its port, or not at all."""

from __future__ import annotations

import pytest
from checkpointkit.conformance.servers import unavailable
from checkpointkit.conformance.servers.redis import ValkeyProcess, find_valkey_server


def test_a_server_whose_port_another_server_holds_does_not_start() -> None:
    """A parallel worker may take the same "free" port: its PING must not count as ours."""
    binary = find_valkey_server()
    if binary is None:
        unavailable("no valkey-server binary")
    first = ValkeyProcess(binary=binary)
    first.start()
    try:
        second = ValkeyProcess(binary=binary, port=first.port)
        try:
            with pytest.raises(RuntimeError, match=f"port {first.port}"):
                second.start()
        finally:
            second.stop()
    finally:
        first.stop()
