#!/usr/bin/env python
"""Peer models in and out of crfkit (``crfkit.interop``) on CoNLL-2000 chunking: exactness and speed.

Per format (a :class:`Format` in :data:`FORMATS`; CRFsuite here, CRF++ and Wapiti added beside it):

* **import**: the peer trains a model on the full CoNLL-2000 train set (its own trainer, limited to
  ``--peer-iterations`` iterations: exactness does not depend on convergence); crfkit reads it
  (median of 3 reads, beside crfkit's own load of the same model saved as a crfkit file: the
  ratio) and tags the test set; the peer's own tagger tags it too.  Reported: the share of test
  tokens tagged identically, the tokens that differ and how many of those are ties (the two paths
  score the same under the model, to 1e-9 relative), the largest node-marginal difference (where
  the peer gives marginals), the tagging speed of the imported model against the same model loaded
  from its crfkit file.
* **export**: crfkit trains a model on the same data (``--crfkit-iterations``), writes it in the
  peer's format (median of 3 writes, beside crfkit's own save: the ratio), the peer's tagger loads
  it and tags the test set; reported as for import, against crfkit's labels and marginals.
* CRFsuite only: ``crfkit.CRF(model_filename=<the peer's .crfsuite file>).predict`` against
  ``sklearn_crfsuite.CRF(model_filename=...).predict`` on the test set.

CRFsuite's attributes are the chunking example's (``conll2000_vs_crfsuite.attributes``); python-crfsuite
trains with ``lbfgs``, c2=1.  A format's class says how the peer trains and tags (CRF++ and Wapiti: their
binaries on column files with templates) and how crfkit trains the model it exports.

Usage:  python benchmarks/peers/interop_roundtrip.py [--formats crfsuite] [--data-dir DIR]
        [--peer-iterations 50] [--crfkit-iterations 50] [--results FILE.jsonl] [--keep DIR]
        [--peer-model FILE --crfkit-model FILE]  (rerun with the models of a --keep run)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402
from conll2000_vs_crfsuite import data_dir, load  # noqa: E402


def median_time(fn, runs: int = 3) -> tuple[float, object]:
    """Median seconds of ``runs`` calls of ``fn()`` and the last call's result."""
    times, out = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def compare(model, X, peer_labels, peer_marg=None, ours=None) -> dict:
    """Token agreement between crfkit's ``model`` and the peer's labels on ``X``; the tokens that
    differ, and how many are ties (the two label sequences equally probable under ``model``); the
    largest node-marginal difference when the peer's marginals (per sequence, tokens x crfkit's
    labels) are given."""
    if ours is None:
        ours = model.tag(X)
    n = sum(len(y) for y in ours)
    same = sum(a == b for ya, yb in zip(ours, peer_labels) for a, b in zip(ya, yb))
    diff_seqs = [i for i, (ya, yb) in enumerate(zip(ours, peer_labels)) if ya != yb]
    ties = 0
    if diff_seqs:
        Xd = [X[i] for i in diff_seqs]
        p_ours = model.sequence_probability(Xd, [ours[i] for i in diff_seqs])
        p_peer = model.sequence_probability(Xd, [peer_labels[i] for i in diff_seqs])
        tied = np.abs(p_ours - p_peer) <= 1e-9 * np.maximum(p_ours, p_peer)
        ties = int(
            sum(
                sum(a != b for a, b in zip(ours[i], peer_labels[i]))
                for i, t in zip(diff_seqs, tied)
                if t
            )
        )
    out = {
        "tokens": n,
        "identical_share": same / n,
        "differing_tokens": n - same,
        "differing_tokens_in_ties": ties,
    }
    if peer_marg is not None:
        corpus = model.encode(X)
        m, _ = model.marginals(corpus)
        p = corpus.seq_ptr
        out["max_marginal_diff"] = max(
            float(np.abs(m[p[i] : p[i + 1]] - pm).max()) for i, pm in enumerate(peer_marg)
        )
    return out


