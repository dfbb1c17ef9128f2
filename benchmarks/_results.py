"""Result records of the benchmark scripts: one JSON line per run, in one schema.

Every file under ``benchmarks/results/`` holds lines of this shape::

    {"benchmark": "benchmarks/peers/conll2000_vs_crfsuite.py",   # the script, from the repository root
     "command": "python benchmarks/peers/conll2000_vs_crfsuite.py --json out.json",
     "date": "2026-12-02",                                        # UTC date of the run (ISO 8601)
     "commit": "3d9e17c...",                                      # git HEAD of the tree measured, or null
     "machine": {"cpu": "...", "cores": 2, ...},                  # or null when not recorded
     "figures": {...},                                            # what the script measured, as it reports it (JSON)
     "notes": "..."}                                              # optional: load, what the run was for

:func:`make` builds such a record for the running script, :func:`record` appends it as one line
(atomically: the whole line in one ``write`` on a file opened for appending) with the current
commit, date, machine and command line; :func:`load` reads a results file back and :func:`figures`
gives each record's figures (a line in the older flat form, without ``"figures"``, is its own
figures). This module imports the standard library only, so a script can use it before numpy or
crfkit is imported.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shlex
import subprocess
import sys

BENCHMARKS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCHMARKS)
RESULTS = os.path.join(BENCHMARKS, "results")
KEYS = ("benchmark", "command", "date", "commit", "machine", "figures")


def git_commit(root: str = ROOT) -> str | None:
    """The commit checked out at ``root`` (with ``+dirty`` when tracked files differ), or None."""
    try:
        head = subprocess.run(
            ["git", "-C", root, "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "") if head else None


def machine() -> dict:
    """CPU model, logical cores, memory and OS of this machine (what a reader needs to compare
    figures)."""
    cpu = platform.processor() or None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gb = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_gb = round(int(line.split()[1]) / 2**20, 1)
                    break
    except (OSError, ValueError):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": mem_gb,
        "system": platform.platform(),
        "python": platform.python_version(),
    }


def command_line(argv: list[str] | None = None) -> str:
    """The command that ran this script, the script's path relative to the repository root when
    inside it."""
    argv = list(sys.argv if argv is None else argv)
    if argv:
        path = os.path.abspath(argv[0])
        if path.startswith(ROOT + os.sep):
            argv[0] = os.path.relpath(path, ROOT)
    return "python " + shlex.join(argv)


def make(
    figures: dict,
    *,
    benchmark: str | None = None,
    command: str | None = None,
    notes: str | None = None,
    **extra,
) -> dict:
    """One record of this run (not written): ``figures`` with the benchmark, command, date, commit
    and machine.

    ``benchmark`` defaults to the running script (``sys.argv[0]``, relative to the repository root),
    ``command`` to its command line, the date to today's (UTC).
    """
    script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if benchmark is None:
        benchmark = (
            os.path.relpath(script, ROOT) if script.startswith(ROOT + os.sep) else (script or None)
        )
    rec = {
        "benchmark": benchmark,
        "command": command or command_line(),
        "date": _dt.datetime.now(_dt.UTC).date().isoformat(),
        "commit": git_commit(),
        "machine": machine(),
        "figures": figures,
    }
    if notes:
        rec["notes"] = notes
    rec.update(extra)
    return rec


def record(figures: dict, path: str | None = None, **kw) -> dict:
    """Append one run's record (:func:`make`; ``kw`` goes there) to ``path`` and return it.

    ``path`` defaults to ``benchmarks/results/<script name>.jsonl``.  The line is written with one
    ``os.write`` on a descriptor opened with ``O_APPEND``, so concurrent runs do not interleave
    lines.
    """
    rec = make(figures, **kw)
    if path is None:
        stem = os.path.splitext(os.path.basename(rec["benchmark"] or "results"))[0]
        path = os.path.join(RESULTS, stem + ".jsonl")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    line = (json.dumps(rec, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    return rec


def load(path: str) -> list[dict]:
    """The records of a results file, in order (blank lines skipped)."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def figures(rec: dict) -> dict:
    """A record's figures: ``rec["figures"]`` in the schema above, the line itself in the older flat
    form."""
    if isinstance(rec.get("figures"), dict) and "benchmark" in rec:
        return rec["figures"]
    return rec


def load_figures(path: str) -> list[dict]:
    """The figures of every record of a results file (either form), in order."""
    return [figures(r) for r in load(path)]
