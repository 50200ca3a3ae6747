"""checkpointkit: durable checkpoints for async Python workflows, on any storage.

This module only re-exports; every name lives in a module of its own.
"""

from .errors import (
    CheckpointCorrupted,
    CheckpointkitError,
    CheckpointSaveError,
    ConfigurationError,
    DecodeError,
    DecryptionError,
    EncodeError,
    InvalidKey,
    LeaseLost,
    NondeterminismError,
    NotFound,
    PreconditionFailed,
    RunBusy,
    StorageClosed,
    StorageError,
    StorageUnavailable,
)
from .keys import validate_key, validate_prefix
from .registry import open_storage
from .storage import (
    CREATE,
    OVERWRITE,
    Capabilities,
    GetResult,
    IfMatch,
    PutMode,
    Storage,
    StorageBase,
)

__version__ = "0.1.0"

__all__ = [
    "CREATE",
    "OVERWRITE",
    "Capabilities",
    "CheckpointCorrupted",
    "CheckpointSaveError",
    "CheckpointkitError",
    "ConfigurationError",
    "DecodeError",
    "DecryptionError",
    "EncodeError",
    "GetResult",
    "IfMatch",
    "InvalidKey",
    "LeaseLost",
    "NondeterminismError",
    "NotFound",
    "PreconditionFailed",
    "PutMode",
    "RunBusy",
    "Storage",
    "StorageBase",
    "StorageClosed",
    "StorageError",
    "StorageUnavailable",
    "open_storage",
    "validate_key",
    "validate_prefix",
]
