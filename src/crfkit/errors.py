"""Error types of crfkit.

Every problem with user input is raised as a :class:`CrfkitError` (or a
subclass) whose message names where the problem is (file and line when there
is one) and what is wrong, so the CLI can print it without a traceback.
"""
from __future__ import annotations


class CrfkitError(Exception):
    """Base class of every error crfkit raises on purpose."""


class DataError(CrfkitError, ValueError):
    """Bad input data: the message is ``path:line: problem``."""

    def __init__(self, problem: str, path: str | None = None, line: int | None = None):
        self.problem = problem
        self.path = path
        self.line = line
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        elif line is not None:
            where = f"line {line}: "
        super().__init__(where + problem)


class ParameterError(CrfkitError, ValueError):
    """A training setting or optimizer parameter that cannot be used (a bad
    value, an unknown name, a state that does not fit the run); a
    ``ValueError`` too, for callers of the Python API."""


class TemplateError(DataError):
    """A feature template that cannot be parsed."""


class ModelError(CrfkitError):
    """A model file that cannot be read (truncated, corrupted, wrong version)."""
