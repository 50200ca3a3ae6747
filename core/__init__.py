"""checkpointkit: durable checkpoints for async Python workflows, on any storage.

This module only re-exports; every name lives in a module of its own. The
names are imported on first use (PEP 562), so that importing a submodule
(``checkpointkit.conformance.plugin``, which pytest loads in every session of an
environment where checkpointkit is installed) does not import the runner, the
store and the codec too.
"""

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

if _TYPE_CHECKING:
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

_WHERE = {
    "CREATE": "storage",
    "Capabilities": "storage",
    "Checkpoint": "store",
    "CheckpointCorrupted": "errors",
    "CheckpointSaveError": "errors",
    "CheckpointStore": "store",
    "CheckpointkitError": "errors",
    "Codec": "codec",
    "ConfigurationError": "errors",
    "DecodeError": "errors",
    "DecryptionError": "errors",
    "EncodeError": "errors",
    "Encryption": "crypto",
    "GetResult": "storage",
    "IfMatch": "storage",
    "InputRequest": "store",
    "InvalidKey": "errors",
    "Lease": "store",
    "LeaseLost": "errors",
    "NondeterminismError": "errors",
    "NotFound": "errors",
    "OVERWRITE": "storage",
    "OutcomeUnknown": "errors",
    "PreconditionFailed": "errors",
    "PutMode": "storage",
    "RunBusy": "errors",
    "RunExists": "errors",
    "RunResult": "runner",
    "StateClosed": "errors",
    "StepContext": "runner",
    "StepState": "runner",
    "Storage": "storage",
    "StorageBase": "storage",
    "StorageClosed": "errors",
    "StorageError": "errors",
    "StorageUnavailable": "errors",
    "Workflow": "runner",
    "context": "runner",
    "default_codec": "codec",
    "open_storage": "registry",
    "parallel": "runner",
    "step": "runner",
    "validate_key": "keys",
    "validate_prefix": "keys",
}


def __getattr__(name: str) -> _Any:
    module = _WHERE.get(name)
    if module is None:
        # A submodule that was never imported (``checkpointkit.store``), as before.
        try:
            return _importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
