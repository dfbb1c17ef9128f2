"""Memory of the dual store of sdca / oeg (node + pairwise marginals per sequence) against the SAG
family's stored state (node marginals + transition gradient per sequence, the "Mixed" scheme), both
in float32, counted from the encoded corpus.

    PYTHONPATH=src python benchmarks/memory/sdca_memory.py [--data ocr-large conll2000 conll2002-nl ptb]
"""

from __future__ import annotations

import argparse

from crfkit.bench import data as D
from crfkit.optim.sdca import dual_store_bytes


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", nargs="+", default=["ocr-large", "conll2000", "conll2002-nl", "ptb"])
    ap.add_argument("--data-dir", default=None)
    a = ap.parse_args(argv)
    print(
        "| data | n | tokens | labels | features | dual store (sdca, oeg) | SAG state (sag-nus*) | ratio |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in a.data:
        bd = D.load(name, a.data_dir)
        space, corpus, _ = bd.encoded()
        L = space.n_labels
        dual = dual_store_bytes(corpus.seq_ptr, L, 4)
        sag = 4 * (corpus.n_tokens * L + corpus.n_sequences * space.n_trans)
        print(
            f"| {name} | {corpus.n_sequences} | {corpus.n_tokens} | {L} | {space.n_features} | "
            f"{dual / 2**20:.1f} MiB | {sag / 2**20:.1f} MiB | {dual / sag:.1f}x |"
        )


if __name__ == "__main__":
    main()
