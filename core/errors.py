"""Every error that checkpointkit raises.

The tree::

    CheckpointkitError
    ├── StorageError                  a storage operation could not be done
    │   ├── NotFound                  the key does not exist (also a KeyError)
    │   ├── PreconditionFailed        create-only on an existing key, or if-match on another version
    │   ├── InvalidKey                the key could escape the root or collide (also a ValueError)
    │   ├── StorageClosed             the storage was closed with aclose()
    │   └── StorageUnavailable        the backend failed or did not answer; its error is chained
    │       └── OutcomeUnknown        a write's request may have left, but no answer came
    ├── ConfigurationError            a bad storage URL, option or missing extra (also a ValueError)
    ├── CheckpointCorrupted           checksum or length mismatch in an envelope
    ├── EncodeError                   a value cannot be encoded; the message names its path
    ├── DecodeError                   bytes that cannot be decoded (unknown version, pickle refused)
    │   └── DecryptionError           wrong or unknown encryption key, or tampered ciphertext
    ├── CheckpointSaveError           a checkpoint save failed and the run failed with it
    ├── NondeterminismError           a replayed workflow called its steps differently
    ├── StateClosed                   a late call on the state of a step or run that has ended
    ├── RunExists                     run() with the id of a stored run (also a ValueError)
    └── RunBusy                       another worker owns the run
        └── LeaseLost                 this worker's lease expired or was taken over (fenced)

Messages name the key or the run and never contain credentials.
"""

from __future__ import annotations

__all__ = [
    "CheckpointCorrupted",
    "CheckpointSaveError",
    "CheckpointkitError",
    "ConfigurationError",
    "DecodeError",
    "DecryptionError",
    "EncodeError",
    "InvalidKey",
    "LeaseLost",
    "NondeterminismError",
    "NotFound",
    "OutcomeUnknown",
    "PreconditionFailed",
    "RunBusy",
    "RunExists",
    "StateClosed",
    "StorageClosed",
    "StorageError",
    "StorageUnavailable",
]


class CheckpointkitError(Exception):
    """Base class of every error raised by checkpointkit."""


class StorageError(CheckpointkitError):
    """A storage operation could not be done."""


class NotFound(StorageError, KeyError):
    """The key does not exist."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class PreconditionFailed(StorageError):
    """A conditional write or delete did not hold.

    Raised for a create-only put on an existing key and for an if-match put or
    delete whose version is not the stored one (S3 412, Azure 409/412, a Redis
    script miss: one error everywhere).
    """


class InvalidKey(StorageError, ValueError):
    """The key is not valid: it could escape the storage's root or collide."""


class StorageClosed(StorageError):
    """The storage was closed; no operation is possible after ``aclose()``."""


class StorageUnavailable(StorageError):
    """The backend failed or did not answer. The backend's own error is chained."""


class OutcomeUnknown(StorageUnavailable):
    """A write may or may not have happened: it timed out or lost its connection after sending.

    The write is atomic (all or nothing) but indeterminate: it may already have
    taken effect, or may still take effect later. Callers that must know read
    the key back; the checkpoint store reconciles by itself, since its records
    are create-only and its heads move by compare-and-swap.
    """


class ConfigurationError(CheckpointkitError, ValueError):
    """A storage URL, an option or an installation is wrong (a missing extra, say)."""


class CheckpointCorrupted(CheckpointkitError):
    """Stored bytes fail their checksum or length check; the message names the key."""


class EncodeError(CheckpointkitError, TypeError):
    """A value cannot be encoded; the message names the path to it (``state.users[3]``)."""


class DecodeError(CheckpointkitError):
    """Bytes that cannot be decoded: unknown format version, unknown codec, refused pickle."""


class DecryptionError(DecodeError):
    """An encrypted envelope could not be decrypted: unknown key id, wrong key or tampering."""


class CheckpointSaveError(CheckpointkitError):
    """A checkpoint could not be saved, so the run failed. The cause is chained."""


class NondeterminismError(CheckpointkitError):
    """On replay, the workflow called a step with other arguments than the recorded run."""


class StateClosed(CheckpointkitError, RuntimeError):
    """The state belongs to a step or run that has ended; late changes are refused.

    A dropped stream's cleanup, or a cancellation handler running after its run
    ended, gets this error instead of silently changing a later run's state.
    """


class RunExists(CheckpointkitError, ValueError):
    """``Workflow.run`` was given the id of a run that is stored already.

    Continue it with ``Workflow.resume(run_id)``, or delete it first. A
    ``ValueError`` too, as it was before this class existed.

    Attributes:
        run_id: the id of the existing run.
    """

    def __init__(self, run_id: str) -> None:
        super().__init__(
            f"run {run_id!r} exists already; use resume() to continue it, "
            "or delete it first (checkpointkit rm)"
        )
        self.run_id = run_id

    def __reduce__(self) -> tuple[type[RunExists], tuple[str]]:
        return (type(self), (self.run_id,))


class RunBusy(CheckpointkitError):
    """Another worker holds the run's lease, or took it over.

    Attributes:
        retry_after: seconds until the holder's lease expires, if known (a
            worker killed mid-run holds it until then; ``Workflow.resume(...,
            wait=...)`` waits for it).
    """

    def __init__(self, message: str = "", *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class LeaseLost(RunBusy):
    """This worker's lease on the run expired or was taken over; its writes are refused."""
