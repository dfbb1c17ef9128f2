"""``crfkit tag``'s decoding path and ``--encoding`` (issue 45, part 4 and part 3): ``-o FILE`` is
left as it was on an input error or Ctrl-C; the decoding options and ``--encoding`` read, decode and
write batch by batch (the output does not depend on the batch size); ``--encoding`` takes text
encodings only; ``-n`` is bounded."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from conftest import crfkit_cmd, crfkit_env
from crfkit import cli

DECODING = [
    ["--constraints", "bio"],
    ["-n", "3"],
    ["-n", "2", "--marginals"],
    ["--decode", "posterior", "--probability"],
    ["--constraints", "bio", "--all-marginals"],
]


def _tag(capsys, *argv):
    rc = cli.main(["tag", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def _bad_input(chunker, extra_column: bool = False) -> str:
    """The test file with a ragged line after its first few sentences."""
    text = chunker["test"].read_text()
    sents = text.strip("\n").split("\n\n")
    if extra_column:
        sents = [
            "\n".join(
                line.rsplit(" ", 1)[0] + " * " + line.rsplit(" ", 1)[1] for line in s.split("\n")
            )
            for s in sents
        ]
    return "\n\n".join(sents[:3] + ["lonely"] + sents[3:]) + "\n\n"


@pytest.mark.parametrize(
    "opts, extra",
    [(["--constraints", "bio"], False), (["--allowed-column", "3"], True), (["-n", "2"], False)],
)
def test_output_file_is_kept_on_an_input_error(chunker, tmp_path, capsys, opts, extra):
    bad = tmp_path / "bad.txt"
    bad.write_text(_bad_input(chunker, extra))
    out = tmp_path / "out.txt"
    out.write_text("KEEP\n")
    rc, _, err = _tag(capsys, "-m", chunker["model"], bad, "-o", out, "--batch-tokens", 5, *opts)
    assert rc == 2 and "ragged columns" in err and "Traceback" not in err
    assert out.read_text() == "KEEP\n"
    assert sorted(os.listdir(tmp_path)) == ["bad.txt", "out.txt"]  # no temporary file left


@pytest.mark.parametrize("opts", DECODING + [["--crfsuite"]])
def test_decoding_output_does_not_depend_on_the_batch_size(chunker, capsys, tmp_path, opts):
    if opts == ["--crfsuite"]:  # the crfsuite format's decoding path
        src = tmp_path / "t.crfsuite"
        lines = []
        for line in chunker["test"].read_text().splitlines():
            f = line.split()
            lines.append(f"{f[-1]}\tw={f[0]}\tp={f[1]}" if f else "")
        src.write_text("\n".join(lines) + "\n")
        model = tmp_path / "m.crfsuite.crfkit"
        assert (
            cli.main(
                [
                    "train",
                    str(src),
                    "-f",
                    "crfsuite",
                    "-m",
                    str(model),
                    "-q",
                    "--max-iterations",
                    "5",
                ]
            )
            == 0
        )
        capsys.readouterr()
        base = ["-m", model, src, "-f", "crfsuite", "-n", "2", "--constraints", "bio"]
    else:
        base = ["-m", chunker["model"], chunker["test"], *opts, "--eval"]
    rc1, whole, err1 = _tag(capsys, *base, "--batch-tokens", 10**9)
    rc2, batched, err2 = _tag(capsys, *base, "--batch-tokens", 7)
    assert rc1 == rc2 == 0 and whole == batched and err1 == err2
    assert whole.count("\n\n") >= 8


def test_eval_without_gold_is_refused_before_writing(chunker, tmp_path, capsys):
    nogold = tmp_path / "nogold.txt"
    nogold.write_text(
        "\n".join(" ".join(line.split()[:-1]) for line in chunker["test"].read_text().splitlines())
    )
    out = tmp_path / "out.txt"
    out.write_text("KEEP\n")
    rc, _, err = _tag(capsys, "-m", chunker["model"], nogold, "-n", "2", "--eval", "-o", out)
    assert rc == 2 and "--eval needs gold labels" in err and out.read_text() == "KEEP\n"


def test_ctrl_c_during_decoding_leaves_the_output_file(chunker, tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("KEEP\n")
    p = subprocess.Popen(
        crfkit_cmd(
            "tag",
            "-m",
            chunker["model"],
            "-o",
            out,
            "--batch-tokens",
            5,
            "-n",
            "3",
            "--constraints",
            "bio",
        ),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=crfkit_env(),
    )
    try:
        p.stdin.write(chunker["test"].read_bytes())  # the input stays open: tag waits for more
        p.stdin.flush()
        deadline = time.monotonic() + 240
        # the decoding path streams: it opens its temporary output after the first batch
        while not [f for f in os.listdir(tmp_path) if f.endswith(".part")]:
            assert p.poll() is None, p.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        p.send_signal(signal.SIGINT)
        err = p.communicate(timeout=60)[1]
    finally:
        p.kill()
    assert p.returncode == 130, err
    assert b"interrupted" in err and b"Traceback" not in err
    assert out.read_text() == "KEEP\n" and os.listdir(tmp_path) == ["out.txt"]


@pytest.mark.parametrize(
    "enc", ["rot13", "hex", "zlib_codec", "base64", "bz2", "uu", "punycode", "idna"]
)
@pytest.mark.parametrize("cmd", ["tag", "train"])
def test_non_text_encodings_are_refused(chunker, tmp_path, capsys, enc, cmd):
    if cmd == "tag":
        argv = ["tag", "-m", chunker["model"], chunker["test"], "--encoding", enc]
    else:
        argv = ["train", chunker["dir"] / "train.txt", "-m", tmp_path / "m", "--encoding", enc]
    assert cli.main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert f"crfkit: error: --encoding {enc}:" in err and "not a text encoding" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("enc", ["latin-1", "utf-16", "utf-16-le", "cp1252"])
def test_encoding_streams_and_gives_the_same_output(chunker, tmp_path, capsys, enc):
    text = chunker["test"].read_text().replace("the ", "thé ")
    p = tmp_path / "in.txt"
    p.write_bytes(text.encode(enc))
    u = tmp_path / "in8.txt"
    u.write_text(text, encoding="utf-8")
    for opts in ([], ["-n", "2", "--constraints", "bio"], ["-f", "auto"]):
        rc1, a, _ = _tag(capsys, "-m", chunker["model"], u, *opts)
        rc2, b, _ = _tag(
            capsys, "-m", chunker["model"], p, "--encoding", enc, "--batch-tokens", 5, *opts
        )
        assert rc1 == rc2 == 0 and a == b and "thé" in b


def test_encoding_error_names_the_byte(tmp_path, chunker, capsys):
    p = tmp_path / "bad.txt"
    p.write_bytes(b"a NN B-NP\n" * 10000 + b"\x81 NN B-NP\n\n")
    rc, _, err = _tag(capsys, "-m", chunker["model"], p, "--encoding", "cp1252")
    assert rc == 2 and f"{p}: not valid cp1252 (byte 100001 of the file)" in err


@pytest.mark.parametrize("k", ["1001", "10000000", "1000000000"])
def test_nbest_over_the_limit_is_a_usage_error(chunker, capsys, k):
    with pytest.raises(SystemExit) as ei:
        cli.main(["tag", "-m", str(chunker["model"]), str(chunker["test"]), "-n", k])
    assert ei.value.code == 2
    assert "at most 1000 sequences" in capsys.readouterr().err
