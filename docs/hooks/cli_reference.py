"""MkDocs hook: the command-line reference, generated from crfkit's argparse parsers at build time.

``docs/reference/cli.md`` holds the marker ``<!-- cli-reference -->``; when MkDocs renders that
page, the marker is replaced by :func:`render_cli_reference`, which walks
``crfkit.cli.build_parser()`` and every subparser below it (``crfkit data fetch``,
``crfkit bench run``, ...) and writes one section per command with its usage line and a table of its
options.  Only ``crfkit.cli.build_parser`` and ``crfkit.cli.COMMANDS`` are used, so the reference
follows whatever module layout the CLI has, and it cannot drift from the parsers.  ``test_docs.py``
checks that every option string of every parser appears in the output.
"""

from __future__ import annotations

import argparse
import os
import sys

MARKER = "<!-- cli-reference -->"


def _import_cli():
    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.normpath(os.path.join(here, "..", "..", "src"))
    if os.path.isdir(src) and src not in sys.path:
        sys.path.insert(0, src)
    from crfkit import cli

    return cli


def _cell(text: str) -> str:
    """Text made safe for a Markdown table cell: one line, ``|`` escaped, and outside `code spans`
    the characters Markdown would read as markup (``*``, ``_``, ``[``, ``<``, ...) escaped."""
    parts = " ".join(str(text).split()).split("`")
    for i in range(0, len(parts), 2):  # the even parts are outside code spans
        part = parts[i].replace("\\", "\\\\")
        for ch in "*_[]":
            part = part.replace(ch, "\\" + ch)
        parts[i] = part.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    if len(parts) % 2 == 0:  # an unmatched backtick: no code span after all
        parts[-2] += "\\`" + parts.pop()
    return "`".join(parts).replace("|", "\\|")


def _code(text: str) -> str:
    text = str(text)
    tick = "``" if "`" in text else "`"
    pad = " " if tick == "``" else ""
    return f"{tick}{pad}{text}{pad}{tick}".replace("|", "\\|")


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    formatter = parser._get_formatter()
    try:
        return formatter._expand_help(action)
    except (KeyError, TypeError, ValueError):
        return action.help


def _metavar(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    formatter = parser._get_formatter()
    try:
        if action.option_strings:
            return formatter._format_args(
                action, formatter._get_default_metavar_for_optional(action)
            )
        return formatter._format_args(action, formatter._get_default_metavar_for_positional(action))
    except (TypeError, ValueError):
        return ""


def _subparsers(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            seen = set()
            for name, sub in action.choices.items():
                if id(sub) in seen:  # an alias of a command already listed
                    continue
                seen.add(id(sub))
                yield name, sub, helps.get(name) or ""


def _options_table(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        names = (
            ", ".join(_code(s) for s in action.option_strings)
            if action.option_strings
            else _code(action.metavar or action.dest)
        )
        meta = _metavar(parser, action)
        default = ""
        if (
            action.option_strings
            and action.default not in (None, False, argparse.SUPPRESS)
            and action.nargs != 0
        ):
            default = _code(action.default)
        rows.append(
            f"| {names} | {_code(meta) if meta else ''} | {default} | {_cell(_help(parser, action))} |"
        )
    if not rows:
        return []
    return ["| option | value | default | meaning |", "|---|---|---|---|", *rows, ""]


def _render(parser: argparse.ArgumentParser, path: list[str], summary: str, out: list[str]) -> None:
    level = min(2 + len(path) - 1, 6)
    out.append(f"{'#' * level} `crfkit {' '.join(path)}`")
    out.append("")
    text = parser.description or summary
    if text:
        out.append(_cell(text).replace("\\|", "|"))
        out.append("")
    usage = " ".join(parser.format_usage().split())
    usage = usage.removeprefix("usage: ")
    out.append("```text")
    out.append(usage)
    out.append("```")
    out.append("")
    out.extend(_options_table(parser))
    if parser.epilog:
        out.append(_cell(parser.epilog).replace("\\|", "|"))
        out.append("")
    for name, sub, sub_summary in _subparsers(parser):
        _render(sub, [*path, name], sub_summary, out)


def render_cli_reference() -> str:
    """The Markdown of every command's options, from ``crfkit.cli.build_parser()``."""
    cli = _import_cli()
    parser = cli.build_parser()
    out: list[str] = []
    out.append("Commands: " + ", ".join(f"[`{c}`](#crfkit-{c})" for c in cli.COMMANDS) + ".")
    out.append("")
    out.append("## `crfkit`")
    out.append("")
    out.append("```text")
    out.append(" ".join(parser.format_usage().split()).removeprefix("usage: "))
    out.append("```")
    out.append("")
    out.extend(_options_table(parser))
    subs = {name: (sub, summary) for name, sub, summary in _subparsers(parser)}
    for name in [c for c in cli.COMMANDS if c in subs] + [c for c in subs if c not in cli.COMMANDS]:
        sub, summary = subs[name]
        _render(sub, [name], summary, out)
    return "\n".join(out) + "\n"


def on_page_markdown(markdown: str, page, config, files) -> str:  # MkDocs' hook signature
    if MARKER in markdown:
        return markdown.replace(MARKER, render_cli_reference())
    return markdown
