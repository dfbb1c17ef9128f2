"""What the template-based peer formats (CRF++, Wapiti) share: their readers' limits, and on export
the checks of what they cannot hold, made before anything is written."""

from __future__ import annotations

__all__ = ["check_template_model", "reader_limits"]

from ..errors import CrfkitError


def reader_limits(defaults: dict, limits, peer: str) -> dict:
    """``defaults`` with the caller's ``limits`` (a dict, or None) over them; an unknown key is a
    :class:`CrfkitError` naming the ``peer``'s reader."""
    out = dict(defaults)
    if limits:
        unknown = set(limits) - set(out)
        if unknown:
            raise CrfkitError(f"unknown {peer} reader limits: {', '.join(sorted(unknown))}")
        out.update(limits)
    return out


#: model metadata a peer model file has no place for: (key, what it is)
_STORED = (
    ("dense_columns", "dense columns"),
    ("weight_column", "a sample-weight column"),
    ("constraints", "label constraints"),
    ("allowed", "label constraints"),
    ("forbid", "label constraints"),
)


def check_template_model(model, peer: str, unit: str, cannot) -> str:
    """The feature templates of ``model`` (its ``meta["templates"]``), after checking that a
    ``peer`` model (``"CRF++"``, ``"Wapiti"``; which makes its features from ``unit``:
    ``"templates"``, ``"patterns"``) can hold the model: no dense features, no stored constraints or
    weight column, templates, padding.  ``cannot(what)`` makes the :class:`CrfkitError` raised
    otherwise."""
    sp = model.space
    meta = model.meta if isinstance(model.meta, dict) else {}
    if sp.n_dense:
        raise cannot(f"the model has dense features ({sp.n_dense} dimensions); {peer} has none")
    for key, what in _STORED:
        if meta.get(key):
            raise cannot(f"the model stores {what} ({key!r}); {peer} models cannot hold them")
    src = meta.get("templates")
    if not src:
        raise cannot(
            f"the model has no feature templates (it was trained from attribute lists); {peer} "
            f"makes its features from {unit}"
        )
    if not meta.get("template_pad", True):
        raise cannot(f"the model was trained without padding (template_pad false); {peer} pads")
    return src
