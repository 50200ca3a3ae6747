"""Typed events of a run, as `Workflow.stream` yields them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .store import InputRequest

__all__ = [
    "CheckpointSaved",
    "Event",
    "InputRequested",
    "RunCompleted",
    "RunFailed",
    "RunPaused",
    "RunStarted",
    "SaveFailed",
    "StepCompleted",
    "StepReplayed",
    "StepStarted",
]


@dataclass(frozen=True, slots=True)
class Event:
    """Base of every run event."""

    run_id: str


@dataclass(frozen=True, slots=True)
class RunStarted(Event):
    """The run began (``resumed`` when continuing a stored run)."""

    resumed: bool


@dataclass(frozen=True, slots=True)
class StepStarted(Event):
    """A step began executing."""

    step: str


@dataclass(frozen=True, slots=True)
class StepCompleted(Event):
    """A step completed; its record is encoded and its save scheduled."""

    step: str


@dataclass(frozen=True, slots=True)
class StepReplayed(Event):
    """A step returned its stored result without executing."""

    step: str


@dataclass(frozen=True, slots=True)
class CheckpointSaved(Event):
    """A step record or a checkpoint reached the storage."""

    what: str


@dataclass(frozen=True, slots=True)
class SaveFailed(Event):
    """A save failed and ``on_save_error="warn"`` kept the run going."""

    message: str
    error: BaseException


@dataclass(frozen=True, slots=True)
class InputRequested(Event):
    """A step asked for input; the run will pause."""

    request: InputRequest


@dataclass(frozen=True, slots=True)
class RunPaused(Event):
    """The run saved a checkpoint with its pending input requests and stopped."""

    pending: tuple[InputRequest, ...]


@dataclass(frozen=True, slots=True)
class RunCompleted(Event):
    """The run completed with ``output``."""

    output: Any


@dataclass(frozen=True, slots=True)
class RunFailed(Event):
    """The run failed with ``error``."""

    error: BaseException
