"""A :class:`~crfkit.report.build.Report` as one self-contained HTML5 file: the images inline
(``data:`` URIs), the style and the feature filter inline, nothing fetched from the network."""

from __future__ import annotations

import base64
import html
import math

from ..explain import EXPLAIN_CSS, features_html, transitions_html

__all__ = ["render_html"]

_CSS = """<style>
body.crfkit-report {font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  margin: 1.5em auto; max-width: 1200px; padding: 0 1em; color: #222}
.crfkit-report h1 {font-size: 1.5em} .crfkit-report h2 {border-bottom: 1px solid #ccc;
  padding-bottom: 2px; margin-top: 1.6em}
.crfkit-report img {max-width: 100%; height: auto}
.crfkit-report table.kv td {text-align: left; white-space: normal}
.crfkit-report nav a {margin-right: 1em}
.crfkit-report .note {color: #666; font-size: 0.9em}
.crfkit-report .filter input {font-family: monospace; width: 16em; margin-right: 1em}
.crfkit-report .sent {margin: 8px 0 14px 0; line-height: 1.15}
.crfkit-report .tok {display: inline-block; margin: 0 2px 4px 0; font-size: 12px;
  font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; vertical-align: top}
.crfkit-report .tok span {display: block; padding: 0 3px}
.crfkit-report .tok .w {font-weight: 600}
.crfkit-report .tok.bad .p {outline: 1px solid #c00; color: #900}
.crfkit-report details summary {cursor: pointer}
</style>"""

_SCRIPT = """<script>
(function () {
  var fa = document.getElementById("filter-attr"), fl = document.getElementById("filter-label");
  function rx(s) { try { return new RegExp(s); } catch (e) { return null; } }
  function apply() {
    var a = rx(fa.value), l = rx(fl.value);
    if (a === null || l === null) return;
    document.querySelectorAll("#features table.feat").forEach(function (t) {
      t.style.display = l.test(t.getAttribute("data-label")) ? "" : "none";
      t.querySelectorAll("td.a").forEach(function (c) {
        if (c.textContent) c.parentNode.style.display = a.test(c.textContent) ? "" : "none";
      });
    });
  }
  fa.addEventListener("input", apply);
  fl.addEventListener("input", apply);
})();
</script>"""


def _e(s) -> str:
    return html.escape(str(s), quote=True)


def _img(data: bytes, alt: str) -> str:
    b64 = base64.b64encode(data).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{b64}">'


def _pct(x: float) -> str:
    return f"{100.0 * x:.2f}"


def _training(rep) -> str:
    out = ['<section id="training"><h2>Training</h2>']
    if not rep.records:
        out.append(
            '<p class="note">No trace given (<code>crfkit report --trace T.jsonl</code>; '
            "<code>crfkit train --trace</code> and <code>crfkit demo</code> write one).</p>"
        )
    else:
        last = rep.records[-1]
        bits = [f"{len(rep.records)} iterations"]
        if "algorithm" in last:
            bits.append(f"algorithm {last['algorithm']}")
        for k, fmt in (("objective", "{:.8g}"), ("wall_s", "{:.1f} s"), ("nnz", "{:,} non-zero")):
            v = last.get(k)
            if isinstance(v, (int, float)) and math.isfinite(v):
                bits.append(f"{k} {fmt.format(v)}" if k != "nnz" else fmt.format(v))
        for k in ("dev_accuracy", "dev_f1"):
            if isinstance(last.get(k), (int, float)):
                bits.append(f"{k} {last[k]:.2f}")
        src = f" from <code>{_e(rep.trace)}</code>" if rep.trace else ""
        out.append(f"<p>{_e('; '.join(bits))}{src}.")
        if rep.fstar is not None:
            out.append(f" f* = {rep.fstar:.10g}.")
        out.append("</p>")
        out.append(_img(rep.images["training"], "training curves"))
    out.append("</section>")
    return "".join(out)


