"""Where a run starts and how it ends on the active features: warm starts (:func:`init_weights` maps
a previous model's weights onto a new feature space by name; :func:`start_weights` picks a run's
starting vector from ``init`` / ``w0`` / a checkpoint) and fine-tuning (:func:`fine_tune`: a few
L-BFGS iterations on the non-zero features with a small L2, Lavergne et al. 2010, 5.3.1).
Incremental feature sets, which warm-start each stage from the previous one, are
:mod:`crfkit.training.incremental`.
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import ParameterError
from ..model import CRFModel, FeatureSpace
from ..objective import Objective, Regularization
from .monitor import Trace, dev_scores, training_objective


def init_weights(init, space: FeatureSpace) -> np.ndarray:
    """Starting weights for ``space`` from ``init``: a weight vector of the right length, or a
    :class:`CRFModel` whose weights are mapped by name (state features by (attribute, label),
    transitions by (label, label), bigram-observation features by (bigram attribute, label,
    label), dense weights by (dimension name, label)); features the old model lacks start at 0."""
    if not isinstance(init, CRFModel):
        w = np.array(init, dtype=np.float64, copy=True)
        if w.shape != (space.n_features,):
            raise ParameterError(
                f"init has shape {w.shape}; the feature space has {space.n_features} features"
            )
        return w
    old = init.space
    w = np.zeros(space.n_features)
    L = space.n_labels
    lab = np.array([space.label_index.get(x, -1) for x in old.labels], dtype=np.int64)
    att = np.array([space.attr_index.get(a, -1) for a in old.attributes], dtype=np.int64)
    # state features: key attr * L + label in both spaces
    new_keys = space.feature_attr() * L + space.feat_label.astype(np.int64)
    oa = att[old.feature_attr()] if old.n_state else np.zeros(0, np.int64)
    ol = lab[old.feat_label] if old.n_state else np.zeros(0, np.int64)
    live = (oa >= 0) & (ol >= 0)
    old_keys = oa[live] * L + ol[live]
    if len(new_keys) and len(old_keys):
        order = np.argsort(new_keys, kind="stable")
        pos = np.searchsorted(new_keys[order], old_keys)
        pos = np.minimum(pos, len(order) - 1)
        hit = new_keys[order][pos] == old_keys
        w[order[pos[hit]]] = init.weights[: old.n_state][live][hit]
    if old.n_dense and space.n_dense:
        # dense block: by (dimension name, label)
        dim = {d: j for j, d in enumerate(space.dense_names)}
        Wn, Wo = space.dense_weights(w), old.dense_weights(init.weights)
        for jo, d in enumerate(old.dense_names):
            jn = dim.get(d)
            if jn is not None:
                for lo in range(old.n_labels):
                    if lab[lo] >= 0:
                        Wn[jn, lab[lo]] = Wo[jo, lo]
    ns = space.n_state
    for i in range(old.n_labels):
        for j in range(old.n_labels):
            k = old.trans_index[i, j]
            if k >= 0 and lab[i] >= 0 and lab[j] >= 0:
                kn = space.trans_index[lab[i], lab[j]]
                if kn >= 0:
                    w[ns + kn] = init.weights[old.n_state + k]
    if old.n_bigram and space.n_bigram:
        # bigram-observation features: by (bigram attribute, label, label)
        Lo = old.n_labels
        bat = np.array([space.battr_index.get(a, -1) for a in old.battributes], dtype=np.int64)
        new_keys = space.bfeature_attr() * (L * L) + space.bfeat_pair.astype(np.int64)
        oa = bat[old.bfeature_attr()]
        op = old.bfeat_pair.astype(np.int64)
        oi, oj = lab[op // Lo], lab[op % Lo]
        live = (oa >= 0) & (oi >= 0) & (oj >= 0)
        old_keys = oa[live] * (L * L) + oi[live] * L + oj[live]
        if len(new_keys) and len(old_keys):
            order = np.argsort(new_keys, kind="stable")
            pos = np.minimum(np.searchsorted(new_keys[order], old_keys), len(order) - 1)
            hit = new_keys[order][pos] == old_keys
            ob = init.weights[old.bigram_offset : old.dense_offset][live][hit]
            w[space.bigram_offset + order[pos[hit]]] = ob
    return w


def fine_tune(
    obj,
    corpus,
    space,
    reg,
    x,
    iterations,
    l2,
    threads,
    history,
    *,
    tr_path,
    t0,
    algorithm,
    dev,
    dev_labels,
    verbose,
    log,
):
    """A few L-BFGS iterations on the active features only, with a small L2 and no L1
    (Lavergne et al. 2010, 5.3.1): the zero weights stay zero, the others are re-fitted."""
    from ..optim.lbfgs import lbfgs

    active = np.flatnonzero(x)
    l2 = reg.l2 if l2 is None else float(l2)
    if l2 == 0.0 and reg.l2 == 0.0:
        l2 = 1e-3 / obj.n  # "a small l2 penalty": without one, separable data has no optimum
    sub = Objective(corpus, space, Regularization(l1=0.0, l2=l2), threads=threads)
    full = np.zeros_like(x)

    def fg(z):
        full[active] = z
        f, g = sub.value_and_grad(full)
        return f, g[active]

    base_it = history[-1]["iteration"] if history else 0
    tr = Trace(tr_path, history) if tr_path else None

    def on_iter(info):
        rec = {
            "algorithm": "fine-tune",
            "iteration": base_it + info["iteration"],
            "effective_passes": obj.effective_passes + sub.effective_passes,
            "wall_s": time.perf_counter() - t0,
            "objective": info["f"],
            "grad_inf_norm": info["gnorm_inf"],
            "grad_norm": info["gnorm"],
            "nnz": int(np.count_nonzero(info["x"])),
            "step": info["step"],
            "l2": l2,
            "phase": "fine_tune",
        }
        if dev is not None:
            w = np.zeros_like(x)
            w[active] = info["x"]
            rec.update(dev_scores(CRFModel(space, w), dev, dev_labels))
        history.append(rec)
        if tr:
            tr.write(rec)
        if verbose:
            log(
                f"fine-tune {info['iteration']:3d}  obj {info['f']:.8g}  active {rec['nnz']}  (l2={l2:.3g}, "
                f"{len(active)} features)"
            )
        return None

    try:
        res = lbfgs(
            fg,
            x[active].copy(),
            max_iterations=int(iterations),
            callback=on_iter,
            epsilon=0.0,
            delta=0.0,
            period=10,
        )
    finally:
        if tr:
            tr.close()
    out = np.zeros_like(x)
    out[active] = res.x
    f = training_objective(obj, reg, out)
    if verbose:
        log(
            f"fine-tuned {len(active)} active features for {res.iterations} iterations (l2={l2:.3g}): "
            f"objective {f:.10g} (with the training regularisation)"
        )
    return out, f


def start_weights(space: FeatureSpace, init, w0, resumed: bool) -> np.ndarray | None:
    """A run's starting weights: None when it resumes a checkpoint (the state holds them), those of
    ``init`` (:func:`init_weights`), ``w0``, else zeros."""
    if resumed:
        x0 = None
    elif init is not None:
        x0 = init_weights(init, space)
    else:
        x0 = np.zeros(space.n_features) if w0 is None else np.asarray(w0, dtype=np.float64)
    return x0
