"""Bounds on template sets (issue 45, part 3): regular expressions run by RE2 (linear time) with
their size, nesting and repetition bounded, and the number of lines, macros and bytes of a set."""

from __future__ import annotations

import pytest

from crfkit.errors import TemplateError
from crfkit.features import templates as tp
from crfkit.features.templates import (
    MAX_MACROS,
    MAX_REGEX_CHARS,
    MAX_REGEX_DEPTH,
    MAX_REGEX_REPEAT,
    MAX_TEMPLATE_BYTES,
    MAX_TEMPLATES,
    Templates,
)


def _error(text: str) -> str:
    with pytest.raises(TemplateError) as ei:
        Templates.parse(text, name="t.tpl")
    return str(ei.value)


@pytest.mark.parametrize(
    "rx, what",
    [
        ("a{99999999999}", f"over the limit of {MAX_REGEX_REPEAT}"),
        (f"a{{{MAX_REGEX_REPEAT + 1}}}", f"over the limit of {MAX_REGEX_REPEAT}"),
        (f"a{{2,{MAX_REGEX_REPEAT + 1}}}", f"over the limit of {MAX_REGEX_REPEAT}"),
        ("(" * (MAX_REGEX_DEPTH + 1) + "a" + ")" * (MAX_REGEX_DEPTH + 1), "nest"),
        ("(" * 5000 + "a" + ")" * 5000, f"the limit is {MAX_REGEX_CHARS}"),
        ("a" * (MAX_REGEX_CHARS + 1), f"the limit is {MAX_REGEX_CHARS}"),
        ("(a)\\1", "no backreferences"),
        ("(?=a)b", "no lookaround"),
        ("(?<!a)b", "no lookaround"),
        ("[a", "missing ]"),
    ],
)
def test_refused_regex_names_file_and_line(rx, what):
    msg = _error(f'# c\nU0:%x[0,0]\nU1:%t[0,0,"{rx}"]\n')
    assert msg.startswith("t.tpl:3: bad regular expression") and what in msg, msg
    assert len(msg) < 400  # a 10,000-character pattern is cut in the message


def test_limits_accept_what_they_allow():
    depth = "(" * MAX_REGEX_DEPTH + "a" + ")" * MAX_REGEX_DEPTH
    t = Templates.parse(f'U0:%t[0,0,"{depth}"]\nU1:%m[0,0,"a{{{MAX_REGEX_REPEAT}}}"]\n')
    assert t.apply([["a"], ["b"]]) == [["U0:true", "U1:"], ["U0:false", "U1:"]]
    # brackets and escapes do not count as groups
    assert Templates.parse('U:%t[0,0,"[(((]\\(\\(x"]').apply([["(((x"]]) == [["U:true"]]


def test_catastrophic_pattern_runs_in_linear_time():
    """``^(a+)+$`` backtracks exponentially in Python's re (over 60 s on 31 letters); RE2 answers
    at once (no time is asserted: a backtracking engine would not finish the test)."""
    t = Templates.parse('U:%t[0,0,"^(a+)+$"]/%m[0,0,"(a|aa)+$"]')
    word = "a" * 5000 + "!"
    assert t.apply([[word], ["aaa"]]) == [["U:false/"], ["U:true/aaa"]]


def test_regex_semantics_case_and_wapiti_classes():
    t = Templates.parse(r'U:%t[0,0,"^\u"]/%T[0,0,"^abc"]/%m[0,0,"\d+"]/%M[0,0,"é+"]/%m[0,0,"\p+"]')
    assert t.apply([["Abc12ÉéX.,"]]) == [["U:true/true/12/Éé/.,"]]
    assert t.apply([["xyz"]]) == [["U:false/false///"]]


def test_too_many_template_lines_names_the_line():
    text = "# header\n" + "".join(f"U{i}:%x[0,0]\n" for i in range(MAX_TEMPLATES + 1))
    msg = _error(text)
    assert msg.startswith(f"t.tpl:{MAX_TEMPLATES + 2}:") and "MAX_TEMPLATES" in msg


def test_too_many_macros_names_the_line():
    msg = _error("U0:%x[0,0]\nU1:" + "%x[0,0]" * MAX_MACROS + "\n")
    assert msg.startswith("t.tpl:2:") and f"more than {MAX_MACROS} macros" in msg
    per_line = MAX_MACROS // 4
    lines = "".join(f"U{i}:" + "%x[0,0]" * per_line + "\n" for i in range(5))
    assert _error(lines).startswith("t.tpl:5:")


def test_template_text_and_file_size(tmp_path):
    big = "U:" + "x" * MAX_TEMPLATE_BYTES + "\n"
    assert "MAX_TEMPLATE_BYTES" in _error(big)
    p = tmp_path / "big.tpl"
    p.write_text(big)
    with pytest.raises(TemplateError, match="MAX_TEMPLATE_BYTES") as ei:
        Templates.from_file(p)
    assert str(p) in str(ei.value)


def test_limits_are_named_constants():
    assert tp.MAX_TEMPLATES == 2048 and tp.MAX_MACROS == 4096
    assert tp.MAX_REGEX_CHARS == 1024 and tp.MAX_REGEX_DEPTH == 32
