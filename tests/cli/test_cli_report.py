"""``crfkit report``: HTML and Markdown reports from a model, its trace and a test file; bad input
is a one-line error with exit status 2."""

from __future__ import annotations

import pytest

from conftest import run_cli as run
from crfkit import cli
from crfkit.datasets import synthetic

pytest.importorskip("matplotlib")
html5lib = pytest.importorskip("html5lib")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli-report")
    synthetic.write(d / "train.txt", 60, seed=5)
    synthetic.write(d / "test.txt", 15, seed=6)
    m, t = d / "m.crfkit", d / "trace.jsonl"
    argv = ["train", str(d / "train.txt"), "-m", str(m), "--max-iterations", "10", "-q"]
    assert cli.main(argv + ["--trace", str(t)]) == 0
    return {"dir": d, "model": m, "trace": t, "test": d / "test.txt"}


def test_report_html(data, tmp_path, capsys):
    out = tmp_path / "r.html"
    argv = ["report", "-m", str(data["model"]), "--trace", str(data["trace"])]
    code, _, err = run(capsys, *argv, "--test", str(data["test"]), "-o", str(out), "--top", "3")
    assert code == 0, err
    assert f"wrote {out}" in err
    text = out.read_text(encoding="utf-8")
    html5lib.HTMLParser(strict=True).parse(text)
    assert text.count("data:image/png;base64,") == 3
    assert 'id="test"' in text
    n = text.count('class="sent"')
    assert 0 < n <= 10 and f"The {n} worst sentences" in text


def test_report_markdown_by_format_or_extension(data, tmp_path, capsys):
    out = tmp_path / "r.md"
    code, _, err = run(capsys, "report", "-m", str(data["model"]), "-o", str(out))
    assert code == 0, err
    assert out.read_text(encoding="utf-8").startswith("# crfkit report: m.crfkit")
    assert (tmp_path / "r-transitions.png").exists()
    assert not (tmp_path / "r-training.png").exists()  # no trace given
    out2 = tmp_path / "weights.txt"
    argv = ["report", "-m", str(data["model"]), "--format", "md", "-o", str(out2)]
    code, _, err = run(capsys, *argv, "--labels", "O,B-NP")
    assert code == 0, err
    text = out2.read_text(encoding="utf-8")
    assert "### O" in text and "### B-NP" in text and "### I-NP" not in text


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--trace", "nope.jsonl"], "no such trace file"),
        (["--labels", "B-XX"], "'B-XX' is not a label"),
        (["--attribute", "("], "bad regular expression"),
        (["--fstar", "nan"], "finite"),
    ],
)
def test_report_bad_input_is_one_error_line(data, tmp_path, capsys, extra, message):
    out = tmp_path / "r.html"
    code, _, err = run(capsys, "report", "-m", str(data["model"]), "-o", str(out), *extra)
    assert code == 2
    assert err.startswith("crfkit: error:") and message in err and "Traceback" not in err
    assert not out.exists()


def test_report_bad_trace_line_names_file_and_line(data, tmp_path, capsys):
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"objective": 1, "effective_passes": 1}\nnot json\n')
    code, _, err = run(
        capsys,
        "report",
        "-m",
        str(data["model"]),
        "--trace",
        str(bad),
        "-o",
        str(tmp_path / "r.html"),
    )
    assert code == 2 and f"{bad}" in err and "2" in err


def test_the_report_command_the_demo_prints_works(tmp_path, capsys):
    """`crfkit demo` writes its trace beside the model and prints the report command for them."""
    code, out, err = run(
        capsys,
        "demo",
        "--synthetic",
        "--synthetic-sentences",
        "40",
        "--max-iterations",
        "5",
        "--out",
        str(tmp_path),
    )
    assert code == 0, err
    (line,) = [x for x in out.splitlines() if x.startswith("report (")]
    argv = line.split(": ", 1)[1].split()
    assert argv[:2] == ["crfkit", "report"]
    code, _, err = run(capsys, *argv[1:])
    assert code == 0, err
    html = tmp_path / "synthetic-report.html"
    text = html.read_text(encoding="utf-8")
    html5lib.HTMLParser(strict=True).parse(text)
    assert text.count("data:image/png;base64,") == 3  # curves from the demo's trace


def test_report_test_file_needs_a_model_with_templates(data, tmp_path, capsys):
    import crfkit

    X = [[{"w": "a"}, {"w": "b"}]] * 4
    crf = crfkit.CRF(max_iterations=5, model_filename=str(tmp_path / "attrs.crfkit"))
    crf.fit(X, [["A", "B"]] * 4)
    argv = ["report", "-m", str(tmp_path / "attrs.crfkit"), "-o", str(tmp_path / "r.html")]
    code, _, err = run(capsys, *argv, "--test", str(data["test"]))
    assert code == 2 and "no feature templates" in err
    code, _, err = run(capsys, *argv)  # the weights alone are fine
    assert code == 0, err


def test_report_without_matplotlib_says_how_to_install_it(data, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys; sys.modules['matplotlib'] = None; from crfkit.cli import main; "
        f"sys.exit(main(['report', '-m', {str(data['model'])!r}, '-o', {str(tmp_path / 'r.html')!r}]))"
    )
    src = str(Path(__file__).resolve().parents[2] / "src")
    r = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2, r.stderr
    assert "crfkit: error:" in r.stderr and "pip install 'crfkit[plot]'" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "r.html").exists()
