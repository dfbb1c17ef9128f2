"""Shared helpers for the engine tests (kernels, objective, oracle, L-BFGS, model, encode, train).

Everything here is written independently of the code under test: reference
scores are computed from the *names* of attributes and labels (through
``CRFModel.state_features`` / ``transition_features``), partition functions by
brute-force enumeration of all label paths or by a log-domain numpy
forward-backward.

The helpers are plain functions so that hypothesis tests (which must not use
function-scoped fixtures) can import them: ``from conftest import ...``.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import crfkit
from crfkit.features.encode import build
from crfkit.kernels import chain
from crfkit.model import CRFModel, FeatureSpace
from crfkit.parallel import set_threads


# --------------------------------------------------------------------------- data
def random_sequences(
    rng: np.random.Generator,
    n_seq: int,
    *,
    min_len: int = 1,
    max_len: int = 5,
    n_attr: int = 6,
    n_labels: int = 3,
    max_attrs: int = 3,
    real: bool = False,
    attr_prefix: str = "a",
    label_prefix: str = "L",
):
    """A random tiny labelled corpus (X, Y) in crfkit's input format.

    Tokens carry 0..max_attrs attributes drawn (with repetition) from
    ``n_attr`` names; with ``real=True`` about half of them are
    ``(name, value)`` pairs with a value in [-2, 2].
    """
    labels = [f"{label_prefix}{k}" for k in range(n_labels)]
    X, Y = [], []
    for _ in range(n_seq):
        T = int(rng.integers(min_len, max_len + 1))
        xs = []
        for _t in range(T):
            k = int(rng.integers(0, max_attrs + 1))
            tok = []
            for _a in range(k):
                name = f"{attr_prefix}{int(rng.integers(n_attr))}"
                if real and rng.random() < 0.5:
                    tok.append((name, float(rng.uniform(-2.0, 2.0))))
                else:
                    tok.append(name)
            xs.append(tok)
        X.append(xs)
        Y.append([labels[int(rng.integers(n_labels))] for _ in range(T)])
    return X, Y


def markov_corpus(
    seed: int,
    n_seq: int,
    *,
    noise: tuple[str, int, int] = ("noise", 12, 2),
    real_range: tuple[float, float] = (0.0, 2.0),
    bos: bool = False,
    labels=("A", "B", "C"),
    lengths: tuple[int, int] = (2, 9),
    sig_p: float = 0.85,
    real_p: float = 0.4,
):
    """A learnable tiny corpus (X, Y): Markov-chain labels over three states, sequence lengths drawn
    from ``range(*lengths)``; each token shows its label's signature attribute ``sig=<label>`` with
    probability ``sig_p`` (else a random one), ``noise[2]`` noise attributes ``<noise[0]>=k`` with k
    below ``noise[1]``, with probability ``real_p`` a real-valued ``("len", u)`` with u uniform in
    ``real_range``, and with ``bos`` a ``BOS`` attribute on the first token."""
    rng = np.random.default_rng(seed)
    P = np.array([[0.6, 0.3, 0.1], [0.2, 0.6, 0.2], [0.3, 0.1, 0.6]])
    name, vocab, count = noise
    X, Y = [], []
    for _ in range(n_seq):
        T = int(rng.integers(*lengths))
        y = [int(rng.integers(3))]
        for _t in range(1, T):
            y.append(int(rng.choice(3, p=P[y[-1]])))
        x = []
        for lab in y:
            sig = lab if rng.random() < sig_p else int(rng.integers(3))
            tok = [f"sig={labels[sig]}"] + [
                f"{name}={int(rng.integers(vocab))}" for _ in range(count)
            ]
            if rng.random() < real_p:
                tok.append(("len", float(rng.uniform(*real_range))))
            x.append(tok)
        if bos:
            x[0].append("BOS")
        X.append(x)
        Y.append([labels[k] for k in y])
    return X, Y


def attr_value(a):
    """(name, value) of an attribute given as a string or a (string, value) pair."""
    if isinstance(a, str):
        return a, 1.0
    return a[0], float(a[1])


def token_attr_totals(x):
    """Per token, a dict attribute name -> summed value (repeated attributes add up)."""
    out = []
    for tok in x:
        d: dict[str, float] = {}
        for a in tok:
            n, v = attr_value(a)
            d[n] = d.get(n, 0.0) + v
        out.append(d)
    return out


class Reference:
    """Dense scores of raw sequences under a model, computed from feature names only."""

    def __init__(self, model: CRFModel):
        self.labels = list(model.labels)
        self.L = len(self.labels)
        self.sf = model.state_features()
        tf = model.transition_features()
        self.trans = np.array(
            [[tf.get((a, b), 0.0) for b in self.labels] for a in self.labels], dtype=np.float64
        ).reshape(self.L, self.L)

    def scores(self, x) -> np.ndarray:
        score = np.zeros((len(x), self.L))
        for t, tok in enumerate(x):
            for a in tok:
                n, v = attr_value(a)
                for l, lab in enumerate(self.labels):
                    score[t, l] += self.sf.get((n, lab), 0.0) * v
        return score


# ------------------------------------------------------------- brute force / log domain
def path_score(score: np.ndarray, trans: np.ndarray, path) -> float:
    path = list(path)
    s = sum(score[t, path[t]] for t in range(len(path)))
    s += sum(trans[path[t - 1], path[t]] for t in range(1, len(path)))
    return float(s)


def _lse(x, axis=None):
    m = np.max(x, axis=axis, keepdims=True)
    r = m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))
    return np.squeeze(r, axis=axis) if axis is not None else float(r.reshape(()))


def viterbi_reference(score: np.ndarray, M: np.ndarray) -> tuple[float, list[int]]:
    """The best label path of ``score`` (T x L) and its score, with the transitions into position t
    in ``M[t]`` (T x L x L; ``M[0]`` unused), by a running arg max per label that keeps the first
    maximum (numpy's ``argmax``): ties go to the lowest label, for the last label and every
    predecessor, and a label with no predecessor above -inf gets predecessor 0, as the kernels have
    it."""
    T, L = score.shape
    delta = np.array(score[0], dtype=float)
    back = np.zeros((T, L), dtype=int)
    for t in range(1, T):
        m = delta[:, None] + M[t]
        back[t] = np.argmax(m, axis=0)
        delta = m[back[t], np.arange(L)] + score[t]
    path = [int(np.argmax(delta))]
    for t in range(T - 1, 0, -1):
        path.append(int(back[t, path[-1]]))
    return float(np.max(delta)), path[::-1]


def enumerate_chain(score: np.ndarray, trans: np.ndarray) -> dict:
    """Everything about a chain by enumerating all L^T label paths."""
    T, L = score.shape
    paths = np.array(list(itertools.product(range(L), repeat=T)), dtype=np.int64).reshape(-1, T)
    s = score[np.arange(T)[None, :], paths].sum(axis=1)
    if T > 1:
        s = s + trans[paths[:, :-1], paths[:, 1:]].sum(axis=1)
    logz = _lse(s)
    p = np.exp(s - logz)
    node = np.zeros((T, L))
    for t in range(T):
        np.add.at(node[t], paths[:, t], p)
    edge = np.zeros((L, L))
    for t in range(1, T):
        np.add.at(edge, (paths[:, t - 1], paths[:, t]), p)
    order = np.argsort(-s, kind="stable")
    best = int(order[0])
    gap = float(s[order[0]] - s[order[1]]) if len(s) > 1 else np.inf
    return dict(
        logz=logz,
        node=node,
        edge=edge,
        best_path=paths[best].copy(),
        best_score=float(s[best]),
        gap=gap,
        paths=paths,
        scores=s,
    )


def logdomain_chain(score: np.ndarray, trans: np.ndarray) -> dict:
    """Forward-backward in the log domain (numpy, vectorised over labels, loop over t).

    The log messages are re-centred at every position (their log-sum-exp is
    subtracted and accumulated separately) so that marginals of a chain whose
    log Z is ~1e7 are not lost to cancellation; marginals and edge marginals
    are normalised per position, which is exact since each sums to 1.
    """
    T, L = score.shape
    la = np.empty((T, L))
    lb = np.empty((T, L))
    c = 0.0
    cur = score[0].astype(np.float64)
    for t in range(T):
        if t > 0:
            cur = _lse(la[t - 1][:, None] + trans, axis=0) + score[t]
        k = _lse(cur)
        la[t] = cur - k
        c += k
    logz = c
    lb[T - 1] = 0.0
    for t in range(T - 2, -1, -1):
        cur = _lse(trans + (score[t + 1] + lb[t + 1])[None, :], axis=1)
        lb[t] = cur - _lse(cur)
    lm = la + lb
    node = np.exp(lm - _lse(lm, axis=1)[:, None])
    if T > 1:
        le = la[:-1, :, None] + trans[None, :, :] + (score[1:] + lb[1:])[:, None, :]
        le -= _lse(le.reshape(T - 1, L * L), axis=1)[:, None, None]
        edge = np.exp(le).sum(axis=0)
    else:
        edge = np.zeros((L, L))
    return dict(logz=logz, node=node, edge=edge)


def brute_gradient(space: FeatureSpace, x, y_ids, node: np.ndarray, edge: np.ndarray) -> np.ndarray:
    """Gradient of -log p(y|x) (one sequence) from its marginals, feature by feature, by name."""
    totals = token_attr_totals(x)
    fa = space.feature_attr()
    g = np.zeros(space.n_features)
    T = len(x)
    for k in range(space.n_state):
        name = space.attributes[fa[k]]
        l = int(space.feat_label[k])
        g[k] = sum(
            totals[t].get(name, 0.0) * (node[t, l] - (1.0 if y_ids[t] == l else 0.0))
            for t in range(T)
        )
    L = space.n_labels
    for i in range(L):
        for j in range(L):
            k = space.trans_index[i, j]
            if k >= 0:
                obs = sum(1 for t in range(1, T) if y_ids[t - 1] == i and y_ids[t] == j)
                g[space.n_state + k] = edge[i, j] - obs
    return g


# ------------------------------------------------------------------ hand-built models
def model_from_scores(score: np.ndarray, trans: np.ndarray):
    """A model whose token t of the returned sequence has exactly the emission row score[t].

    Attribute ``tok{t}`` occurs only at position t and has a feature for every
    label; every label pair has a transition feature. Returns (model, X).
    """
    T, L = score.shape
    space = FeatureSpace(
        labels=[f"y{k}" for k in range(L)],
        attributes=[f"tok{t}" for t in range(T)],
        attr_ptr=np.arange(T + 1, dtype=np.int64) * L,
        feat_label=np.tile(np.arange(L, dtype=np.int32), T),
        trans_index=np.arange(L * L, dtype=np.int32).reshape(L, L),
    )
    w = np.concatenate(
        [np.asarray(score, dtype=np.float64).ravel(), np.asarray(trans, dtype=np.float64).ravel()]
    )
    return CRFModel(space, w), [[[f"tok{t}"] for t in range(T)]]


def corpus_dense_scores(space: FeatureSpace, corpus, w: np.ndarray) -> np.ndarray:
    """Emission scores (n_tokens x L) of an encoded corpus, from a dense attribute x label table."""
    W = np.zeros((space.n_attributes, space.n_labels))
    W[space.feature_attr(), space.feat_label] = w[: space.n_state]
    score = np.zeros((corpus.n_tokens, space.n_labels))
    tok_of = np.repeat(np.arange(corpus.n_tokens), np.diff(corpus.tok_ptr))
    np.add.at(score, tok_of, corpus.val[:, None] * W[corpus.attr])
    return score


def dense_transitions(space: FeatureSpace, w: np.ndarray) -> np.ndarray:
    L = space.n_labels
    tr = np.zeros((L, L))
    m = space.trans_index >= 0
    tr[m] = w[space.n_state + space.trans_index[m]]
    return tr


# -------------------------------------------------------------------------- fixtures
@pytest.fixture
def rng():
    return np.random.default_rng(20240611)


@pytest.fixture(scope="session")
def make_corpus():
    """Factory: make_corpus(seed, n_seq, **kw) -> (X, Y), seeded and reproducible."""

    def _make(seed: int = 0, n_seq: int = 5, **kw):
        return random_sequences(np.random.default_rng(seed), n_seq, **kw)

    return _make


@pytest.fixture
def restore_threads():
    yield
    set_threads(None)


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    """``crfkit ARGV...`` in this process: (exit status, stdout, stderr)."""
    from crfkit import cli

    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def random_bigram_attributes(rng, X, n_battr: int = 4, real: bool = True) -> list:
    """Random bigram-observation attribute sequences for the sequences ``X`` (0-2 per token, names
    b0..b{n_battr-1}; with ``real``, about half of them with a value in [-1.5, 1.5])."""
    B = []
    for x in X:
        seq = []
        for _t in range(len(x)):
            tok = []
            for _ in range(int(rng.integers(0, 3))):
                name = f"b{int(rng.integers(n_battr))}"
                tok.append(
                    (name, float(rng.uniform(-1.5, 1.5))) if real and rng.random() < 0.5 else name
                )
            seq.append(tok)
        B.append(seq)
    return B


def sdca_step_prefix(run, i, space, corp, rows):
    """What ``sdca_step`` computes on sequence ``i`` of a ``crfkit.optim.sdca._Dual`` run before its
    line search: the chain marginals at the run's point, the individual gap, f'(0), the end
    curvatures c0, c1 and the line search's entries (``ent`` = ``ls_entries``: the cliques' mu, mu'
    and the separators'), and the direction
    accumulated from ``rows()`` (called after the load, T x L node rows).  Returns a dict of what
    the tests of the step read."""
    from crfkit.kernels import sdca as K

    c, s = corp, space
    t0, t1 = c.seq_ptr[i], c.seq_ptr[i + 1]
    T = t1 - t0
    e0 = run.eptr[i]
    L = s.n_labels
    K.trans_into(run.w, s.n_state, s.trans_index, run.trans)
    K.occ_emissions(c.tok_ptr, run.ok0, run.onk, c.val, run.lab, t0, t1, run.w, 1.0, run.score)
    K.chain_marginals(
        run.score, T, run.trans, run.es, run.alpha, run.beta, run.scale, run.node_n, run.pair_n
    )
    f = run.flat
    tdir = np.zeros((L, L))
    gap, fp0, c0, c1 = K.load_gap(
        T,
        t0,
        e0,
        run.node_store,
        run.pair_store.reshape(-1, L * L),
        run.node_n,
        run.pair_n.reshape(-1, L * L),
        run.m_node,
        run.d_node,
        tdir,
        f,
    )
    # the line search's entries (the cliques' mu, mu', then the separators'): copies of the views
    # the step reads, so that a test may move the store and the scratch afterwards
    ent = tuple(
        a.copy()
        for a in K.ls_entries(T, t0, e0, run.node_store, run.pair_store, run.node_n, run.pair_n)
    )
    acc = np.zeros_like(run.w)
    alist = np.zeros_like(run.alist)
    na = K.accumulate_direction(
        c.tok_ptr, c.attr, run.ok0, run.onk, c.val, run.lab, run.bo, t0, t1, rows(), acc, alist
    )
    return dict(
        t0=t0,
        t1=t1,
        T=T,
        e0=e0,
        f=f,
        tdir=tdir,
        gap=gap,
        fp0=fp0,
        c0=c0,
        c1=c1,
        acc=acc,
        alist=alist,
        na=na,
        ent=ent,
    )


def sdca_mean_divergence(run, n, space, corp):
    """The mean over the ``n`` sequences of KL(stored marginals || the model's at ``run.w``): the
    duality gap of an SDCA run recomputed from its dual store (Le Priol et al., eq. 5)."""
    from crfkit.kernels import sdca as K

    c, s = corp, space
    K.trans_into(run.w, s.n_state, s.trans_index, run.trans)
    tot = 0.0
    for i in range(n):
        t0, t1 = c.seq_ptr[i], c.seq_ptr[i + 1]
        T = t1 - t0
        K.emissions_rows(
            c.tok_ptr,
            c.attr,
            c.val,
            t0,
            t1,
            s.attr_ptr,
            s.feat_label,
            run.full,
            run.w,
            1.0,
            run.score,
        )
        K.chain_marginals(
            run.score, T, run.trans, run.es, run.alpha, run.beta, run.scale, run.node_n, run.pair_n
        )
        e0 = run.eptr[i]
        tot += K.chain_kl(
            run.node_store[t0:t1],
            run.pair_store[e0 : e0 + max(T - 1, 0)],
            run.node_n,
            run.pair_n,
            T,
        )
    return tot / n


def refined_grid_max(fn, grid, half_width: float = 1e-3, points: int = 2001):
    """``(points, values)`` of ``fn`` on a fine grid (spacing 1e-6 by default) around the maximiser
    of ``fn`` over ``grid``, clipped to [0, 1]: the reference a 1-D line search is checked
    against."""
    vals = np.array([fn(g) for g in grid])
    best = grid[vals.argmax()]
    fine = np.linspace(max(0.0, best - half_width), min(1.0, best + half_width), points)
    return fine, np.array([fn(g) for g in fine])


def bcd_blocks_with_and_without_kept_messages(e1, e2, order, reg, kappas, safeguard, seq_ptr):
    """BCD block by block on two engines at the same weights, ``e2``'s kept messages marked stale
    before every block: asserts the same weights after each block, to the bit, and, with the Armijo
    rule (log Z kept current), that every position where both of ``e1``'s kept messages are marked
    valid gives its sequence's log Z.  Returns (positions found valid before the blocks, in total;
    e1's stats; e2's)."""
    from crfkit.kernels import bcd as K

    s1, s2 = np.zeros(K.N_STATS), np.zeros(K.N_STATS)
    reused = 0
    for kappa in kappas:
        for b in range(len(order)):
            CA, CLA, CB, CLB, VA, VB = e1.msg
            reused += int(((VA >= 0) | (VB < np.diff(seq_ptr))).sum())
            e1.attribute_blocks(
                order, b, b + 1, reg, kappa, 1e-4, 10.0, 20, s1, safeguard=safeguard
            )
            e2._invalidate_messages()
            e2.attribute_blocks(
                order, b, b + 1, reg, kappa, 1e-4, 10.0, 20, s2, safeguard=safeguard
            )
            assert np.array_equal(e1.w, e2.w), (kappa, b)
            if safeguard == "armijo":
                for i in range(len(seq_ptr) - 1):
                    s0 = seq_ptr[i]
                    for t in range(VB[i], VA[i] + 1):
                        z = CLA[s0 + t] + CLB[s0 + t] + np.log(np.dot(CA[s0 + t], CB[s0 + t]))
                        assert z == pytest.approx(e1.lz[i], rel=1e-12, abs=1e-12), (b, i, t)
    return reused, s1, s2


# ---------------------------------------------------------------- shared by several test folders
def mapping_rss_kb(arr) -> int:
    """Resident KB of the mappings that hold ``arr``'s memory (Linux ``/proc/self/smaps``; numpy's
    ``MADV_HUGEPAGE`` splits a block into several)."""
    a0 = arr.ctypes.data
    a1 = a0 + max(arr.nbytes, 1)
    total, inside, seen = 0, False, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo < a1 and a0 < hi
                seen = seen or inside
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1])
    assert seen, "no mapping holds the array"
    return total


def bigram_data(
    seed: int,
    n_seq: int = 6,
    *,
    max_len: int = 5,
    n_labels: int = 3,
    real: bool = True,
    n_battr: int = 4,
):
    """(X, Y, B): a random labelled corpus with random bigram attributes (some real-valued)."""
    rng = np.random.default_rng(seed)
    X, Y = random_sequences(rng, n_seq, max_len=max_len, n_labels=n_labels)
    return X, Y, random_bigram_attributes(rng, X, n_battr, real)


def random_model(
    seed: int, support: str = "all", scale: float = 1.0, zero_share: float = 0.0, **kw
):
    """A random model; ``zero_share``: that share of its bigram weights set to 0 (an L1-trained
    model's shape: the kernels then build the scores from the non-zero ones only,
    ``chain.compact_bigram``)."""
    X, Y, B = bigram_data(seed, **kw)
    space, corpus = build(X, Y, B=B, support=support)
    rng = np.random.default_rng(seed + 100)
    w = rng.normal(scale=scale, size=space.n_features)
    if zero_share:
        b = slice(space.bigram_offset, space.dense_offset)
        keep = np.zeros(space.n_bigram, bool)
        keep[
            rng.choice(
                space.n_bigram, size=max(1, int((1 - zero_share) * space.n_bigram)), replace=False
            )
        ] = True
        w[b] *= keep
        ptr, _, _ = chain.compact_bigram(
            w, space.bigram_offset, space.battr_ptr, space.bfeat_pair, 0.3
        )
        assert ptr.shape[0] > 0 and np.count_nonzero(w[b]) > 0  # the compact path is the one tested
    return CRFModel(space, w), X, Y, B, corpus


# ------------------------------------------------ subprocess runs of the command line, shared small
# inputs
CRFKIT_SRC = str(Path(crfkit.__file__).resolve().parents[1])


def crfkit_env() -> dict:
    """The environment of a ``python -m crfkit`` subprocess: this source tree first on PYTHONPATH,
    no proxy."""
    env = dict(os.environ)
    env["PYTHONPATH"] = CRFKIT_SRC + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        env.pop(var, None)
    env["no_proxy"] = "*"
    return env


_AOT_BUILD: dict = {}


def built_aot_dir() -> dict:
    """The tagging kernels compiled ahead of time (:mod:`crfkit.kernels.aot`), built once per test
    session into a temporary folder (about 8 s): ``{"dir", "path", "stale_kept", "stale_newest"}``,
    the names of the modules of other keys planted in the folder before the build that it left, and
    the names of the newest of them (what it should leave)."""
    if not _AOT_BUILD:
        import atexit
        import shutil
        import tempfile
        from importlib.machinery import EXTENSION_SUFFIXES

        from crfkit._runtime import aot
        from crfkit.kernels.aot import build

        d = tempfile.mkdtemp(prefix="crfkit-aot-test-")
        atexit.register(shutil.rmtree, d, True)
        # modules of other keys, the newest last: the build keeps KEEP_OTHERS of them, the newest
        stale = []
        for k in range(aot.KEEP_OTHERS + 2):
            f = Path(d) / (aot.PREFIX + str(k) * 20 + EXTENSION_SUFFIXES[0])
            f.write_bytes(b"an old build")
            os.utime(f, (1e9 + k, 1e9 + k))
            stale.append(f)
        p = build(d)
        kept = [f.name for f in stale if f.exists()]
        for f in stale:  # the folder holds this session's module alone for the tests
            f.unlink(missing_ok=True)
        _AOT_BUILD.update(
            dir=d,
            path=str(p),
            stale_kept=kept,
            stale_newest=[f.name for f in stale[-aot.KEEP_OTHERS :]],
        )
    return _AOT_BUILD


def crfkit_cmd(*argv) -> list[str]:
    """``python -m crfkit ARGV...`` as a subprocess argument list."""
    return [sys.executable, "-m", "crfkit", *[str(a) for a in argv]]


def no_temp_files(*dirs) -> bool:
    """Whether none of ``dirs`` holds a temporary file of ``crfkit.io.atomic`` (``.tmp-*``)."""
    return not [n for d in dirs for n in os.listdir(d) if n.startswith(".tmp-")]


def stream_corpus(d) -> dict:
    """Synthetic chunking files in the directory ``d``: train.txt (60 sentences) and test.txt
    (40)."""
    from crfkit.datasets import synthetic

    synthetic.write(d / "train.txt", 60, seed=1)
    synthetic.write(d / "test.txt", 40, seed=2)
    return {"dir": d, "train": d / "train.txt", "test": d / "test.txt"}


def stream_model(data: dict) -> Path:
    """A model trained (15 iterations) on ``stream_corpus``'s train.txt, saved next to it."""
    from crfkit import cli

    path = data["dir"] / "model.crfkit"
    assert (
        cli.main(["train", str(data["train"]), "-m", str(path), "--max-iterations", "15", "-q"])
        == 0
    )
    return path


