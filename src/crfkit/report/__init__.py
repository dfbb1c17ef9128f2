"""Reports on a trained model and its training run (``crfkit report``).

:func:`build_report` gathers the model's summary, its weights (:mod:`crfkit.explain`), the
training curves of a trace and the evaluation on a labelled test file; :func:`write_report` writes
it as one self-contained HTML file (images inline, no network) or as Markdown with PNG images
beside it.  :func:`plot_training`, :func:`plot_transitions` and :func:`plot_confusion` return
matplotlib figures (the ``plot`` extra: ``pip install 'crfkit[plot]'``); matplotlib is imported
only when a figure is drawn.
"""

from __future__ import annotations

import os
from pathlib import Path

from .build import Report, build_report, model_summary
from .data import SentenceView, TestEvaluation, evaluate, evaluate_file, history_records
from .plots import plot_confusion, plot_training, plot_transitions, png_bytes

__all__ = [
    "Report",
    "SentenceView",
    "TestEvaluation",
    "build_report",
    "evaluate",
    "evaluate_file",
    "history_records",
    "model_summary",
    "plot_confusion",
    "plot_training",
    "plot_transitions",
    "png_bytes",
    "write_report",
]


def write_report(rep: Report, path: str | os.PathLike, fmt: str | None = None) -> list[Path]:
    """Write ``rep`` to ``path`` as ``fmt`` ``"html"`` (one self-contained file) or ``"md"``
    (Markdown, the images as PNG files beside it); ``None``: ``md`` for a ``.md`` path, else
    ``html``.  Every file is written atomically.  Returns the paths written."""
    from ..errors import CrfkitError
    from ..io.atomic import atomic_file

    path = Path(path)
    if fmt is None:
        fmt = "md" if path.suffix.lower() in (".md", ".markdown") else "html"
    written = []
    if fmt == "html":
        from .html import render_html

        data = render_html(rep).encode("utf-8")
    elif fmt == "md":
        from .markdown import image_names, render_markdown

        names = image_names(path)
        for key, png in rep.images.items():
            p = path.parent / names[key]
            with atomic_file(p, what="a report image") as f:
                f.write(png)
            written.append(p)
        data = render_markdown(rep, names).encode("utf-8")
    else:
        raise CrfkitError(f"unknown report format {fmt!r}: html or md")
    with atomic_file(path, what="the report") as f:
        f.write(data)
    return [path, *written]
