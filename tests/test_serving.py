"""crfkit.serving's typed request options: the same names, values and refusals as ``crfkit tag``'s
options."""

from __future__ import annotations

import dataclasses

import pytest

from crfkit.cli import build_parser
from crfkit.cli.tag import tag_actions
from crfkit.serving import QUERY_OPTIONS, BadRequest, options_of
from crfkit.tagging import TagOptions


def test_query_names_are_the_clients():
    # what crfkit tag --server sends (its forwardable long options) is what the server reads
    assert set(QUERY_OPTIONS) == set(tag_actions())


def test_query_fields_and_defaults_are_the_parsers():
    ns = build_parser("tag").parse_args(["tag", "-m", "m", "-"])
    opts = TagOptions.of(ns)
    assert {f.name for f in dataclasses.fields(TagOptions)} <= set(vars(ns))
    assert opts == dataclasses.replace(TagOptions(), file="-", model="m")
    for q in QUERY_OPTIONS.values():
        assert hasattr(opts, q.field)


@pytest.mark.parametrize(
    "query",
    [
        [("nbest", "3"), ("forbid", "O,I-X"), ("forbid", "B-X,I-Y"), ("no-labels", "1")],
        [("format", "crfsuite"), ("marginals", ""), ("eval", "0"), ("decode", "posterior")],
        [
            ("allowed_column", "2"),
            ("constraints", "bio"),
            ("batch-tokens", "7"),
            ("encoding", "latin-1"),
            ("labels", "yes"),
            ("raw", "on"),
        ],
    ],
)
def test_options_of_a_query_are_the_parsers(query):
    from crfkit.cli.tag import argv_of

    ns = build_parser("tag").parse_args(["tag", *argv_of(query), "-"])
    assert options_of(query) == dataclasses.replace(TagOptions.of(ns), model=None)


@pytest.mark.parametrize(
    "query, message",
    [
        ([("nbest", "x")], "crfkit tag: error: argument -n/--nbest: not an integer: 'x'"),
        (
            [("allowed-column", "0")],
            "crfkit tag: error: argument --allowed-column: must be >= 1, got '0'",
        ),
        (
            [("format", "xml")],
            "crfkit tag: error: argument -f/--format: invalid choice: 'xml' (choose from 'columns', "
            "'crfsuite', 'auto')",
        ),
        (
            [("labels", "1"), ("no-labels", "1")],
            "crfkit tag: error: argument --no-labels: not allowed with argument --labels",
        ),
        ([("eval", "maybe")], "eval=maybe: a flag takes 1 or 0"),
    ],
)
def test_refused_values_say_what_crfkit_tag_says(query, message, capsys):
    from crfkit.cli.tag import argv_of

    with pytest.raises(BadRequest) as e:
        options_of(query)
    assert str(e.value) == message
    if (
        "crfkit tag: error" in message and "choice" not in message
    ):  # the command line's words (argparse's
        # wording of a bad choice varies with the Python version)
        with pytest.raises(SystemExit):
            build_parser("tag").parse_args(["tag", *argv_of(query), "-"])
        assert capsys.readouterr().err.strip().splitlines()[-1] == message
