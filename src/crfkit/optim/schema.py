"""What an optimizer's resumable state may hold: a schema declared next to each optimizer
(``STATE_SCHEMA`` in its module), checked by :func:`crfkit.training.checkpoint.validate_state` before
a state read from a checkpoint (a file from anyone) reaches the optimizer or a kernel.

A schema maps each key of the state to a :class:`Field`: its kind (an array, an int, a float, a
bool, a string, a list of numbers, a dict), for an array its allowed dtypes and shapes (functions of
the model's dimensions, :class:`Dims`), whether its values must be finite, and the range of its
values.  A key the schema does not name is refused; a required key that is missing is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = [
    "BIG",
    "F4F8",
    "I8",
    "RNG_HI",
    "Dims",
    "Field",
    "array",
    "boolean",
    "integer",
    "mapping",
    "number",
    "numbers",
    "text",
    "vector",
]

#: a per-example store kept as float32 or float64 (the ``store`` option)
F4F8 = ("<f4", "<f8")
I8 = ("<i8",)
F8 = ("<f8",)
BIG = 2**62  # counters: at most this (an int64 that cannot overflow when incremented)


@dataclass(frozen=True)
class Dims:
    """The dimensions of the run a state is checked against: ``p`` features, ``n`` sequences, ``T``
    tokens, ``L`` labels, ``A`` attributes (blocks of BCD: ``A`` + bigram attributes), ``n_trans``
    transition features, ``E`` edges (adjacent token pairs), the L-BFGS history ``m`` and the
    delta rule's ``period``; ``params``: the optimizer's own parameters, as the run gives them."""

    p: int
    n: int
    T: int
    L: int
    A: int
    n_trans: int
    E: int
    m: int
    period: int
    params: dict = field(default_factory=dict)


# a shape is a tuple of ints (exact) or ranges (a dimension within them); a field lists the shapes
# it allows
Shape = tuple


@dataclass(frozen=True)
class Field:
    """One key of a state.  ``kind``: ``array``, ``int``, ``float``, ``bool``, ``str``,
    ``numbers`` (a list of numbers) or ``dict``.  ``shapes(dims)``: an array's allowed shapes (each a
    tuple of ints or ranges); ``dtypes``: its allowed dtypes (little-endian ``str`` forms);
    ``finite``: NaN and infinities refused (for arrays and floats); ``lo``/``hi``: the range of the
    values (inclusive); ``required``: the key must be present; ``length(dims)``: a list's longest."""

    kind: str
    shapes: Callable[[Dims], list[Shape]] | None = None
    dtypes: tuple[str, ...] = F8
    finite: bool = True
    lo: float | Callable[[Dims], float] | None = None
    hi: float | Callable[[Dims], float] | None = None
    required: bool = True
    length: Callable[[Dims], int] | None = None
    choices: tuple | None = None


def vector(dim: str = "p", dtypes=F8, required: bool = True, **kw) -> Field:
    """A 1-D array of ``dims.<dim>`` entries."""
    return Field(
        "array", shapes=lambda d: [(getattr(d, dim),)], dtypes=dtypes, required=required, **kw
    )


def array(shapes: Callable[[Dims], list[Shape]], dtypes=F8, required: bool = True, **kw) -> Field:
    """An array of one of ``shapes(dims)``."""
    return Field("array", shapes=shapes, dtypes=dtypes, required=required, **kw)


#: a random generator's state word (uint64)
RNG_HI = 2**64 - 1


def integer(lo=0, hi=BIG, required: bool = True) -> Field:
    return Field("int", lo=lo, hi=hi, required=required)


def number(lo=None, hi=None, finite: bool = True, required: bool = True) -> Field:
    return Field("float", lo=lo, hi=hi, finite=finite, required=required)


def boolean(required: bool = True) -> Field:
    return Field("bool", required=required)


def text(choices: tuple | None = None, required: bool = True) -> Field:
    return Field("str", choices=choices, required=required)


def numbers(length: Callable[[Dims], int], finite: bool = True, required: bool = True) -> Field:
    """A list of at most ``length(dims)`` numbers."""
    return Field("numbers", length=length, finite=finite, required=required)


def mapping(required: bool = True) -> Field:
    """A dict of JSON values (an optimizer's own settings, compared by the optimizer itself)."""
    return Field("dict", required=required)