def tag_speed(model, X, rounds: int = 3) -> float:
    """Tokens per second of ``model.tag(X)`` (best of ``rounds`` after a first call)."""
    model.tag(X[:50])
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        model.tag(X)
        best = min(best, time.perf_counter() - t0)
    return sum(len(x) for x in X) / best


class Format:
    """One peer format: how the peer trains and tags, how crfkit trains the model it exports."""

    name = ""

    def available(self) -> str | None:
        """None when the peer can run here, else why not."""
        return None

    def data(self, ddir: str):
        """(train X, train Y, test X, test Y) in the inputs this format's models take."""
        raise NotImplementedError

    def train_peer(self, X, Y, tmp: str, iterations: int) -> str:
        """Path of a model the peer trained on (X, Y)."""
        raise NotImplementedError

    def tag_peer(self, path: str, X, labels: list[str]) -> tuple[list, list | None]:
        """The peer's labels of ``X`` with its model at ``path`` and its node marginals per sequence
        (tokens x ``labels``), or None where the peer gives none."""
        raise NotImplementedError

    def train_crfkit(self, X, Y, iterations: int):
        """The crfkit model to export."""
        from crfkit.train import train

        return train(X, Y, max_iterations=iterations).model

    def write_options(self) -> dict:
        return {}


class Crfsuite(Format):
    name = "crfsuite"

    def available(self):
        try:
            import pycrfsuite  # noqa: F401
        except ImportError:
            return "python-crfsuite is not installed"
        return None

    def data(self, ddir):
        X, Y = load(ddir, "train")
        Xt, Yt = load(ddir, "test")
        return X, Y, Xt, Yt

    def train_peer(self, X, Y, tmp, iterations):
        import pycrfsuite

        tr = pycrfsuite.Trainer(verbose=False)
        for x, y in zip(X, Y):
            tr.append(x, y)
        tr.select("lbfgs")
        tr.set_params({"c2": 1.0, "max_iterations": iterations})
        path = os.path.join(tmp, "peer.crfsuite")
        tr.train(path)
        return path

    def tag_peer(self, path, X, labels):
        import pycrfsuite

        tagger = pycrfsuite.Tagger()
        tagger.open(path)
        tags, margs = [], []
        for x in X:
            tagger.set(pycrfsuite.ItemSequence(x))
            tags.append(tagger.tag())
            margs.append(
                np.array([[tagger.marginal(lab, t) for lab in labels] for t in range(len(x))])
            )
        tagger.close()
        return tags, margs

    def extra(self, peer_path, Xt) -> dict:
        """crfkit.CRF(model_filename=) against sklearn_crfsuite.CRF(model_filename=)."""
        try:
            import sklearn_crfsuite
        except ImportError:
            return {"sklearn_crfsuite": "not installed"}
        import crfkit

        ours = crfkit.CRF(model_filename=peer_path).predict(Xt)
        theirs = sklearn_crfsuite.CRF(model_filename=peer_path).predict(Xt)
        n = sum(len(y) for y in ours)
        same = sum(a == b for ya, yb in zip(ours, theirs) for a, b in zip(ya, yb))
        return {"estimator_vs_sklearn_crfsuite_identical_share": same / n, "tokens": n}


#: the formats this script runs (the CRF++ and Wapiti classes go here)
FORMATS: dict[str, Format] = {"crfsuite": Crfsuite()}


