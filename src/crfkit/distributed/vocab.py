"""The reduce step of the vocabulary: per-shard counts
(:class:`~crfkit.distributed.shards.ShardCounts`, computed on the workers) merged on the client into
ONE feature space, with the frequency cut-off applied to the global counts.

The result is the feature space :func:`crfkit.features.encode.build` gives on the concatenation of
the shards in their order: the same labels (first-occurrence order), the same attributes (kept by
the same rule, ordered by decreasing global frequency, ties by first occurrence over the
concatenated files), the same state features (CSR by attribute, labels ascending) and the same
transition features.  ``tests/test_distributed.py`` checks it against ``build`` feature by feature.
"""

from __future__ import annotations

import numpy as np

from ..errors import DataError
from ..features.encode import SUPPORTS
from ..features.encode import feature_table as _feature_table
from ..features.space import FeatureSpace


def merge_counts(
    counts, *, support: str = "observed", transitions: str | None = None, min_freq: float = 0
) -> FeatureSpace:
    """One :class:`FeatureSpace` from the shards' counts (an iterable, in shard order: each is
    dropped once merged, so that the client holds the global dictionary, not every shard's)."""
    if support not in SUPPORTS:
        raise ValueError(f"feature support must be one of {SUPPORTS}, got {support!r}")
    transitions = transitions or support
    if transitions not in SUPPORTS + ("none",):
        raise ValueError(f"transitions must be one of {SUPPORTS + ('none',)}, got {transitions!r}")
    labels: dict[str, int] = {}
    attr_index: dict[str, int] = {}
    # per shard: (global attribute ids, their counts, pairs (attr, label, count), bigrams)
    parts = []
    for sc in counts:
        lmap = np.fromiter(
            (labels.setdefault(x, len(labels)) for x in sc.labels),
            dtype=np.int64,
            count=len(sc.labels),
        )
        setdefault = attr_index.setdefault
        amap = np.fromiter(
            (setdefault(a, len(attr_index)) for a in sc.attributes),
            dtype=np.int64,
            count=len(sc.attributes),
        )
        Ls = len(sc.labels)
        parts.append(
            (
                amap,
                sc.freq,
                amap[sc.pair_attr],
                lmap[sc.pair_label],
                sc.pair_count,
                lmap[sc.trans // Ls] if Ls else sc.trans,
                lmap[sc.trans % Ls] if Ls else sc.trans,
            )
        )
        del sc, amap  # the shard's strings are not kept: only the global dictionary grows
    if not parts:
        raise DataError("no training shards")
    L, A0 = len(labels), len(attr_index)
    attributes_all = list(attr_index)
    del attr_index
    freq = np.zeros(A0, dtype=np.int64)
    for amap, f, *_ in parts:
        freq[amap] += f  # a shard's attributes are distinct: no repeated index
    # (attribute, label) pairs: global keys and their summed counts
    keys = np.concatenate([pa * L + pl for _, _, pa, pl, _, _, _ in parts])
    cnt = np.concatenate([pc for _, _, _, _, pc, _, _ in parts])
    keys, inv = np.unique(keys, return_inverse=True)
    pair_count = np.bincount(inv, weights=cnt, minlength=len(keys))
    del inv, cnt
    if support == "observed":
        keys = keys[pair_count >= min_freq]
        f_attr = keys // L
        f_label = (keys % L).astype(np.int32)
        keep_attr = np.zeros(A0, dtype=bool)
        keep_attr[f_attr] = True
    else:
        keep_attr = freq >= min_freq
        f_attr = f_label = None  # support "all": every label of a kept attribute
    del keys, pair_count
    kept, _, attr_ptr, feat_label = _feature_table(keep_attr, freq, f_attr, f_label, support, L)
    attributes = [attributes_all[k] for k in kept]
    del attributes_all
    if transitions == "all":
        trans_index = np.arange(L * L, dtype=np.int32).reshape(L, L)
    elif transitions == "none":
        trans_index = np.full((L, L), -1, dtype=np.int32)
    else:
        pairs = np.unique(np.concatenate([ti * L + tj for *_, ti, tj in parts]))
        trans_index = np.full((L, L), -1, dtype=np.int32)
        trans_index.reshape(-1)[pairs] = np.arange(len(pairs), dtype=np.int32)
    label_list = [None] * L
    for lab, k in labels.items():
        label_list[k] = lab
    return FeatureSpace(
        labels=label_list,
        attributes=attributes,
        attr_ptr=attr_ptr,
        feat_label=feat_label,
        trans_index=trans_index,
    )
