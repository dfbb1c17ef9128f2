"""The example report in the docs (docs/examples/conll2000-report.html, the CoNLL-2000 demo
chunker's): under 3 MB, valid HTML5, self-contained."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

html5lib = pytest.importorskip("html5lib")

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "conll2000-report.html"


def test_docs_example_report_is_small_valid_and_self_contained():
    data = EXAMPLE.read_bytes()
    assert len(data) <= 3 * 1024 * 1024
    text = data.decode("utf-8")
    html5lib.HTMLParser(strict=True).parse(text)
    assert text.count("data:image/png;base64,") == 3
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
    for section in ("model", "training", "transitions", "features", "test"):
        assert f'<section id="{section}">' in text
