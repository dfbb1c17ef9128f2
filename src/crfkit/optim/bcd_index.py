"""The inverted indexes of block coordinate descent (:mod:`crfkit.optim.bcd`): per block (state
attribute, bigram attribute, or one observation's both), its sequences and its occurrences in them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels import bcd as K


@dataclass
class Index:
    """Inverted index attribute -> sequences -> occurrences (see crfkit.kernels.bcd)."""

    ap: np.ndarray  # (n_attr+1,) groups of attribute a: ap[a]:ap[a+1]
    gseq: np.ndarray  # sequence of each group
    gptr: np.ndarray  # occurrences of group g: gptr[g]:gptr[g+1]
    otok: np.ndarray  # global token index of each occurrence (ascending within a group)
    oval: np.ndarray  # attribute value at the occurrence (entries of one token merged)

    def sequences(self, a: int) -> np.ndarray:
        return self.gseq[self.ap[a] : self.ap[a + 1]]

    def occurrences(self, a: int) -> tuple[np.ndarray, np.ndarray]:
        o0, o1 = self.gptr[self.ap[a]], self.gptr[self.ap[a + 1]]
        return self.otok[o0:o1], self.oval[o0:o1]


def inverted_index(corpus, n_attributes: int) -> Index:
    return Index(
        *K.build_index(corpus.seq_ptr, corpus.tok_ptr, corpus.attr, corpus.val, int(n_attributes))
    )


def bigram_index(corpus, n_battributes: int) -> Index:
    """Inverted index of the bigram (label-pair x observation) attributes: bigram
    attribute -> sequences -> occurrences, leaving out the first token of every sequence (no
    transition enters it, so its bigram attributes are ignored, as everywhere)."""
    btok_ptr, battr, bval = corpus.bigram_arrays()
    nt = corpus.n_tokens
    if battr.shape[0] == 0:
        btok_ptr = np.zeros(nt + 1, np.int64)
    else:
        counts = np.diff(btok_ptr)
        first = np.zeros(nt, bool)
        first[corpus.seq_ptr[:-1][corpus.seq_ptr[:-1] < nt]] = True
        keep = np.repeat(~first, counts)
        counts = np.where(first, 0, counts)
        btok_ptr = np.zeros(nt + 1, np.int64)
        np.cumsum(counts, out=btok_ptr[1:])
        battr, bval = battr[keep], bval[keep]
    return Index(
        *K.build_index(
            corpus.seq_ptr,
            btok_ptr,
            np.ascontiguousarray(battr, np.int32),
            np.ascontiguousarray(bval, np.float64),
            int(n_battributes),
        )
    )


@dataclass
class JointIndex(Index):
    """Inverted index of the joint blocks (feature spaces with label-pair x observation features):
    block ``j`` holds the state features of attribute ``ua[j]`` and the label-pair features of
    bigram attribute ``ub[j]`` (-1: none); its occurrences carry ``okind`` 0 (state attribute at the
    token) or 1 (bigram attribute at the token), in token order, the state one first at a token that
    has both."""

    okind: np.ndarray = None
    ua: np.ndarray = None
    ub: np.ndarray = None
    block_of_battr: np.ndarray = None  # the joint block of every bigram attribute


def joint_index(corpus, space, blocks: str = "joint") -> JointIndex:
    """``blocks="joint"``: one block per observation, as Wapiti: a state attribute and a bigram
    attribute with the same name (a Wapiti ``*`` pattern makes both) share a block; the other
    attributes have blocks of their own.  ``"separate"``: every state attribute and every bigram
    attribute a block of its own.  Blocks ``0..n_attributes-1`` are the state attributes (with their
    bigram twin, if any), then the bigram attributes without a twin, in their order."""
    na, nb = space.n_attributes, space.n_battributes
    uix = inverted_index(corpus, na)
    bix = bigram_index(corpus, nb)
    if blocks == "joint":
        aidx = space.attr_index
        twin = np.fromiter(
            (aidx.get(name, -1) for name in space.battributes), dtype=np.int64, count=nb
        )
    else:
        twin = np.full(nb, -1, np.int64)
    lone = np.flatnonzero(twin < 0)
    block_of_battr = twin.copy()
    block_of_battr[lone] = na + np.arange(len(lone), dtype=np.int64)
    nblk = na + len(lone)
    ua = np.full(nblk, -1, np.int64)
    ua[:na] = np.arange(na)
    ub = np.full(nblk, -1, np.int64)
    ub[block_of_battr] = np.arange(nb, dtype=np.int64)

    def occ(ix, blocks):
        # per occurrence: its block, its sequence (from its group)
        ng = np.diff(ix.ap)
        gblk = np.repeat(blocks, ng)
        no = np.diff(ix.gptr)
        return np.repeat(gblk, no), np.repeat(ix.gseq, no)

    ublk, useq = occ(uix, np.arange(na, dtype=np.int64))
    bblk, bseq = occ(bix, block_of_battr)
    blk = np.concatenate([ublk, bblk])
    seq = np.concatenate([useq, bseq])
    tok = np.concatenate([uix.otok, bix.otok])
    val = np.concatenate([uix.oval, bix.oval])
    kind = np.concatenate([np.zeros(len(ublk), np.int8), np.ones(len(bblk), np.int8)])
    del uix, bix, ublk, useq, bblk, bseq
    order = np.lexsort((kind, tok, blk))
    blk, seq, tok, val, kind = blk[order], seq[order], tok[order], val[order], kind[order]
    del order
    # groups: runs of (block, sequence); tokens of a sequence are contiguous and sequences in order
    new = np.ones(len(blk), bool)
    if len(blk):
        new[1:] = (blk[1:] != blk[:-1]) | (seq[1:] != seq[:-1])
    gstart = np.flatnonzero(new)
    gptr = np.append(gstart, len(blk)).astype(np.int64)
    gseq = seq[gstart].astype(np.int64)
    ap = np.zeros(nblk + 1, np.int64)
    np.cumsum(np.bincount(blk[gstart], minlength=nblk), out=ap[1:])
    return JointIndex(
        ap,
        gseq,
        gptr,
        np.ascontiguousarray(tok, np.int64),
        np.ascontiguousarray(val, np.float64),
        okind=np.ascontiguousarray(kind),
        ua=ua,
        ub=ub,
        block_of_battr=block_of_battr,
    )
