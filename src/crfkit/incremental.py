"""Moved to :mod:`crfkit.training.incremental`; this name is kept for one release (a re-export)."""

from .training.incremental import Gated, IncrementalResult, active_attributes, train_incremental

__all__ = ["Gated", "IncrementalResult", "active_attributes", "train_incremental"]