def run_format(fmt: Format, args, tmp: str) -> dict:
    from crfkit import interop
    from crfkit.model import CRFModel

    why = fmt.available()
    if why:
        return {"skipped": why}
    X, Y, Xt, Yt = fmt.data(args.data_dir)
    if args.limit:
        X, Y, Xt, Yt = X[: args.limit], Y[: args.limit], Xt[: args.limit], Yt[: args.limit]
    res: dict = {}
    # ---- import
    if args.peer_model:
        peer_path = args.peer_model
    else:
        t0 = time.perf_counter()
        peer_path = fmt.train_peer(X, Y, tmp, args.peer_iterations)
        res["peer_train_s"] = time.perf_counter() - t0
    t_import, model = median_time(lambda: interop.read_model(peer_path, fmt.name))
    own = os.path.join(tmp, f"imported-{fmt.name}.crfkit")
    model.save(own)
    t_load, own_model = median_time(lambda: CRFModel.load(own))
    tags, margs = fmt.tag_peer(peer_path, Xt, model.labels)
    imp = compare(model, Xt, tags, margs)
    imp.update(
        features=model.n_active,
        model_bytes=os.path.getsize(peer_path),
        import_s=t_import,
        crfkit_load_s=t_load,
        import_over_crfkit_load=t_import / t_load,
        tag_tokens_per_s_imported=tag_speed(model, Xt),
        tag_tokens_per_s_crfkit_file=tag_speed(own_model, Xt),
    )
    imp["tag_speed_ratio_imported_over_crfkit_file"] = (
        imp["tag_tokens_per_s_imported"] / imp["tag_tokens_per_s_crfkit_file"]
    )
    res["import"] = imp
    # ---- export
    if args.crfkit_model:
        cmodel = CRFModel.load(args.crfkit_model)
    else:
        t0 = time.perf_counter()
        cmodel = fmt.train_crfkit(X, Y, args.crfkit_iterations)
        res["crfkit_train_s"] = time.perf_counter() - t0
        cmodel.save(os.path.join(tmp, f"trained-for-{fmt.name}.crfkit"))
    out = os.path.join(tmp, f"exported.{fmt.name}")
    opts = fmt.write_options()
    t_export, _ = median_time(lambda: interop.write_model(cmodel, out, fmt.name, **opts))
    t_save, _ = median_time(lambda: cmodel.save(os.path.join(tmp, "own.crfkit")))
    tags, margs = fmt.tag_peer(out, Xt, cmodel.labels)
    exp = compare(cmodel, Xt, tags, margs)
    exp.update(
        features=cmodel.n_active,
        model_bytes=os.path.getsize(out),
        export_s=t_export,
        crfkit_save_s=t_save,
        export_over_crfkit_save=t_export / t_save,
    )
    res["export"] = exp
    if hasattr(fmt, "extra"):
        res.update(fmt.extra(peer_path, Xt))
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--formats", default=",".join(FORMATS), help="comma-separated formats")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--peer-iterations", type=int, default=50)
    p.add_argument("--crfkit-iterations", type=int, default=50)
    p.add_argument("--results", default=None, help="append the figures to this .jsonl file")
    p.add_argument("--limit", type=int, default=None, help="first N sentences only (smoke runs)")
    p.add_argument(
        "--peer-model", default=None, help="a peer model to import instead of training one"
    )
    p.add_argument(
        "--crfkit-model", default=None, help="a crfkit model to export instead of training one"
    )
    p.add_argument(
        "--keep",
        default=None,
        metavar="DIR",
        help="keep the trained models in DIR (peer.<format>, trained-for-<format>.crfkit), to "
        "pass to --peer-model / --crfkit-model in later runs",
    )
    args = p.parse_args(argv)
    args.data_dir = data_dir(args.data_dir)
    figures = {"load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            tmp = args.keep
        for name in args.formats.split(","):
            fmt = FORMATS[name]
            r = run_format(fmt, args, tmp)
            figures[name] = r
            print(f"== {name}")
            for k, v in r.items():
                if isinstance(v, dict):
                    print(f"  {k}:")
                    for k2, v2 in v.items():
                        print(f"    {k2}: {v2:.6g}" if isinstance(v2, float) else f"    {k2}: {v2}")
                else:
                    print(f"  {k}: {v:.6g}" if isinstance(v, float) else f"  {k}: {v}")
    figures["load_after"] = os.getloadavg()
    print(f"load average before {figures['load_before']}, after {figures['load_after']}")
    if args.results:
        import _results

        _results.record(figures, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
