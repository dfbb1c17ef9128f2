"""Moved to :mod:`crfkit.serving` (the HTTP tagging service); this module re-exports it for one
release.

The command line's parts of the old module are :mod:`crfkit.cli.serve` (``crfkit serve``) and
:mod:`crfkit.cli.tag` (``crfkit tag --server``: ``client_tag``, ``query_of``, ``argv_of``).
"""

from .serving import DEFAULT_PORT, MAX_REQUEST_BYTES, BadRequest, TagService, make_server  # noqa: F401

__all__ = ["DEFAULT_PORT", "MAX_REQUEST_BYTES", "BadRequest", "TagService", "make_server"]
