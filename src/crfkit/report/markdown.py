"""A :class:`~crfkit.report.build.Report` as Markdown: the same tables, with the figures as PNG
files beside the Markdown file (``NAME-training.png``, ``NAME-transitions.png``,
``NAME-confusion.png`` for ``NAME.md``)."""

from __future__ import annotations

import math
from pathlib import Path

__all__ = ["render_markdown", "image_names"]


def _c(s) -> str:
    """A table cell: pipes escaped, no line breaks."""
    return str(s).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _code(s) -> str:
    s = str(s).replace("|", "\\|")
    return f"`` {s} ``" if "`" in s else f"`{s}`"


def image_names(path) -> dict[str, str]:
    """The file names of the images of the Markdown report at ``path``, by image name."""
    stem = Path(path).stem
    return {k: f"{stem}-{k}.png" for k in ("training", "transitions", "confusion")}


def _table(head, rows) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(_c(x) for x in r) + " |" for r in rows]
    return out + [""]


def render_markdown(rep, images: dict[str, str]) -> str:
    """The report as Markdown; ``images`` maps the image names to the file names the Markdown
    links to (:func:`image_names`)."""
    ex = rep.explanation
    out = [f"# {rep.title}", "", "## Model", ""]
    out += _table(("", "value"), rep.summary)
    out += [f"*{n}*" for n in rep.notes]
    out += ["## Training", ""]
    if rep.records:
        last = rep.records[-1]
        f = last.get("objective")
        fs = f"{f:.8g}" if isinstance(f, (int, float)) and math.isfinite(f) else "?"
        src = f" (trace `{rep.trace}`)" if rep.trace else ""
        out += [f"{len(rep.records)} iterations, final objective {fs}{src}.", ""]
        out += [f"![training curves]({images['training']})", ""]
    else:
        out += ["No trace given (`crfkit report --trace T.jsonl`).", ""]
    out += ["## Transitions", "", f"![transition weights]({images['transitions']})", ""]
    m = ex.transition_matrix()
    rows = [
        [f"**{a}**"] + ["" if math.isnan(v) else f"{v:.3f}" for v in m[i].tolist()]
        for i, a in enumerate(ex.labels)
    ]
    out += _table(["from \\ to"] + [_c(lab) for lab in ex.labels], rows)
    out += ["## Top features per label", ""]
    for lab in ex.labels:
        t = ex.targets.get(lab)
        if t is None:
            continue
        out += [f"### {lab}", "", f"{t.n_positive} positive, {t.n_negative} negative features.", ""]
        rows = [(f"{w:+.4f}", _code(a)) for a, w in t.positive]
        rows += [(f"{w:+.4f}", _code(a)) for a, w in t.negative]
        if rows:
            out += _table(("weight", "attribute"), rows)
    ev = rep.evaluation
    if ev is None:
        return "\n".join(out) + "\n"
    sc = ev.scores
    out += [
        "## Test set",
        "",
        f"`{ev.path}`: {ev.n_sentences} sentences, {ev.n_tokens} tokens, token accuracy "
        f"{100 * sc.accuracy:.2f}%; {ev.sentences_with_errors} sentences with an error.",
        "",
    ]
    if ev.chunks is not None:
        c = ev.chunks
        rows = [
            (
                "all",
                f"{c.precision:.2f}",
                f"{c.recall:.2f}",
                f"{c.f1:.2f}",
                c.found_chunks,
                c.gold_chunks,
                c.correct_chunks,
            )
        ]
        for name in sorted(c.per_type):
            t = c.per_type[name]
            rows.append(
                (
                    name,
                    f"{t.precision:.2f}",
                    f"{t.recall:.2f}",
                    f"{t.f1:.2f}",
                    t.found,
                    t.gold,
                    t.correct,
                )
            )
        out += ["### Chunks (conlleval)", ""]
        out += _table(("type", "precision", "recall", "F1", "found", "gold", "correct"), rows)
    out += ["### Per label (tokens)", ""]
    rows = [
        (lab, f"{100 * p:.2f}", f"{100 * r:.2f}", f"{100 * f:.2f}", s, n)
        for lab, p, r, f, s, n in sc.rows
    ]
    out += _table(("label", "precision", "recall", "F1", "support", "predicted"), rows)
    out += ["### Confusion matrix", "", f"![confusion matrix]({images['confusion']})", ""]
    if ev.worst:
        out += [
            f"### The {len(ev.worst)} worst sentences",
            "",
            "Most wrong tokens first; p: the marginal probability; wrong tokens in bold.",
            "",
        ]
        for s in ev.worst:
            out += [f"Sentence {s.index + 1}: {s.errors} wrong of {len(s.tokens)}.", ""]
            rows = []
            for w, g, p, pp, pg in zip(s.tokens, s.gold, s.pred, s.p_pred, s.p_gold):
                b = "**" if g != p else ""
                rows.append((w, g, f"{b}{p}{b}", f"{pp:.3f}", f"{pg:.3f}"))
            out += _table(("token", "gold", "predicted", "p(predicted)", "p(gold)"), rows)
    return "\n".join(out) + "\n"
