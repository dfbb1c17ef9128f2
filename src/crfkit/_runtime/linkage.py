"""Self-contained libraries: every numba library of crfkit runs its own copies of the kernels it
calls.

A kernel that calls another (``sdca_step`` calls ``chain_marginals_pf``) gets, in its own compiled
library, a copy of the callee linked in with ``linkonce_odr`` linkage, and the callee has its own
library as well.  The two copies are optimised in different modules, so with fast-math reassociation
they can round differently.  Which one a call runs was left to the JIT's symbol resolution: the
definition loaded first in the process wins.  A process that compiles the caller has loaded the
callee's own library first (it compiled it on the way); a process that loads the caller from the
cache often has not, and runs the caller's copy.  So a run that compiled the kernels and a run that
loaded them gave other last bits, and so could two cache-loaded runs that called kernels in another
order (a resume).  :func:`self_contained_libraries` makes every crfkit library use its own copies:
before a library's module is optimised, the ``linkonce_odr`` definitions linked into it become
``internal`` (private to the module, so no other definition can be picked).  Only crfkit's kernels
are internalised, not numba's helpers (some are found by name at run time).  The machine code that
runs is then the code compiled into the caller's library, whether it was just compiled or loaded
from the cache, whatever was loaded before.  The same copies were compiled into every module before;
only which one runs changes.

It wraps numba's private ``CPUCodeLibrary._optimize_final_module``; where that is missing (another
numba), or with ``CRFKIT_NO_SELF_CONTAINED=1`` (or ``CRFKIT_NO_RUNTIME_HOOKS=1``), the JIT picks as
numba's own does (results are then the same up to the last bits, which may differ between a
compiling and a loading run).

:func:`link_only_wrappers` keeps the two wrapper libraries numba builds around every ``prange`` loop
as IR that only the kernel's library optimises and compiles (numba optimised and compiled each of
them on its own as well, and never ran that code); ``CRFKIT_NO_LINK_ONLY=1`` turns it off.
"""

from __future__ import annotations

from .switches import enabled

__all__ = ["OWN_PREFIX", "link_only_wrappers", "self_contained_libraries"]

#: the mangled names of crfkit's kernels (numba's Itanium-style mangling of crfkit.kernels.*)
OWN_PREFIX = "_ZN6crfkit7kernels"
_SELF_CONTAINED = {"installed": False}


def self_contained_libraries() -> bool:
    """Make every numba library call its own copies of the crfkit kernels linked into it (see the
    module docstring): wraps numba's ``CPUCodeLibrary._optimize_final_module`` so that the
    ``linkonce_odr`` definitions of crfkit kernels (their mangled names start with
    :data:`OWN_PREFIX`) become ``internal`` before the module is optimised.  Numba's own helpers and
    the parallel loops' gufuncs keep their linkage: some are found by name at run time
    (internalising every ``linkonce_odr`` definition crashed the parallel Viterbi).  Must run before
    the kernels compile (module import).  Returns False when this numba has no such hook, or when
    the hook is switched off (nothing is changed then)."""
    if not enabled("self_contained"):
        return False
    if _SELF_CONTAINED["installed"]:
        return True
    try:
        import llvmlite.binding as ll
        from numba.core import codegen
    except ImportError:  # pragma: no cover - numba is a dependency
        return False
    cls = getattr(codegen, "CPUCodeLibrary", None)
    orig = getattr(cls, "_optimize_final_module", None)
    odr = getattr(getattr(ll, "Linkage", None), "linkonce_odr", None)
    if orig is None or odr is None:  # pragma: no cover - another numba
        return False

    def _optimize_final_module(self):
        for fn in getattr(getattr(self, "_final_module", None), "functions", ()):
            if fn.linkage == odr and not fn.is_declaration and fn.name.startswith(OWN_PREFIX):
                fn.linkage = "internal"
        return orig(self)

    _optimize_final_module.crfkit_original = orig
    cls._optimize_final_module = _optimize_final_module
    _SELF_CONTAINED["installed"] = True
    return True


