"""Moved to :mod:`crfkit.training.incremental`; this name is kept for one release (a re-export)."""

from .training.incremental import IncrementalResult, active_attributes, train_incremental

__all__ = ["IncrementalResult", "active_attributes", "train_incremental"]
