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


class OutputError(CrfkitError, OSError):
    """A file that cannot be written (a directory, a read-only place, a full disk, a dangling link).
    The message names the path the caller gave (never a temporary file); ``errno`` and ``filename``
    are those of an :class:`OSError`."""

    def __init__(self, message: str, *, path: str | None = None, errno: int | None = None):
        super().__init__(message)
        self.errno = errno
        self.filename = path
        self.strerror = message

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class TrainingDiverged(CrfkitError):
    """Training stopped because its objective became non-finite or grew far beyond its start
    (see :mod:`crfkit.train`); no model is returned.  ``status`` is ``"diverged"``; ``iteration``,
    ``objective``, ``limit``, ``algorithm``, ``hint`` (a suggestion about the step size, or "")
    and ``history`` (the trace records so far) describe the run."""

    status = "diverged"

    def __init__(
        self,
        message: str,
        *,
        algorithm: str = "",
        iteration: int = 0,
        objective: float = float("nan"),
        limit: float = float("nan"),
        hint: str = "",
        history: list | None = None,
        effective_passes: float = 0.0,
        seconds: float = 0.0,
    ):
        super().__init__(message)
        self.algorithm = algorithm
        self.iteration = iteration
        self.objective = objective
        self.limit = limit
        self.hint = hint
        self.history = list(history or [])
        self.effective_passes = effective_passes
        self.seconds = seconds


class DataWarning(UserWarning):
    """Input that crfkit reads, but not as it is written (e.g. CR-only line
    endings): the message names the file. The CLI prints it as
    ``crfkit: warning: <message>``."""
