"""The reference optimum ``f*`` of a (data set, feature set, l2): a long, tight
L-BFGS run, cached on disk.

As in the SAG paper (§6): L-BFGS until ``||grad f(w)||_inf <= gtol`` (default
1e-7) or ``max_iterations`` (default 1000) iterations, CRFsuite's other
stopping rules switched off.  The entry also holds the test error at ``w*``
(token error in %, and chunk F1 where the labels are chunks).

The cache is ``$CRFKIT_CACHE/fstar`` (else ``$XDG_CACHE_HOME/crfkit/fstar``,
else ``~/.cache/crfkit/fstar``), one ``<key>.json`` (and ``<key>.npy``, the
weights ``w*``) per entry, written atomically.  ``key`` is a SHA-256 of the
encoded training corpus and feature space (:func:`crfkit.training.checkpoint.fingerprint`:
attribute strings, labels, layout, every token), the feature set id and the
regularisation; so a change of data, attributes or ``l2`` is a different entry.
An entry is reused when it was computed at least as tightly as asked (its
``gtol`` no larger and its iteration limit no smaller, or its gradient already
below the asked ``gtol``).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import time
from pathlib import Path

import numpy as np

from ..errors import CrfkitError
from ..io.atomic import atomic_file

__all__ = [
    "fstar_cache_dir",
    "fstar_key",
    "compute_fstar",
    "get_fstar",
    "load_entry",
    "test_scores",
]

CACHE_VERSION = 1
DEFAULT_GTOL = 1e-7
DEFAULT_MAX_ITERATIONS = 1000


def fstar_cache_dir() -> Path:
    """Where f* entries live: ``<crfkit download cache>/fstar``."""
    from ..datasets.download import default_cache_dir

    return Path(default_cache_dir()) / "fstar"


def fstar_key(space, corpus, *, features: str, l2: float, l1: float = 0.0) -> str:
    """The cache key of (training data + feature space, feature set id, l1, l2)."""
    from ..training.checkpoint import fingerprint

    h = hashlib.sha256()
    h.update(f"crfkit-fstar-v{CACHE_VERSION}\0{features}\0{float(l2)!r}\0{float(l1)!r}\0".encode())
    h.update(fingerprint(space, corpus).encode())
    return h.hexdigest()[:32]


def test_scores(space, w, test, test_labels=None) -> dict:
    """Token error (%) and accuracy on the encoded ``test`` corpus at weights
    ``w``, and chunk F1 when ``test_labels`` (the label strings) are given."""
    from ..model import CRFModel
    from ..train import dev_scores

    s = dev_scores(CRFModel(space, np.asarray(w, dtype=np.float64)), test, test_labels)
    out = {"test_accuracy": s["dev_accuracy"], "test_error": 100.0 - s["dev_accuracy"]}
    if "dev_f1" in s:
        out["test_f1"] = s["dev_f1"]
    return out


def _paths(key: str, cache_dir) -> tuple[Path, Path]:
    d = Path(cache_dir) if cache_dir is not None else fstar_cache_dir()
    return d / f"{key}.json", d / f"{key}.npy"


def load_entry(key: str, cache_dir=None) -> dict | None:
    """The cached entry of ``key``, or None (also for an unreadable one)."""
    jp, _ = _paths(key, cache_dir)
    try:
        with open(jp, encoding="utf-8") as f:
            e = json.load(f)
    except (OSError, ValueError):
        return None
    if (
        not isinstance(e, dict)
        or e.get("key") != key
        or not isinstance(e.get("fstar"), (int, float))
    ):
        return None
    return e


def _good_enough(e: dict, gtol: float, max_iterations: int) -> bool:
    if e.get("grad_inf_norm", math.inf) <= gtol:
        return True
    return e.get("gtol", math.inf) <= gtol and e.get("max_iterations", 0) >= max_iterations


def compute_fstar(
    space,
    corpus,
    *,
    l2: float,
    l1: float = 0.0,
    gtol: float = DEFAULT_GTOL,
    max_iterations: int = DEFAULT_MAX_ITERATIONS,
    threads: int | None = None,
    test=None,
    test_labels=None,
    log=None,
) -> tuple[dict, np.ndarray]:
    """Run the tight L-BFGS (OWL-QN when ``l1 > 0``) from zero; returns ``(entry, w*)``."""
    from ..objective import Regularization
    from ..train import train_corpus

    reg = Regularization(l1=float(l1), l2=float(l2))
    t0 = time.perf_counter()
    res = train_corpus(
        space,
        corpus,
        algorithm="lbfgs",
        reg=reg,
        max_iterations=max_iterations,
        gtol=gtol,
        epsilon=0.0,
        delta=0.0,
        threads=threads,
        verbose=log is not None,
        log=log or print,
    )
    seconds = time.perf_counter() - t0
    last = res.history[-1] if res.history else {}
    entry = {
        "fstar": float(res.objective),
        "grad_inf_norm": float(last.get("grad_inf_norm", float("nan"))),
        "iterations": int(res.iterations),
        "status": res.status,
        "effective_passes": float(res.effective_passes),
        "seconds": seconds,
        "l2": float(l2),
        "l1": float(l1),
        "gtol": float(gtol),
        "max_iterations": int(max_iterations),
        "n_train": int(corpus.n_sequences),
        "n_features": int(space.n_features),
        "nnz": int(np.count_nonzero(res.model.weights)),
    }
    if test is not None:
        entry.update(test_scores(space, res.model.weights, test, test_labels))
    return entry, res.model.weights


def _write(entry: dict, w: np.ndarray, key: str, cache_dir) -> None:
    jp, wp = _paths(key, cache_dir)
    with atomic_file(wp) as f:
        buf = io.BytesIO()
        np.save(buf, np.asarray(w, dtype=np.float64))
        f.write(buf.getvalue())
    with atomic_file(jp) as f:  # the JSON last: an entry exists only once its weights do
        f.write((json.dumps(entry, indent=1, sort_keys=True) + "\n").encode("utf-8"))


def load_weights(key: str, cache_dir=None) -> np.ndarray | None:
    """``w*`` of a cached entry, or None."""
    _, wp = _paths(key, cache_dir)
    try:
        return np.load(wp, allow_pickle=False)
    except (OSError, ValueError):
        return None


def get_fstar(
    data,
    *,
    l2: float | None = None,
    l1: float = 0.0,
    gtol: float = DEFAULT_GTOL,
    max_iterations: int = DEFAULT_MAX_ITERATIONS,
    threads: int | None = None,
    cache_dir=None,
    recompute: bool = False,
    log=None,
) -> dict:
    """``f*`` of a :class:`~crfkit.bench.data.BenchData` (``l2`` default ``1/n``):
    from the cache when an entry computed as tightly is there, else computed and
    cached.  The returned entry holds ``fstar``, ``grad_inf_norm``, ``status``,
    ``test_error`` (token error in % at ``w*``), ``key``, ``cached`` (True when
    read from the cache) and ``path``."""
    if gtol <= 0 or max_iterations < 1:
        raise CrfkitError("f*: gtol must be > 0 and max_iterations >= 1")
    l2 = data.default_l2 if l2 is None else float(l2)
    space, corpus, test = data.encoded()
    key = fstar_key(space, corpus, features=data.feature_set, l2=l2, l1=l1)
    jp, _ = _paths(key, cache_dir)
    labels = data.Y_test if data.chunks else None
    if not recompute:
        e = load_entry(key, cache_dir)
        if e is not None and _good_enough(e, gtol, max_iterations):
            if "test_error" not in e:  # e.g. an entry written without a test set: fill it in
                w = load_weights(key, cache_dir)
                if w is not None and len(w) == space.n_features:
                    e.update(test_scores(space, w, test, labels))
                    _write(e, w, key, cache_dir)
            e.update(cached=True, path=str(jp))
            return e
    entry, w = compute_fstar(
        space,
        corpus,
        l2=l2,
        l1=l1,
        gtol=gtol,
        max_iterations=max_iterations,
        threads=threads,
        test=test,
        test_labels=labels,
        log=log,
    )
    entry.update(
        key=key,
        data=data.name,
        features=data.feature_set,
        version=CACHE_VERSION,
        created=time.strftime("%Y-%m-%dT%H:%M:%S"),
    )
    _write(entry, w, key, cache_dir)
    entry.update(cached=False, path=str(jp))
    return entry
