"""glibc's heap: the trim that gives freed memory back (``malloc_trim``) and the fixed mmap
threshold (``mallopt(M_MMAP_THRESHOLD)``).

Training frees large arrays when it ends (the encoded corpus, the gradient plan, the optimizer's
buffers), but glibc keeps freed heap memory for reuse by ``malloc``, so the process's RSS stays at
the training's peak; what runs next in the same process and does not allocate through ``malloc``
(Python objects live in pymalloc's own ``mmap`` arenas; numba loads its kernels into new mappings)
then grows the RSS past that peak.  Measured on the sklearn-crfsuite tutorial (``CRF.fit`` then
``predict`` in one process): the peak went from 711 MB to 696 MB with a trim between the two.
Dask's workers trim the same way.  Elsewhere than glibc this is a no-op.
:func:`fixed_mmap_threshold` keeps a full-batch run's vectors out of the heap (see there).  The
public names are re-exported by :mod:`crfkit.memtrim`, where crfkit calls them.

Switches: ``CRFKIT_NO_MALLOC_TRIM=1`` makes :func:`release_memory` a no-op,
``CRFKIT_NO_MMAP_THRESHOLD=1`` leaves glibc's threshold alone (``CRFKIT_NO_RUNTIME_HOOKS=1``: both).
:func:`fixed_trim_threshold` (glibc's trim threshold, for a Dask client) follows
``CRFKIT_NO_MALLOC_TRIM`` too.
"""

from __future__ import annotations

import os

from .libc import c_int, c_size_t, libc_function
from .switches import enabled

__all__ = [
    "MMAP_THRESHOLD",
    "MMAP_THRESHOLD_MAX",
    "M_MMAP_THRESHOLD",
    "M_TRIM_THRESHOLD",
    "fixed_mmap_threshold",
    "fixed_trim_threshold",
    "full_batch_vectors",
    "opt_in_mmap_threshold",
    "release_memory",
]

# glibc's M_MMAP_THRESHOLD (malloc.h), and its initial value (128 KiB)
M_MMAP_THRESHOLD, MMAP_THRESHOLD = -3, 128 * 1024


def fixed_mmap_threshold(nbytes: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``nbytes`` (``mallopt(M_MMAP_THRESHOLD)``), unless
    ``MALLOC_MMAP_THRESHOLD_`` is set (the user's choice wins) or ``CRFKIT_NO_MMAP_THRESHOLD`` is.
    Returns whether it was set (False off glibc).

    glibc serves a request of at least the threshold by a mapping of its own, unmapped when freed;
    but by default the threshold is dynamic: freeing such a block raises it to the block's size (up
    to 32 MB), so that from then on arrays of that size come from the heap.  A training run frees
    and allocates vectors of the problem's size at every evaluation, and once they live in the heap,
    the blocks of different lifetimes between them leave holes that the heap cannot hand back: 10-13
    MB of ``crfkit train``'s peak on CoNLL-2000 (238.5-241.2 MB with the dynamic threshold,
    228.1-229.8 MB fixed at 128 KiB; the cost, a fresh mapping per vector, is a few hundred
    microseconds an evaluation).  A process setting: ``crfkit train`` fixes it for the full-batch
    optimizers (:func:`opt_in_mmap_threshold`); the library leaves it to its caller."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or not enabled("mmap_threshold"):
        return False
    fn = libc_function("mallopt", [c_int, c_int])
    return bool(fn(M_MMAP_THRESHOLD, int(nbytes))) if fn else False


# glibc's largest dynamic mmap threshold on 64-bit systems (DEFAULT_MMAP_THRESHOLD_MAX): blocks
# above it are always mapped, whatever the threshold did
MMAP_THRESHOLD_MAX = 32 << 20
_mmap_opt_in = False


def opt_in_mmap_threshold() -> bool:
    """Fix glibc's mmap threshold at 128 KiB now (:func:`fixed_mmap_threshold`), before a full-batch
    run (L-BFGS, OWL-QN) reads its data, and let :func:`full_batch_vectors` adjust it once the run's
    vector size is known.  ``crfkit train`` calls it for those optimizers (a process setting, which
    a library call leaves to its caller).  Not for the per-sequence optimizers: their scratch arrays
    of a few hundred KB, allocated per sequence, would each get a mapping (SGD-L1 on NETtalk 3-grm
    took twice as long).  Returns whether the threshold was fixed."""
    global _mmap_opt_in
    _mmap_opt_in = fixed_mmap_threshold()
    return _mmap_opt_in


def full_batch_vectors(nbytes: int) -> bool:
    """Called before a full-batch run whose vectors take ``nbytes`` each.  In a process that opted
    in (:func:`opt_in_mmap_threshold`), vectors above :data:`MMAP_THRESHOLD_MAX` are mapped whatever
    the threshold, and a threshold of 128 KiB would only map the run's medium blocks too (3-5% of an
    OWL-QN run at NETtalk 3-grm): the threshold is then raised to that maximum, where glibc's
    dynamic threshold ends up anyway.  Returns whether it was changed."""
    if not _mmap_opt_in or int(nbytes) <= MMAP_THRESHOLD_MAX:
        return False
    return fixed_mmap_threshold(MMAP_THRESHOLD_MAX)


# glibc's M_TRIM_THRESHOLD (malloc.h)
M_TRIM_THRESHOLD = -1


def fixed_trim_threshold(nbytes: int) -> bool:
    """Let glibc return freed heap memory to the system above ``nbytes`` at the top of the heap
    (``mallopt(M_TRIM_THRESHOLD)``), as Dask's nanny does for its workers (64 KiB), unless
    ``MALLOC_TRIM_THRESHOLD_`` is set (the user's choice wins) or ``CRFKIT_NO_MALLOC_TRIM`` is.
    Returns whether it was set (False off glibc).  ``crfkit.distributed``'s client calls it
    (``trim_client_heap``)."""
    if "MALLOC_TRIM_THRESHOLD_" in os.environ or not enabled("malloc_trim"):
        return False
    fn = libc_function("mallopt", [c_int, c_int])
    return bool(fn(M_TRIM_THRESHOLD, int(nbytes))) if fn else False


def release_memory() -> bool:
    """Return the C heap's free memory to the operating system; ``True`` when some was released
    (glibc), ``False`` otherwise (nothing to release, not glibc, or ``CRFKIT_NO_MALLOC_TRIM``)."""
    if not enabled("malloc_trim"):
        return False
    fn = libc_function("malloc_trim", [c_size_t])
    return bool(fn(0)) if fn else False
