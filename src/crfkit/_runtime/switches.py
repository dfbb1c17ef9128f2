"""The environment switches that turn crfkit's runtime hooks off (documented in
:mod:`crfkit._runtime`).

A switch is on when its variable is set to anything but the empty string or ``0`` (the same reading
as ``CRFKIT_QUIET_COMPILE``).  Each hook reads its switch when it is installed or called, so a
switch set before ``import crfkit`` keeps the import-time hooks out of the process, and one set
later stops the hooks that act at call time (the heap trim, the mmap threshold, the code-page
release).
"""

from __future__ import annotations

import os

__all__ = ["MASTER_SWITCH", "SWITCHES", "enabled", "switched_on"]

#: turns every hook off
MASTER_SWITCH = "CRFKIT_NO_RUNTIME_HOOKS"

#: hook name -> the variable that turns it off
SWITCHES = {
    "cache_stamp": "CRFKIT_NO_CACHE_STAMP",
    "self_contained": "CRFKIT_NO_SELF_CONTAINED",
    "link_only": "CRFKIT_NO_LINK_ONLY",
    "compile_notice": "CRFKIT_NO_COMPILE_NOTICE",
    "blas_defer": "CRFKIT_NO_BLAS_DEFER",
    "malloc_trim": "CRFKIT_NO_MALLOC_TRIM",
    "mmap_threshold": "CRFKIT_NO_MMAP_THRESHOLD",
    "code_pages": "CRFKIT_NO_CODE_PAGES",
    "interrupt_flag": "CRFKIT_NO_INTERRUPT_RESET",
    "aot": "CRFKIT_NO_AOT",
}


def switched_on(variable: str) -> bool:
    """Whether the environment variable ``variable`` is set to something other than ``""`` or
    ``"0"``."""
    return os.environ.get(variable, "").strip() not in ("", "0")


def enabled(hook: str) -> bool:
    """Whether the hook ``hook`` (a key of :data:`SWITCHES`) may act: neither its own switch nor
    :data:`MASTER_SWITCH` is on."""
    return not (switched_on(MASTER_SWITCH) or switched_on(SWITCHES[hook]))
