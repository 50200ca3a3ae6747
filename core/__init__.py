"""checkpointkit: durable checkpoints for async Python workflows, on any storage.

This module only re-exports; every name lives in a module of its own.
"""

from .codec import Codec, default_codec
from .crypto import Encryption
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
    OutcomeUnknown,
    PreconditionFailed,
    RunBusy,
    RunExists,
    StateClosed,
    StorageClosed,
    StorageError,
    StorageUnavailable,
)
from .keys import validate_key, validate_prefix
from .registry import open_storage
from .runner import RunResult, StepContext, StepState, Workflow, context, parallel, step
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
from .store import Checkpoint, CheckpointStore, InputRequest, Lease

__version__ = "0.1.0"

__all__ = [
    "CREATE",
    "OVERWRITE",
    "Capabilities",
    "Checkpoint",
    "CheckpointCorrupted",
    "CheckpointSaveError",
    "CheckpointStore",
    "CheckpointkitError",
    "Codec",
    "ConfigurationError",
    "DecodeError",
    "DecryptionError",
    "EncodeError",
    "Encryption",
    "GetResult",
    "IfMatch",
    "InputRequest",
    "InvalidKey",
    "Lease",
    "LeaseLost",
    "NondeterminismError",
    "NotFound",
    "OutcomeUnknown",
    "PreconditionFailed",
    "PutMode",
    "RunBusy",
    "RunExists",
    "RunResult",
    "StateClosed",
    "StepContext",
    "StepState",
    "Storage",
    "StorageBase",
    "StorageClosed",
    "StorageError",
    "StorageUnavailable",
    "Workflow",
    "context",
    "default_codec",
    "open_storage",
    "parallel",
    "step",
    "validate_key",
    "validate_prefix",
]