@pytest.fixture(scope="module")
def chunker(tmp_path_factory):
    """A small chunking model trained on synthetic data: {"dir", "model", "test"} (train.txt in
    "dir")."""
    from crfkit import cli
    from crfkit.datasets import synthetic

    d = tmp_path_factory.mktemp("rough")
    synthetic.write(d / "train.txt", 40, seed=1)
    synthetic.write(d / "test.txt", 8, seed=2)
    m = d / "m.crfkit"
    assert (
        cli.main(["train", str(d / "train.txt"), "-m", str(m), "--max-iterations", "10", "-q"]) == 0
    )
    return {"dir": d, "model": m, "test": d / "test.txt"}


_SRC = os.path.dirname(os.path.dirname(os.path.abspath(crfkit.__file__)))


# ----------------------------------------------------------------------- a loader under a memory
# limit
CHILD = textwrap.dedent(r"""
    import contextlib, io, json, resource, sys, time, traceback
    import numpy as np
    from crfkit import cli
    from crfkit.errors import CrfkitError
    from crfkit.model import CRFModel

    def status(key):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024

    def reset_peak():
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")      # resets VmHWM, the peak resident size
        except OSError:
            pass

    G = {"CRFModel": CRFModel, "cli": cli, "np": np}   # code requests share it (set-up once)
    extra = int(sys.argv[1])
    base = status("VmSize")
    resource.setrlimit(resource.RLIMIT_AS, (base + extra, base + extra))
    print(json.dumps({"ready": True, "base": base}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        reset_peak()
        out = {"rss0": status("VmRSS")}
        t0 = time.perf_counter()
        try:
            if req.get("code"):
                exec(req["code"], G)
            else:
                CRFModel.load(req["path"])
            out["outcome"] = "ok"
            if req.get("cli"):
                # a file that loads must also go through every reader of its metadata
                for argv in (["info", "-m", req["path"]], ["tag", "-m", req["path"], req["data"]],
                             ["tag", "-m", req["path"], "--all-marginals", req["data"]]):
                    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                        cli.main(argv)
        except CrfkitError as e:
            out.update(outcome="CrfkitError", type=type(e).__name__, message=str(e))
        except BaseException as e:
            out.update(outcome=type(e).__name__, message=repr(e)[:500], traceback=traceback.format_exc()[-3000:])
        out["seconds"] = time.perf_counter() - t0
        out["grew"] = status("VmHWM") - out["rss0"]     # peak resident size during the request, over the start
        print(json.dumps(out), flush=True)
""")


