"""``crfkit report``: one self-contained HTML file (or Markdown with PNG images) describing a model
and its training run: the training curves of a trace, the transition weights as a heat map, the
top features per label (filterable), and, on a labelled test file, the per-label and chunk scores,
the confusion matrix and the worst sentences with their marginals (:mod:`crfkit.report`)::

    crfkit report -m runs/conll2000-chunker.crfkit --trace runs/conll2000-trace.jsonl \\
        --test test.txt.gz -o report.html
"""

from __future__ import annotations

import os
import sys

from .common import human_bytes, nonneg_int, print_stderr


def cmd_report(args) -> int:
    from ..model import CRFModel
    from ..report import build_report, write_report

    model = CRFModel.load(args.model)
    labels = [x for x in args.labels.split(",") if x] if args.labels else None
    rep = build_report(
        model,
        model_path=args.model,
        trace=args.trace,
        test=args.test,
        top=args.top,
        worst=args.worst,
        labels=labels,
        attribute=args.attribute,
        fstar=args.fstar,
        threads=args.threads,
        title=args.title,
    )
    fmt = args.format
    out = args.output or ("report.md" if fmt == "md" else "report.html")
    paths = write_report(rep, out, fmt)
    sizes = ", ".join(f"{p} ({human_bytes(os.path.getsize(p))})" for p in paths)
    print_stderr(f"crfkit report: wrote {sizes}")
    sys.stderr.flush()
    return 0


def add_parser(sub) -> None:
    """Add ``report`` to the ``crfkit`` subparsers ``sub``."""
    r = sub.add_parser(
        "report",
        help="an HTML (or Markdown) report on a model, its training run and a test set",
        description="One self-contained HTML file (images inline, no network): the training "
        "curves of a trace (objective or f - f*, gradient norm or duality gap, dev scores, "
        "against iterations and seconds), the transition weights as a heat map, the top positive "
        "and negative features per label (filterable), and with --test the per-label and chunk "
        "scores, the confusion matrix and the worst sentences with their marginals. "
        "--format md writes Markdown with PNG images beside it. Needs matplotlib "
        "(pip install 'crfkit[plot]').",
    )
    r.add_argument("-m", "--model", required=True, help="model file")
    r.add_argument(
        "--trace", metavar="T.jsonl", help="the run's trace (crfkit train --trace; crfkit demo)"
    )
    r.add_argument(
        "--test",
        metavar="FILE",
        help="labelled column file (gold label last) to score the model on",
    )
    r.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="where to write (default report.html, or report.md with --format md)",
    )
    r.add_argument(
        "--format",
        choices=("html", "md"),
        help="html (one self-contained file) or md (Markdown, PNG images beside it); default: md "
        "for an -o ending in .md, else html",
    )
    r.add_argument(
        "--top", type=nonneg_int, default=20, metavar="N", help="features per label and sign (20)"
    )
    r.add_argument(
        "--worst", type=nonneg_int, default=10, metavar="N", help="worst test sentences shown (10)"
    )
    r.add_argument("--labels", metavar="L1,L2", help="only these labels in the weights sections")
    r.add_argument(
        "--attribute", metavar="REGEX", help="only features whose attribute matches (re.search)"
    )
    r.add_argument(
        "--fstar",
        type=float,
        metavar="F",
        help="the optimal objective: plot f - f* (default: fstar.json beside the trace, if any)",
    )
    r.add_argument("--threads", type=nonneg_int, metavar="N", help="tagging threads (default: all)")
    r.add_argument("--title", help="the report's title (default: crfkit report: MODEL FILE NAME)")
    r.set_defaults(func=cmd_report)
