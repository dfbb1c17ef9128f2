"""Memory of SAG's stored per-example state, against naive SAG (the table of §6 of the paper).

Naive SAG stores one dense gradient per example: ``n * n_features * 8`` bytes.
The paper's memory-saving schemes, counted here from the encoded corpus
(float64 values, 8 bytes each; index arrays not counted, as a ratio of value
counts):

* *Sparse*: the non-zero entries of each example's gradient: for every
  distinct attribute of the example all of its state features (the marginals
  make every label's entry non-zero), plus all transition features;
* *Marginals*: all node marginals (``T_i x L``) and pairwise marginals
  (``(T_i - 1) x L x L``);
* *Mixed*: node marginals plus the gradient of the transition features
  (``T_i x L + n_trans``): what crfkit's SAG stores (DESIGN.md, "Oracle").

The last columns are what crfkit's SAG family actually holds: the Mixed
values in float32 (``store="float32"``, the default; 4 bytes each), against
the same float64 naive SAG.

:func:`measured_memory` reads what the optimizers themselves report in their
traces (``state_bytes`` and ``naive_state_bytes`` of the last record).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["PAPER", "state_memory", "measured_memory", "format_memory_table"]

#: the paper's table (§6): memory / naive SAG memory
PAPER = {
    "ocr": {"sparse": 7.8e-1, "marginals": 1.1e0, "mixed": 2.1e-1},
    "conll2000": {"sparse": 4.8e-3, "marginals": 7.0e-3, "mixed": 6.1e-4},
    "conll2002-nl": {"sparse": 6.4e-4, "marginals": 3.8e-4, "mixed": 7.0e-5},
    "ptb": {"sparse": 1.3e-3, "marginals": 5.5e-3, "mixed": 3.6e-4},
}


def state_memory(space, corpus) -> dict:
    """Bytes of each scheme for the training ``corpus`` in ``space``, and their
    ratios to naive SAG (``ratio_sparse``, ``ratio_marginals``, ``ratio_mixed``)."""
    n = corpus.n_sequences
    L = space.n_labels
    T = np.diff(corpus.seq_ptr).astype(np.int64)
    naive = n * space.n_features * 8
    # distinct attributes of each sequence
    tok_seq = np.repeat(np.arange(n, dtype=np.int64), T)
    ent_seq = np.repeat(tok_seq, np.diff(corpus.tok_ptr))
    attr = corpus.attr.astype(np.int64)
    keep = attr >= 0
    A = max(space.n_attributes, 1)
    pairs = np.unique(ent_seq[keep] * A + attr[keep])
    rowlen = np.diff(space.attr_ptr)
    sparse_vals = int(rowlen[pairs % A].sum()) + n * (space.n_trans + space.n_dense * L)
    marg_vals = int((T * L).sum() + (np.maximum(T - 1, 0) * L * L).sum())
    mixed_vals = int((T * L).sum()) + n * space.n_trans
    out = {
        "n": n,
        "n_features": int(space.n_features),
        "n_labels": L,
        "n_trans": int(space.n_trans),
        "naive_bytes": int(naive),
        "sparse_bytes": 8 * sparse_vals,
        "marginals_bytes": 8 * marg_vals,
        "mixed_bytes": 8 * mixed_vals,
        "stored_bytes": 4 * mixed_vals,
    }
    for k in ("sparse", "marginals", "mixed", "stored"):
        out[f"ratio_{k}"] = out[f"{k}_bytes"] / naive if naive else float("nan")
    return out


def measured_memory(runs) -> list[dict]:
    """``state_bytes`` / ``naive_state_bytes`` of the last record of each run (the
    :class:`~crfkit.bench.plots.TraceRun` list of a directory) that reports them."""
    out = []
    for r in runs:
        last = r.records[-1]
        sb = last.get("state_bytes")
        if sb is None:
            continue
        nb = last.get("naive_state_bytes")
        out.append(
            {
                "run": r.stem,
                "label": r.label,
                "state_bytes": int(sb),
                "naive_state_bytes": None if nb is None else int(nb),
                "ratio": (sb / nb) if nb else None,
            }
        )
    return out


def _human(b) -> str:
    if b is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(b) < 1024 or unit == "TiB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.1f} {unit}"
        b /= 1024.0
    return str(b)  # not reached


def format_memory_table(rows: Sequence[tuple[str, dict]], measured: Sequence[dict] = ()) -> str:
    """Markdown: per data set (``(name, state_memory(...) + optional "support")``)
    the naive size and each scheme's ratio next to the paper's; then the
    measured state of the traced runs (:func:`measured_memory`)."""
    lines = [
        "| data set | support | n | features | naive SAG | Sparse | Marginals | Mixed | paper Sparse | "
        "paper Marginals | paper Mixed | Mixed / paper | stored (Mixed, float32) | stored / paper Mixed |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in rows:
        base = name.split("[", 1)[0]
        p = PAPER.get(base)
        cells = [
            name,
            str(m.get("support", "-")),
            str(m["n"]),
            str(m["n_features"]),
            _human(m["naive_bytes"]),
            f"{m['ratio_sparse']:.1e}",
            f"{m['ratio_marginals']:.1e}",
            f"{m['ratio_mixed']:.1e}",
        ]
        if p:
            cells += [
                f"{p['sparse']:.1e}",
                f"{p['marginals']:.1e}",
                f"{p['mixed']:.1e}",
                f"{m['ratio_mixed'] / p['mixed']:.2f}",
            ]
        else:
            cells += ["-", "-", "-", "-"]
        stored = m.get("ratio_stored")
        cells.append("-" if stored is None else f"{stored:.1e}")
        cells.append(f"{stored / p['mixed']:.2f}" if (p and stored is not None) else "-")
        lines.append("| " + " | ".join(cells) + " |")
    if measured:
        lines += ["", "| run | stored state | naive SAG | ratio |", "|---|---|---|---|"]
        for r in measured:
            ratio = "-" if r["ratio"] is None else f"{r['ratio']:.1e}"
            lines.append(
                f"| {r['label']} | {_human(r['state_bytes'])} | {_human(r['naive_state_bytes'])} | {ratio} |"
            )
    return "\n".join(lines)
