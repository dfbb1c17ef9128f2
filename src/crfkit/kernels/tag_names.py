"""Tagging a batch given as joined attribute names: the hash lookups of
:mod:`crfkit.kernels.strtable` and the fused emissions + Viterbi of
:func:`crfkit.kernels.chain_viterbi.tag_codes_seqs`, per chunk of sequences, in one call
(``CRFModel.tag`` of attribute strings: :mod:`crfkit.features.nametable`).

The chunks run on numba's thread pool (:func:`tag_names_all`) or, for one chunk, in the calling
thread (:func:`tag_names_seqs`); a chunk's codes are looked up just before its sequences are
tagged, so both the lookups and the decoding are spread over the threads.
"""

from __future__ import annotations

from numba import njit, prange

from .chain_exp import FAST
from .chain_viterbi import tag_codes_seqs
from .strtable import probe_range


@njit(cache=True, nogil=True, fastmath=FAST)
def tag_names_seqs(
    buf,
    st,
    slots,
    blob,
    cnt,
    val,
    seq_ptr,
    ent_ptr,
    s0,
    s1,
    attr_ptr,
    feat_label,
    w,
    trans,
    codes,
    out,
    path_score,
):
    """The codes of the names of sequences s0..s1-1 (entries ``ent_ptr[s0]:ent_ptr[s1]`` of
    ``buf``, starts ``st``; :func:`crfkit.kernels.strtable.probe_range`) into ``codes``, then their
    Viterbi labels into ``out`` and best path scores into ``path_score``
    (:func:`crfkit.kernels.chain_viterbi.tag_codes_seqs`)."""
    probe_range(buf, st, ent_ptr[s0], ent_ptr[s1], slots, blob, codes)
    tag_codes_seqs(
        codes, cnt, val, seq_ptr, ent_ptr, s0, s1, attr_ptr, feat_label, w, trans, out, path_score
    )


@njit(parallel=True, cache=True, fastmath=FAST)
def tag_names_all(
    buf,
    st,
    slots,
    blob,
    cnt,
    val,
    seq_ptr,
    ent_ptr,
    bounds,
    attr_ptr,
    feat_label,
    w,
    trans,
    codes,
    out,
    path_score,
):
    """:func:`tag_names_seqs` over the chunks of sequences ``bounds`` on the thread pool."""
    for c in prange(len(bounds) - 1):
        tag_names_seqs(
            buf,
            st,
            slots,
            blob,
            cnt,
            val,
            seq_ptr,
            ent_ptr,
            bounds[c],
            bounds[c + 1],
            attr_ptr,
            feat_label,
            w,
            trans,
            codes,
            out,
            path_score,
        )
