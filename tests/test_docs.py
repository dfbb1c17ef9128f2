"""The README and the docs site: the README stays a front page, the CLI reference is generated from
the argparse parsers and covers every option, no development narrative ("stop NN", "issue NN") is
left in the pages, and `mkdocs build --strict` passes (skipped when mkdocs is not installed)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = next(
    p for p in Path(__file__).resolve().parents if (p / "mkdocs.yml").exists()
)  # also from tests/x/
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def _hook():
    spec = importlib.util.spec_from_file_location(
        "crfkit_docs_cli_reference", DOCS / "hooks" / "cli_reference.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _all_parsers(parser: argparse.ArgumentParser, path=()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _all_parsers(sub, (*path, name))


def test_cli_reference_lists_every_option_of_every_command():
    from crfkit.cli import COMMANDS, build_parser

    text = _hook().render_cli_reference()
    parsers = list(_all_parsers(build_parser()))
    assert {p[0] for p, _ in parsers if p} >= set(COMMANDS)
    missing = []
    for path, parser in parsers:
        if path:
            assert f"`crfkit {' '.join(path)}`" in text, path
        for action in parser._actions:
            for opt in action.option_strings:
                if f"`{opt}`" not in text:
                    missing.append((" ".join(path), opt))
    assert not missing, missing


def test_cli_reference_page_has_the_marker():
    assert _hook().MARKER in (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


def test_readme_is_a_front_page():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    first = _code_blocks(text)[0]
    assert "make chunker" in first and "make test" in first


NARRATIVE = re.compile(r"(?<![-\w])(stop|issue)\s+\d+", re.IGNORECASE)  # not `--dev-stop 5`


def test_no_development_narrative_in_readme_or_docs():
    pages = [README, *sorted(DOCS.rglob("*.md"))]
    found = []
    for page in pages:
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if NARRATIVE.search(line):
                found.append(f"{page.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert not found, "\n".join(found)


def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    pytest.importorskip("material")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + (
        ":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    cmd = [
        sys.executable,
        "-m",
        "mkdocs",
        "build",
        "--strict",
        "-q",
        "-f",
        str(ROOT / "mkdocs.yml"),
        "-d",
        str(tmp_path / "site"),
    ]
    proc = subprocess.run(
        cmd, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").exists()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_chunker_installs_the_core_only_and_make_test_the_test_extra(tmp_path):
    """`make chunker` (the main job) installs crfkit's core dependencies only; `make test` adds the
    test extra."""
    root = Path(__file__).resolve().parents[1]
    venv = tmp_path / "venv"  # not there: make prints every step it would take to build it

    def plan(target: str) -> str:
        return subprocess.run(
            ["make", "-n", target, f"VENV={venv}"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    chunker = plan("chunker")
    assert "install -e ." in chunker and "[test]" not in chunker and "[bench]" not in chunker
    assert "crfkit demo" in chunker
    test = plan("test")
    assert "install -e ." in test and "install -e '.[test]'" in test and "pytest" in test
    assert test.index("install -e .\n") < test.index("[test]")
