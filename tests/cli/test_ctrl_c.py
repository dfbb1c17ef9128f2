"""Ctrl-C stops pytest even while a test runs crfkit's command line in-process.

``crfkit.cli.main`` takes SIGINT as the ``crfkit`` program does (training saves what it reached,
exit status 130); called in-process by another program it now passes the interrupt on afterwards
(a ``KeyboardInterrupt`` once the caller's handler is restored), where pytest went on with the next
test before (``timeout -s INT 180 make test`` kept going)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from conftest import crfkit_env

# a test file that trains with crfkit's CLI in-process, long enough to be interrupted, then more
# tests that must not run after Ctrl-C
_INNER = textwrap.dedent(
    """
    import os, pathlib, random
    from crfkit import cli

    def _data(tmp):
        rnd = random.Random(0)
        p = pathlib.Path(tmp) / "train.txt"
        with open(p, "w") as f:
            for _ in range(3000):
                for _ in range(rnd.randint(3, 12)):
                    w = "w%d" % rnd.randint(0, 3000)
                    f.write(w + " " + w[-1] + " " + rnd.choice(["B-NP", "I-NP", "O"]) + "\\n")
                f.write("\\n")
        return p

    def test_train_in_process(tmp_path):
        p = _data(tmp_path)
        pathlib.Path(os.environ["CTRLC_READY"]).write_text("ready")
        for _ in range(50):
            cli.main(["train", str(p), "-m", str(tmp_path / "m.crfkit"),
                      "--max-iterations", "1000", "--threads", "1", "-q"])

    def test_after_1():
        pathlib.Path(os.environ["CTRLC_READY"] + ".after").write_text("ran")
    """
)


def _terminal_ctrl_c():
    """In the child before it starts: Ctrl-C as at a terminal.  A process started with SIGINT
    ignored (a background job of a non-interactive shell, as some CI runners start the suite)
    passes the ignoring on to its children, Python then installs no KeyboardInterrupt handler, and
    the Ctrl-C this test sends would be ignored by pytest itself (the CI failures of this test:
    the inner run trained on)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for(path, proc, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.path.exists(path) or proc.poll() is not None:
            return os.path.exists(path)
        time.sleep(0.2)
    return False


def test_ctrl_c_stops_pytest_while_crfkit_runs_in_process(tmp_path):
    inner = tmp_path / "test_inner_ctrl_c.py"
    inner.write_text(_INNER)
    ready = tmp_path / "ready"
    # faulthandler: a hung inner run prints every thread's stack on SIGABRT (below)
    env = dict(
        crfkit_env(), CTRLC_READY=str(ready), CRFKIT_QUIET_COMPILE="1", PYTHONFAULTHANDLER="1"
    )
    p = subprocess.Popen(
        # without hypothesis's plugin: on a loaded host most of pytest's stop after Ctrl-C went into
        # importing hypothesis for the interrupt's report (7-25 s with 7 processes on the core)
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:hypothesispytest",
            "-x",
            str(inner),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_terminal_ctrl_c,
    )
    try:
        assert _wait_for(ready, p, 300), "the inner test did not start"
        time.sleep(3.0)  # in the middle of training
        p.send_signal(signal.SIGINT)
        try:
            out, _ = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGABRT)
            out, _ = p.communicate(timeout=60)
            raise AssertionError(
                "pytest did not stop within 120 s of Ctrl-C; its threads:\n" + out[-6000:]
            ) from None
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    # pytest's own exit status for an interrupted session, and the next test never ran
    assert p.returncode == 2, out[-3000:]
    assert "KeyboardInterrupt" in out, out[-3000:]
    assert not os.path.exists(str(ready) + ".after"), out[-3000:]


# crfkit.cli.main under each kind of caller's SIGINT handler, with a command that gets a Ctrl-C in
# its middle and then finishes (as training does: it saves what it reached and returns 130)
_EMBEDDED = textwrap.dedent(
    """
    import pathlib, signal, sys
    import crfkit.cli as cli
    from crfkit.cli.common import run_command

    mode, marker = sys.argv[1], pathlib.Path(sys.argv[2])

    def command(args):
        try:
            signal.raise_signal(signal.SIGINT)
            status = 0
        except KeyboardInterrupt:
            status = 130
        marker.write_text("finished %d" % status)
        return status

    cli._main = lambda argv: run_command(command, None)
    handler = {"ignore": signal.SIG_IGN, "default": signal.SIG_DFL,
               "python": signal.default_int_handler}[mode]
    signal.signal(signal.SIGINT, handler)
    try:
        rc = cli.main([])
    except KeyboardInterrupt:
        print("KeyboardInterrupt after the command")
        sys.exit(7)
    assert signal.getsignal(signal.SIGINT) == handler, signal.getsignal(signal.SIGINT)
    print("returned", rc)
    """
)


def _embedded(tmp_path, mode):
    script, marker = tmp_path / "embedded.py", tmp_path / f"marker-{mode}"
    script.write_text(_EMBEDDED)
    r = subprocess.run(
        [sys.executable, str(script), mode, str(marker)],
        env=crfkit_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return r, (marker.read_text() if marker.exists() else None)


def test_a_caller_that_ignores_ctrl_c_keeps_it_ignored_through_the_command(tmp_path):
    r, marker = _embedded(tmp_path, "ignore")
    assert r.returncode == 0, r.stdout + r.stderr
    assert marker == "finished 0"  # the command never saw the interrupt
    assert "returned 0" in r.stdout


def test_a_python_handler_gets_a_keyboard_interrupt_once_the_command_has_finished(tmp_path):
    r, marker = _embedded(tmp_path, "python")
    assert r.returncode == 7, r.stdout + r.stderr
    assert marker == "finished 130"  # the command took it as training does, then passed it on
    assert "KeyboardInterrupt after the command" in r.stdout


def test_the_default_action_ends_the_process_once_the_command_has_finished(tmp_path):
    r, marker = _embedded(tmp_path, "default")
    assert r.returncode == -signal.SIGINT, r.stdout + r.stderr
    assert marker == "finished 130"
    assert "returned" not in r.stdout