#: the names numba gives the libraries of a parallel loop's two wrappers (``parallel.py``'s
#: ``build_gufunc_wrapper`` and ``wrappers.py``'s ``_GufuncWrapper``, whose library is named after
#: the wrapper object's repr)
_WRAPPER_LIBRARIES = ("parallelgufuncwrapper", "_GufuncWrapper object")
_LINK_ONLY = {"installed": False, "skipped": 0}


def _link_only(lib) -> bool:
    name = str(getattr(lib, "name", ""))
    return name == _WRAPPER_LIBRARIES[0] or _WRAPPER_LIBRARIES[1] in name


def link_only_wrappers() -> bool:
    """Compile the two wrapper libraries of every ``prange`` loop as link-only IR: neither optimised
    nor turned into machine code on their own.

    Numba compiles a parallel loop's body (the "gufunc") into a library, then wraps it twice
    (``_GufuncWrapper``, then ``parallelgufuncwrapper``), each wrapper a library of its own that links
    in a copy of the one below; the kernel's library links in the outer wrapper.  Every library is
    optimised and compiled to machine code when it is finalised, so the loop body, with every kernel
    it calls, went through LLVM's optimiser and code generator four times, and the two wrappers'
    machine code never ran: nothing asks for their addresses, and only the kernel's library, in
    which everything is linked and optimised once more, is cached and called.  With this hook the
    wrappers' libraries stay IR (finalised without the optimiser and without being added to the
    JIT); the kernel's library optimises and compiles it with the rest.  Measured in empty caches on
    the decoding group (``crfkit warmup --step tag``): 126.5 s -> 95.4 s of compile CPU.

    The loop body's own library is left as numba builds it: its machine code can run (in the
    process that compiled it, the kernel's call to the body may resolve to that library's copy),
    and compiling it unoptimised crashed a parallel Viterbi that ran right after its compilation.

    Should anything ask a wrapper library for a function's address, it is then added to the JIT and
    compiled as numba would have (the hook only postpones).  Wraps numba's private
    ``CPUCodeLibrary._optimize_final_module``, ``JITCodeLibrary._finalize_final_module`` and
    ``get_pointer_to_function``; where they are missing (another numba), or with
    ``CRFKIT_NO_LINK_ONLY=1`` (or ``CRFKIT_NO_RUNTIME_HOOKS=1``), numba compiles the wrappers as
    usual.  Must run before the kernels compile (module import)."""
    if not enabled("link_only"):
        return False
    if _LINK_ONLY["installed"]:
        return True
    try:
        from numba.core import codegen
    except ImportError:  # pragma: no cover - numba is a dependency
        return False
    cls = getattr(codegen, "CPUCodeLibrary", None)
    jcls = getattr(codegen, "JITCodeLibrary", None)
    names = ("_optimize_final_module", "_finalize_final_module", "get_pointer_to_function")
    if cls is None or jcls is None or not all(hasattr(jcls, n) for n in names):
        return False  # pragma: no cover - another numba
    for n in ("_finalize_dynamic_globals", "_verify_declare_only_symbols", "_finalize_specific"):
        if not hasattr(jcls, n):  # pragma: no cover - another numba
            return False
    opt = cls._optimize_final_module
    fin = jcls._finalize_final_module
    ptr = jcls.get_pointer_to_function

    def _optimize_final_module(self):
        if _link_only(self):
            return None
        return opt(self)

    def _finalize_final_module(self):
        if not _link_only(self):
            return fin(self)
        # what numba's own does, less adding the module to the JIT and compiling it
        self._finalize_dynamic_globals()
        self._verify_declare_only_symbols()
        self._finalized = True
        self._crfkit_link_only = True
        _LINK_ONLY["skipped"] += 1
        return None

    def get_pointer_to_function(self, name):
        if self.__dict__.pop("_crfkit_link_only", False):
            # postponed, not skipped: compile it now, as numba would have at finalising
            cleanup = self._codegen._add_module(self._final_module)
            if cleanup:
                import weakref

                weakref.finalize(self, cleanup)
            self._finalize_specific()
        return ptr(self, name)

    cls._optimize_final_module = _optimize_final_module
    jcls._finalize_final_module = _finalize_final_module
    jcls.get_pointer_to_function = get_pointer_to_function
    _LINK_ONLY["installed"] = True
    return True
