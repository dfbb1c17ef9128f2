"""The two rules for the ``L`` of sag-nus*'s step ``0.5 (1/(L + l2) + 1/(Lbar + l2))``, pass by
pass.

Runs sag-nus* with ``lmax=decayed`` (the default: the largest ``L_i`` the
visits returned, multiplied by ``2^(-1/n)`` per step, as the 2013 SAG code
keeps it) on a benchmark data set (``l2 = 1/n``) and prints after every pass,
from the optimizer's state: the decayed ``L_max``, the current ``max_i L_i``
(what ``lmax=current`` would put in the step at that point), ``Lbar``, the two
halves of the step and the step the current maximum would give, and f - f*
when f* is cached (``crfkit bench fstar``).  It shows how far apart the two
rules are and how much of the step the ``L`` half is.

    PYTHONPATH=src .venv/bin/python benchmarks/papers/sag_lmax_rules.py --data ocr-large --support all --passes 30
"""

from __future__ import annotations

import argparse

from crfkit.bench.data import load
from crfkit.bench.fstar import fstar_key, load_entry
from crfkit.objective import Objective, Regularization
from crfkit.optim import sag as S


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="ocr-large")
    ap.add_argument("--support", default="all", choices=("observed", "all"))
    ap.add_argument("--passes", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    d = load(args.data, None, support=args.support)
    space, corpus, _ = d.encoded()
    l2 = d.default_l2
    obj = Objective(corpus, space, Regularization(l2=l2), threads=1)
    entry = load_entry(fstar_key(space, corpus, features=d.feature_set, l2=l2))
    fstar = entry["fstar"] if entry else None
    shown = "not cached (crfkit bench fstar)" if fstar is None else f"{fstar:.10g}"
    print(f"{d.name} ({d.feature_set}): n = {obj.n}, l2 = {l2:.4g}, f* = {shown}")
    print(
        "pass  Lmax(decayed)  max_i L_i    Lbar   step  0.5/(Lmax+l2)  0.5/(Lbar+l2)  step(max_i L_i)  f - f*"
    )

    def cb(info):
        st = info["state"]()
        Li = st["Li"]
        lbar = Li[Li > 0].mean()
        lcur = Li.max()
        sub = info["f"] - fstar if fstar is not None else float("nan")
        print(
            f"{info['iteration']:4d}  {st['Lmax']:13.2f}  {lcur:9.2f}  {lbar:6.2f}  {info['step']:.4f}  "
            f"{0.5 / (st['Lmax'] + l2):13.4f}  {0.5 / (lbar + l2):13.4f}  "
            f"{0.5 / (lcur + l2) + 0.5 / (lbar + l2):15.4f}  {sub:.4g}",
            flush=True,
        )

    S.sag_nus_star(
        obj, None, reg=obj.reg, max_iterations=args.passes, delta=0.0, seed=args.seed, callback=cb
    )


if __name__ == "__main__":
    main()
