"""The test Redis server (valkey-server) starts as the one answering on its port, or not at all."""

from __future__ import annotations

import pytest
from checkpointkit.conformance.servers.redis import ValkeyProcess, valkey_server_or_unavailable


def test_a_server_whose_port_another_server_holds_does_not_start() -> None:
    """A parallel worker may take the same "free" port: its PING must not count as ours."""
    binary = valkey_server_or_unavailable()
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
