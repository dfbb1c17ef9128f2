"""The suite's ``--order`` option (tests/conftest.py): reversed and seeded random orders, to find
tests that depend on what ran before them."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import ordered


def test_file_order_is_kept_and_reverse_reverses():
    items = list(range(10))
    assert ordered(items, "file") == (items, "file")
    assert ordered(items, "reverse") == (items[::-1], "reverse")


def test_a_seeded_random_order_is_a_permutation_that_repeats():
    items = list(range(50))
    a, shown = ordered(items, "random:7")
    assert shown == "random:7" and sorted(a) == items and a != items
    assert ordered(items, "random:7")[0] == a
    assert ordered(items, "random:8")[0] != a
    b, shown = ordered(items, "random")
    assert shown.startswith("random:") and ordered(items, shown)[0] == b


@pytest.mark.parametrize("bad", ["sideways", "random:x", "reverse:1"])
def test_an_unknown_order_is_a_usage_error(bad):
    with pytest.raises(pytest.UsageError, match="expected file, reverse, random"):
        ordered([1, 2], bad)


def test_the_option_orders_a_real_run(tmp_path):
    (tmp_path / "test_x.py").write_text(
        "".join(f"def test_{i}():\n    print('RAN {i}')\n" for i in range(6))
    )
    tests_dir = __file__.rsplit("/", 1)[0]

    def ran(order):
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-s",
                "-p",
                "no:cacheprovider",
                "--rootdir",
                str(tmp_path),
                "--confcutdir",
                tests_dir,
                "-p",
                "conftest",
                "--order",
                order,
                str(tmp_path / "test_x.py"),
            ],
            capture_output=True,
            text=True,
            cwd=tests_dir,
            timeout=300,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        return [int(x) for x in re.findall(r"RAN (\d+)", r.stdout)], r.stdout

    assert ran("file")[0] == list(range(6))
    assert ran("reverse")[0] == list(range(5, -1, -1))
    got, out = ran("random:3")
    assert sorted(got) == list(range(6)) and got == ran("random:3")[0]
    assert "test order: random:3" in out
    got, out = ran("random")  # a bare 'random' prints the seed it picked, to rerun that order
    seed = re.search(r"test order: random:(\d+)", out).group(1)
    assert ran(f"random:{seed}")[0] == got
