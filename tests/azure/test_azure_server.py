"""The test Azurite server counts as started only when it is the one listening on its port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from checkpointkit.conformance.servers import listens, started


def test_listens_names_the_process_that_holds_a_listening_port() -> None:
    with socket.socket() as held, socket.socket() as other:
        held.bind(("127.0.0.1", 0))
        held.listen()
        other.bind(("127.0.0.1", 0))  # bound, not listening
        assert listens(os.getpid(), held.getsockname()[1]) is True
        assert listens(os.getpid(), other.getsockname()[1]) is False


def test_a_server_is_not_started_while_another_process_holds_its_port() -> None:
    """A parallel worker may take the same "free" port: its socket must not count as ours."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            assert started(idle, port) is False
        finally:
            idle.kill()
            idle.wait()
