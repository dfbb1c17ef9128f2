"""Token rows to model inputs through a model's stored templates (:mod:`crfkit.features.rows`)."""

from __future__ import annotations

import pytest

from crfkit.errors import CrfkitError
from crfkit.features.rows import row_inputs, tagger_of

TEMPLATES = 'U00:%x[0,0]\nU01:%x[-1,0]/%x[0,0]\nU02:%m[0,0,"^[A-Z]"]\nB\n'


def test_a_models_templates_are_parsed_once_and_shared():
    """``crfkit serve`` tags every request through the model's templates: they are parsed once per
    process, and the parsed set gives the same features as a fresh parse."""
    meta = {"templates": TEMPLATES, "template_pad": True}
    t1, pad1 = tagger_of(meta)
    t2, pad2 = tagger_of(dict(meta))
    assert t1 is t2 and pad1 is pad2 is True
    other, _ = tagger_of({"templates": TEMPLATES.replace("U02", "U03")})
    assert other is not t1
    _, nopad = tagger_of({"templates": TEMPLATES, "template_pad": False})
    assert nopad is False


def test_row_inputs_give_the_same_features_twice():
    meta = {"templates": TEMPLATES, "template_pad": True}
    rows = [[["He"], ["reckons"], ["the"], ["deficit"]], [["Confidence"], ["in"]]]
    first = row_inputs(meta, rows)
    second = row_inputs(meta, rows)
    assert repr(first) == repr(second)


def test_a_model_without_templates_cannot_tag_rows():
    with pytest.raises(CrfkitError, match="no feature templates"):
        tagger_of({"templates": ""})