class LimitedLoader:
    """A child process that loads model files (or runs code: ``ask(code=...)``, in a namespace
    kept across requests) under RLIMIT_AS = its size after imports + ``extra`` bytes; each answer
    holds the ``outcome`` (``ok``, ``CrfkitError`` or another exception's name), ``seconds`` and
    ``grew`` (the peak resident size during the request over the size before it).  Used by the
    fuzz tests of the model file (tests/test_modelfile.py) and of checkpoints
    (tests/training/test_checkpoint_untrusted.py)."""

    def __init__(self, extra: int = 1536 << 20, timeout: float = 120.0):
        self.extra, self.timeout = extra, timeout
        env = dict(
            os.environ,
            PYTHONPATH=_SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
            OPENBLAS_NUM_THREADS="1",
        )
        self.p = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(extra)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        ready = self._reply(300)
        assert ready.get("ready"), ready
        self.base = ready["base"]

    def _reply(self, timeout: float) -> dict:
        r, _, _ = select.select([self.p.stdout], [], [], timeout)
        if not r:
            self.close()
            pytest.fail(f"the loader did not answer within {timeout:g} s (killed)")
        line = self.p.stdout.readline()
        if not line:
            pytest.fail(f"the loader died (exit status {self.p.wait()})")
        return json.loads(line)

    def ask(self, path=None, code=None, cli_data=None) -> dict:
        req = {"path": str(path) if path else None, "code": code}
        if cli_data is not None:
            req.update(cli=True, data=str(cli_data))
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()
        return self._reply(self.timeout)

    def close(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


# --------------------------------------------------------------------------- order
def pytest_addoption(parser):
    parser.addoption(
        "--order",
        default=os.environ.get("CRFKIT_TEST_ORDER", "file"),
        help="the order the tests run in: 'file' (as collected, the default), 'reverse', or "
        "'random:SEED' (shuffled with that seed; 'random' picks one and prints it), to find "
        "tests that depend on what ran before them (also $CRFKIT_TEST_ORDER)",
    )


def resolved_order(order: str) -> str:
    """``order`` (see ``--order``) checked, with a bare 'random' given the seed it picks."""
    import random

    if order in ("file", "reverse"):
        return order
    kind, _, seed = order.partition(":")
    if kind != "random" or (seed and not seed.isdigit()):
        raise pytest.UsageError(f"--order {order!r}: expected file, reverse, random or random:SEED")
    return order if seed else f"random:{random.SystemRandom().randrange(10**6)}"


def ordered(items: list, order: str) -> tuple[list, str]:
    """``items`` in the order ``order`` names (see ``--order``), and that order resolved
    (:func:`resolved_order`)."""
    import random

    order = resolved_order(order)
    if order == "file":
        return list(items), order
    if order == "reverse":
        return list(reversed(items)), order
    out = list(items)
    random.Random(int(order.partition(":")[2])).shuffle(out)
    return out, order


def pytest_configure(config):
    # resolved once, before the header is written: a bare 'random' prints the seed it picked
    config.option.order = resolved_order(config.option.order)


def pytest_collection_modifyitems(config, items):
    items[:] = ordered(items, config.option.order)[0]


def pytest_report_header(config):
    order = config.option.order
    return f"test order: {order} (rerun with --order {order})" if order != "file" else None
