"""Moved to :mod:`crfkit.training.checkpoint`; this name is kept for one release (a re-export)."""

from .training.checkpoint import (
    FORMAT,
    STATE_ARRAYS,
    VERSION,
    Checkpoint,
    CheckpointError,
    check,
    digest_strings,
    fingerprint,
    load,
    save,
)

__all__ = [
    "FORMAT",
    "STATE_ARRAYS",
    "VERSION",
    "Checkpoint",
    "CheckpointError",
    "check",
    "digest_strings",
    "fingerprint",
    "load",
    "save",
]
