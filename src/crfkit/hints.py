"""Type aliases of crfkit's public API, for annotations only (the modules that use them import this one
under ``typing.TYPE_CHECKING``).

A sequence is a list of tokens; a token is a list of attributes (a string, or a ``(string, value)``
pair as in python-crfsuite) or, for :class:`crfkit.CRF`, a feature dict as sklearn-crfsuite takes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np

#: one attribute of a token: a name (value 1) or a (name, value) pair
Attribute: TypeAlias = "str | tuple[str, float]"
#: a token: its attributes, or (the estimator) a feature dict {name: value or string}
Token: TypeAlias = "Sequence[Attribute] | Mapping[str, Any]"
#: a list of sequences of tokens
Sequences: TypeAlias = "Sequence[Sequence[Token]]"
#: one label sequence per sequence
LabelSequences: TypeAlias = "Sequence[Sequence[str]]"
#: per sequence per token: None (any label), a label (forced) or a set of labels
Allowed: TypeAlias = "Sequence[Sequence[str | set[str] | frozenset[str] | None]]"
#: (previous, label) pairs that may not follow each other
Forbid: TypeAlias = "Sequence[tuple[str, str]]"
#: one (T x D) real matrix per sequence
DenseBlocks: TypeAlias = "Sequence[np.ndarray]"
#: per sequence, its tokens' column values (a list of strings, or a whitespace-separated line)
Rows: TypeAlias = "Sequence[Sequence[Sequence[str] | str]]"
#: sample weights: one number per sequence, or one for all
SampleWeight: TypeAlias = "float | Sequence[float] | np.ndarray"
