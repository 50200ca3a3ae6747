"""FileCheckpointStorage: load and delete of a long checkpoint id raise OSError.

Standalone reproduction (agent-framework-core; no checkpointkit needed):

    pip install agent-framework-core
    python agent_framework_file_long_checkpoint_id.py

The storage protocol says that ``load`` of an id that no checkpoint has raises
``WorkflowCheckpointException``, and that ``delete`` of one returns False.
``InMemoryCheckpointStorage`` does both for any id. ``FileCheckpointStorage``
names a checkpoint's file after its id: for an id longer than the file system's
limit on a name (255 bytes on most), ``load`` and ``delete`` raise
``OSError: [Errno 36] File name too long`` instead, which a caller that handles
"no such checkpoint" (an API resuming from an id it was given) does not catch.
A ``save`` of a checkpoint whose id holds a ``/`` raises ``FileNotFoundError``
(its file would be in a folder that does not exist). Exit status 1 when ``load``
or ``delete`` of the long id raises anything but what the protocol says.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from typing import Any

from agent_framework import (
    FileCheckpointStorage,
    InMemoryCheckpointStorage,
    WorkflowCheckpoint,
    WorkflowCheckpointException,
)

LONG_ID = "c" * 300


def said(exc: Exception) -> str:
    """The exception's type and reason, without the (temporary) path."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"{type(exc).__name__}: [Errno {exc.errno}] {exc.strerror}"
    return type(exc).__name__


async def answers(storage: Any) -> tuple[str, str]:
    """What ``load`` and ``delete`` of `LONG_ID` (stored nowhere) answer."""
    try:
        await storage.load(LONG_ID)
        loaded = "a checkpoint"
    except WorkflowCheckpointException:
        loaded = "WorkflowCheckpointException"
    except Exception as exc:
        loaded = said(exc)
    try:
        deleted = repr(await storage.delete(LONG_ID))
    except Exception as exc:
        deleted = said(exc)
    return loaded, deleted


async def main() -> int:
    memory = await answers(InMemoryCheckpointStorage())
    print(
        f"InMemoryCheckpointStorage: load of a 300-character id: {memory[0]}; delete: {memory[1]}"
    )
    with tempfile.TemporaryDirectory() as folder:
        storage = FileCheckpointStorage(folder)
        files = await answers(storage)
        print(f"FileCheckpointStorage: load of a 300-character id: {files[0]}; delete: {files[1]}")
        try:
            await storage.save(
                WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h", checkpoint_id="a/b")
            )
            saved = "saved"
        except Exception as exc:
            saved = said(exc)
        print(f"FileCheckpointStorage: save of the id 'a/b': {saved}")
    if files != ("WorkflowCheckpointException", "False"):
        print(
            "BUG: FileCheckpointStorage's load and delete of an id longer than a file name "
            "raise OSError, not WorkflowCheckpointException and False"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
