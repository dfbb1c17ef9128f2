"""Moved to :mod:`crfkit.training.partial`; this name is kept for one release (a re-export)."""

from .training.partial import (
    ANY,
    PartialObjective,
    allowed_matrix,
    is_partial,
    parse_cell,
    parse_cells,
    placeholders,
)

__all__ = [
    "ANY",
    "PartialObjective",
    "allowed_matrix",
    "is_partial",
    "parse_cell",
    "parse_cells",
    "placeholders",
]