def _test(ev) -> str:
    out = ['<section id="test"><h2>Test set</h2>']
    sc = ev.scores
    out.append(
        f"<p><code>{_e(ev.path)}</code>: {ev.n_sentences:,} sentences, {ev.n_tokens:,} tokens, "
        f"token accuracy {_pct(sc.accuracy)}%; {ev.sentences_with_errors:,} sentences with an "
        f"error; tagged in {ev.seconds:.2f} s.</p>"
    )
    if ev.chunks is not None:
        c = ev.chunks
        out.append(
            "<h3>Chunks (conlleval)</h3><table><tr><th>type</th><th>precision</th><th>recall</th>"
            "<th>F1</th><th>found</th><th>gold</th><th>correct</th></tr>"
        )
        out.append(
            f"<tr><th>all</th><td>{c.precision:.2f}</td><td>{c.recall:.2f}</td><td>{c.f1:.2f}</td>"
            f"<td>{c.found_chunks}</td><td>{c.gold_chunks}</td><td>{c.correct_chunks}</td></tr>"
        )
        for name in sorted(c.per_type):
            t = c.per_type[name]
            out.append(
                f"<tr><th>{_e(name)}</th><td>{t.precision:.2f}</td><td>{t.recall:.2f}</td>"
                f"<td>{t.f1:.2f}</td><td>{t.found}</td><td>{t.gold}</td><td>{t.correct}</td></tr>"
            )
        out.append("</table>")
    out.append(
        "<h3>Per label (tokens)</h3><table><tr><th>label</th><th>precision</th><th>recall</th>"
        "<th>F1</th><th>support</th><th>predicted</th></tr>"
    )
    for lab, p, r, f, s, n in sc.rows:
        out.append(
            f"<tr><th>{_e(lab)}</th><td>{_pct(p)}</td><td>{_pct(r)}</td><td>{_pct(f)}</td>"
            f"<td>{s}</td><td>{n}</td></tr>"
        )
    out.append("</table>")
    return "".join(out)


def _worst(ev) -> str:
    out = [
        f"<h3>The {len(ev.worst)} worst sentences</h3>"
        '<p class="note">Most wrong tokens first. Per token: the word, the gold label (shaded by '
        "its marginal probability) and the predicted label (shaded by its marginal; outlined when "
        "wrong); hover for the probabilities.</p>"
    ]
    for s in ev.worst:
        out.append(
            f'<div class="sent"><div class="note">sentence {s.index + 1}: {s.errors} wrong of '
            f"{len(s.tokens)}</div>"
        )
        for w, g, p, pp, pg in zip(s.tokens, s.gold, s.pred, s.p_pred, s.p_gold):
            bad = " bad" if g != p else ""
            tip = f"p({p}) = {pp:.3f}" + (f", p({g}) = {pg:.3f}" if g != p else "")
            out.append(
                f'<span class="tok{bad}" title="{_e(tip)}">'
                f'<span class="w">{_e(w)}</span>'
                f'<span class="g" style="background:rgba(116,196,118,{0.8 * pg:.2f})">{_e(g)}</span>'
                f'<span class="p" style="background:rgba(107,174,214,{0.8 * pp:.2f})">{_e(p)}</span>'
                "</span>"
            )
        out.append("</div>")
    return "".join(out)


def render_html(rep) -> str:
    """The report as an HTML5 document (a string)."""
    ex = rep.explanation
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(rep.title)}</title>",
        EXPLAIN_CSS,
        _CSS,
        '</head><body class="crfkit-report">',
        f"<h1>{_e(rep.title)}</h1>",
        '<nav><a href="#model">model</a><a href="#training">training</a>'
        '<a href="#transitions">transitions</a><a href="#features">features</a>'
        + ('<a href="#test">test set</a>' if rep.evaluation is not None else "")
        + "</nav>",
        '<section id="model"><h2>Model</h2><table class="kv">',
    ]
    parts += [f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rep.summary]
    parts.append("</table>")
    parts += [f'<p class="note">{_e(n)}</p>' for n in rep.notes]
    parts.append("</section>")
    parts.append(_training(rep))
    parts.append(
        '<section id="transitions"><h2>Transitions</h2>'
        + _img(rep.images["transitions"], "transition weights heat map")
        + "<details><summary>as a table</summary>"
        + transitions_html(ex)
        + "</details></section>"
    )
    filt = f" matching <code>{_e(ex.attribute)}</code>" if ex.attribute else ""
    parts.append(
        '<section id="features"><h2>Top features per label</h2>'
        f"<p>Per label, the {ex.top} state features of largest positive and of most negative "
        f"weight{filt} (in brackets: how many of each sign the label has).</p>"
        '<p class="filter"><label>attribute <input id="filter-attr" type="search" '
        'placeholder="regular expression"></label><label>label <input id="filter-label" '
        'type="search" placeholder="regular expression"></label></p>'
        + features_html(ex)
        + "</section>"
    )
    ev = rep.evaluation
    if ev is not None:
        parts.append(_test_section(ev, rep.images.get("confusion")))
    parts.append(_SCRIPT)
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _test_section(ev, confusion_png: bytes | None) -> str:
    body = _test(ev)
    if confusion_png is not None:
        body += "<h3>Confusion matrix</h3>" + _img(confusion_png, "confusion matrix")
    if ev.worst:
        body += _worst(ev)
    return body + "</section>"
