"""The client side: a sharded corpus resident on the workers, the exact full-batch oracle over it,
and iterative parameter mixing for the stochastic methods where it is sound.

Data flow (the client never holds the corpus)::

    files --(count_shard on the workers)--> per-shard counts --(merge on the client)--> FeatureSpace
    FeatureSpace --(a task result, fetched by every worker)--> encode_shard(file, space): Shard futures
    w --(a task result, fetched by every worker)--> loss_grad(shard, space, w) per shard --(pairwise sums)--> (f, g)

Shard ``i`` goes to worker ``floor(i * W / S)`` (``allow_other_workers``: the scheduler may move
it, and re-runs it anywhere when its worker is lost); the shards of one worker are then joined
into one block (a task over the shard tasks: one kernel call and one gradient per worker and
evaluation).  The pairwise sums pair blocks ``(0, 1), (2, 3), ...`` then their sums, a fixed tree
by block index, so that the result is bitwise the same whatever the placement, including after a
worker was lost and its block rebuilt elsewhere from the files.
"""

from __future__ import annotations

import glob
import hashlib
import os
import time
from collections.abc import Sequence

import numpy as np

from ..errors import CrfkitError, DataError, ParameterError
from ..kernels import vec as _vec
from ..model import FeatureSpace
from ..objective import Regularization
from . import shards as S

#: the stochastic methods parameter mixing runs (McDonald, Hall & Mann 2010; Zinkevich et al. 2010)
MIXING = ("sg", "asg", "sgd-l1")
#: why the others are refused (the message of the ParameterError)
_NOT_MIXED = {
    "sag": "its memory of one gradient per sequence (and their running sum) would have to be kept per "
    "worker and merged consistently after every mixing step; averaging the workers' weights "
    "breaks the invariant that the sum equals the stored gradients, so the method's linear "
    "convergence is lost",
    "sdca": "its dual variables (marginals per sequence) must stay consistent with the primal weights "
    "w = sum of the dual contributions; averaging primal weights across workers breaks that "
    "relation (CoCoA-style dual aggregation would be needed)",
}


#: seconds a run waits with no live worker before it stops (``dask_worker_timeout=``,
#: ``--dask-worker-timeout``; the environment's ``CRFKIT_DASK_WORKER_TIMEOUT`` changes the default)
DEFAULT_WORKER_TIMEOUT = 120.0
WORKER_TIMEOUT_ENV = "CRFKIT_DASK_WORKER_TIMEOUT"


class NoLiveWorkers(CrfkitError):
    """The cluster had no live worker for the run's worker timeout: training stopped."""


def worker_timeout(value=None) -> float:
    """The run's wait without a live worker, in seconds: ``value``, else
    ``$CRFKIT_DASK_WORKER_TIMEOUT``, else :data:`DEFAULT_WORKER_TIMEOUT`; a positive finite
    number."""
    where = "dask_worker_timeout"
    if value is None:
        value = os.environ.get(WORKER_TIMEOUT_ENV)
        where = WORKER_TIMEOUT_ENV
        if value is None or value == "":
            return DEFAULT_WORKER_TIMEOUT
    try:
        t = float(value)
    except (TypeError, ValueError):
        raise ParameterError(f"{where}={value!r}: expected a number of seconds") from None
    if not (t > 0 and t < float("inf")):
        raise ParameterError(f"{where}={value!r}: expected a positive number of seconds")
    return t


def await_futures(client, futures, timeout: float) -> None:
    """Wait until ``futures`` are done (finished or failed), checking between short waits that the
    cluster has a live worker; once it has had none for ``timeout`` seconds, raise
    :class:`NoLiveWorkers` (the scheduler would otherwise wait for one forever).  A worker that
    comes back in time (a nanny's restart, a new worker) resets the clock."""
    from distributed import wait

    futures = list(futures)
    poll = max(0.05, min(1.0, timeout / 5))
    since = None
    while True:
        try:
            wait(futures, timeout=poll)
            return
        except TimeoutError:
            pass
        try:
            live = len(client.nthreads())
        except Exception:  # the scheduler itself unreachable: no worker either
            live = 0
        if live:
            since = None
            continue
        now = time.monotonic()
        since = now if since is None else since
        if now - since >= timeout:
            raise NoLiveWorkers(
                f"no live Dask worker for {timeout:g} s (dask_worker_timeout / "
                f"--dask-worker-timeout / ${WORKER_TIMEOUT_ENV}): every worker was lost and none "
                "came back; training stopped"
            )


def expand_paths(paths) -> list[str]:
    """File paths from paths and glob patterns (``*``, ``?``, ``[``), in the order given; a
    pattern's matches sorted; a name that matches nothing is a :class:`DataError`."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[str] = []
    for p in paths:
        p = os.fspath(p)
        if any(ch in p for ch in "*?["):
            hits = sorted(glob.glob(p))
            if not hits:
                raise DataError("the pattern matches no file", p)
            out.extend(os.path.abspath(h) for h in hits)
        else:
            if not os.path.isfile(p):
                raise DataError("no such file", p)
            out.append(os.path.abspath(p))
    if not out:
        raise DataError("no training files given")
    return out


def _detect(path: str) -> str:
    from ..io.columns import open_source
    from ..io.crfsuite import DETECT_LINES, looks_like_crfsuite

    with open_source(path) as src:
        head = src.sniff(4 * DETECT_LINES)
    return "crfsuite" if looks_like_crfsuite(head) else "columns"


def tree_sum(client, futures):
    """Pairwise sums of futures, level by level (depth ceil(log2 S)): a future of the total."""
    level = list(futures)
    if not level:
        raise ValueError("nothing to sum")
    while len(level) > 1:
        nxt = [
            client.submit(S.add, level[i], level[i + 1], pure=False)
            for i in range(0, len(level) - 1, 2)
        ]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


class ShardedCorpus:
    """The training corpus as encoded shards resident on the Dask workers (futures); what
    :func:`crfkit.train.train_corpus` needs of a corpus besides the arrays: sizes, the largest
    feature value, a fingerprint for checkpoints, and the objective / stochastic driver over the
    shards."""

    is_sharded = True
    is_weighted = False  # sample weights are not carried by shards (yet)
    weight = None

    def __init__(self, client, sources, space, shard_futures, space_future, infos, threads):
        self.client = client
        self.sources = list(sources)
        self.space = space
        self.shards = list(shard_futures)
        self.space_future = space_future
        self.infos = infos
        self.threads = threads
        self.shard_sizes = np.array([i["n_sequences"] for i in infos], dtype=np.int64)
        self.n_sequences = int(self.shard_sizes.sum())
        self.n_tokens = int(sum(i["n_tokens"] for i in infos))
        self.nnz = int(sum(i["nnz"] for i in infos))
        self.nbytes = int(sum(i["nbytes"] for i in infos))
        self.worker_timeout = DEFAULT_WORKER_TIMEOUT  # (train_files sets the run's)

    @property
    def total_weight(self) -> float:
        """W: the number of sequences (shards carry no sample weights)."""
        return float(self.n_sequences)

    def __len__(self) -> int:
        return len(self.sources)

    def feature_scale(self) -> tuple[float, str]:
        """(largest |feature value|, the shard file holding it)."""
        k = int(np.argmax([i["max_value"] for i in self.infos]))
        return float(self.infos[k]["max_value"]), self.sources[k].path

    def fingerprint(self, space) -> str:
        """SHA-256 of the feature space and of every encoded shard, in order (a checkpoint of this
        sharded run resumes on the same files, whichever workers hold them).  The space's part was
        computed on the worker that merged it (where its attribute names are strings already)."""
        if space is not self.space:
            raise CrfkitError("a sharded corpus is fingerprinted with its own feature space only")
        h = hashlib.sha256(b"crfkit-sharded")
        h.update(self.space_digest.encode())
        for i in self.infos:
            h.update(i["digest"].encode())
        return h.hexdigest()

    def objective(self, space, reg: Regularization, threads=None) -> DistributedObjective:
        return DistributedObjective(self, reg)

    def stochastic(self, algorithm: str):
        if algorithm not in MIXING:
            why = (
                _NOT_MIXED["sdca"]
                if algorithm in ("sdca", "oeg")
                else _NOT_MIXED["sag"]
                if (algorithm.startswith("sag") or algorithm == "hybrid")
                else (
                    "its per-coordinate or per-step state (step counters, accumulated squares, dual or "
                    "passive-aggressive updates) has no sound average across workers in crfkit yet"
                )
            )
            raise ParameterError(
                f"{algorithm} cannot train on a Dask cluster: parameter mixing (each worker an "
                f"epoch from the same weights, then their average) is offered for "
                f"{', '.join(MIXING)} only; for {algorithm}: {why}. Use lbfgs/owlqn (exact, "
                "data-parallel) or one of " + ", ".join(MIXING)
            )
        from functools import partial

        from .mixing import parameter_mixing

        return partial(parameter_mixing, _algorithm=algorithm)

    def state_schema(self, algorithm: str) -> tuple[dict, tuple]:
        """The schema (and cross-key rules) of a resumed state of ``algorithm`` on this corpus:
        parameter mixing's for the stochastic methods (see
        :func:`crfkit.training.checkpoint.validate_state`)."""
        from .mixing import STATE_SCHEMA

        return STATE_SCHEMA, ()

    def release(self) -> None:
        """Drop the shards from the cluster."""
        for f in self.shards:
            f.release()
        self.shards = []


#: glibc's M_TRIM_THRESHOLD (malloc.h), and the value Dask's nanny gives its workers
#: (MALLOC_TRIM_THRESHOLD_)
_TRIM_BYTES = 65536


def trim_client_heap() -> bool:
    """Let glibc return freed heap memory to the system above 64 KiB
    (``mallopt(M_TRIM_THRESHOLD)``), in the client process, as Dask's nanny does for its workers;
    unless ``MALLOC_TRIM_THRESHOLD_`` is set (the user's choice wins).  Without it the buffers of
    every evaluation's messages (w out, the gradient in: megabytes each) stay in the client's heap
    after they are freed, about 100 MB at 4M features.  Returns whether it was set (False off
    glibc, or under ``CRFKIT_NO_MALLOC_TRIM``)."""
    from ..memtrim import fixed_trim_threshold

    return fixed_trim_threshold(_TRIM_BYTES)


def _n_columns(counts) -> int | None:
    return counts.n_columns


class RemoteNames(Sequence):
    """The attribute names of a feature space merged on the workers, as the client holds them: their
    number, and the future of the space.  Reading them (an index, iteration, ``==``, a lookup,
    saving the model) fetches them once, packed (:class:`crfkit.model.StringTable`), and drops the
    future; until then the client holds no name at all (a training run reads them at its end:
    :func:`resolve_names`)."""

    def __init__(self, n: int, client, space_future):
        self._n = int(n)
        self._client = client
        self._future = space_future
        self._table = None

    def table(self):
        """The names, packed (fetched on first use)."""
        if self._table is None:
            f = self._client.submit(S.packed_names, self._future, pure=False)
            self._table = f.result()
            f.release()
            self._future = self._client = None
        return self._table

    def __len__(self) -> int:
        return self._n

    def packed(self):
        return self.table().packed()

    def take(self, idx):
        return self.table().take(idx)

    def __getitem__(self, i):
        return self.table()[i]

    def __iter__(self):
        return iter(self.table())

    def __eq__(self, other):
        return self.table() == other

    __hash__ = None

    def __reduce__(self):  # pickled (a model sent elsewhere): the names themselves
        return (_identity, (self.table(),))

    def __repr__(self) -> str:
        return f"RemoteNames({self._n} attribute names{', fetched' if self._table is not None else ''})"


def _identity(x):
    return x


def resolve_names(space) -> None:
    """Replace a :class:`RemoteNames` in ``space.attributes`` by the packed names (a model that
    outlives the cluster, or is saved, needs them); a no-op for any other space."""
    if isinstance(space.attributes, RemoteNames):
        space.attributes = space.attributes.table()
        space.__dict__.pop("attr_index", None)


def load_sharded(
    client,
    paths,
    *,
    templates=None,
    format: str = "auto",
    pad: bool = True,
    docstart: str = "skip",
    support: str = "observed",
    transitions: str | None = None,
    min_freq: float = 0,
    threads: int | None = None,
    log=None,
    wait_timeout: float | None = None,
):
    """Read, count and encode the training files on the workers; returns ``(space, ShardedCorpus)``.
    ``wait_timeout``: the seconds without a live worker before it stops (:func:`worker_timeout`).

    ``paths``: files and glob patterns (``.gz`` ok), one shard per file, read by the workers (so
    they must see the same paths: a shared file system, or the same copies everywhere).
    ``format``: ``columns`` (CoNLL / CRF++ column files with ``templates``, a
    :class:`~crfkit.features.templates.Templates` or its text; default: the built-in chunking
    templates), ``crfsuite`` (attribute files), or ``auto`` (detected on the first file).
    ``support``, ``transitions``, ``min_freq``: as :func:`crfkit.features.encode.build`, applied to
    the global counts.  ``threads``: numba threads inside each worker task.
    """
    files = expand_paths(paths)
    trim_client_heap()
    if format == "auto":
        format = _detect(files[0])
    if format not in ("columns", "crfsuite"):
        raise ParameterError(f"format must be columns, crfsuite or auto, not {format!r}")
    ttext = None
    if format == "columns":
        from ..features.templates import Templates, default_chunking_templates

        if templates is None:
            templates = default_chunking_templates()
        if isinstance(templates, str):
            templates = Templates.parse(templates, name="<templates>")
        if templates.bigram_observation:
            raise ParameterError(
                "bigram-observation templates (B lines with macros) are not supported on a Dask "
                "cluster yet; train them in one process"
            )
        if not templates.unigram:
            raise ParameterError("no unigram (U) template: the model would have no state features")
        ttext = templates.source
        if not templates.has_transitions:
            transitions = "none"  # CRF++: a template set without a B line trains no transitions
    elif templates is not None:
        raise ParameterError(
            "templates apply to column files; a CRFsuite attribute file already lists the attributes"
        )
    sources = [S.Source(p, format, ttext, bool(pad), docstart) for p in files]
    workers = sorted(client.scheduler_info()["workers"])
    if not workers:
        raise CrfkitError("the Dask cluster has no workers")
    nw, ns = len(workers), len(sources)
    where = [[workers[i * nw // ns]] for i in range(ns)]
    t0 = time.perf_counter()
    counts = [
        client.submit(S.count_shard, src, workers=w, allow_other_workers=True, pure=False)
        for src, w in zip(sources, where)
    ]
    # the reduce step runs on a worker: the merged vocabulary (millions of strings and the dict that
    # made them, at scale several times the client's working memory) never sits in the client, which
    # gets the packed view of the space (attribute names as one byte string).  The space is a task
    # result, not scattered data: Dask's active memory manager keeps one replica of scattered data,
    # and a worker lost with it would leave the shards impossible to re-encode; the count tasks stay
    # in the graph as the merge's inputs, so a lost space is merged again from the files.
    space_future = client.submit(
        S.merge_space,
        support,
        transitions,
        min_freq,
        *counts,
        workers=where[0],
        allow_other_workers=True,
        pure=False,
    )
    # the merge checked that every column file has the first one's columns: that number is the
    # corpus's
    ncols = (
        client.submit(_n_columns, counts[0], pure=False).result() if format == "columns" else None
    )
    layout = client.submit(S.space_layout, space_future, pure=False)
    del counts
    rest, n_attributes, space_digest = layout.result()
    layout.release()
    space = FeatureSpace(attributes=RemoteNames(n_attributes, client, space_future), **rest)
    if log:
        log(
            f"dask: vocabulary of {ns} shards merged in {time.perf_counter() - t0:.2f}s: {space.n_labels} labels, "
            f"{space.n_attributes} attributes, {space.n_features} features"
        )
    shard_futures = [
        client.submit(
            S.encode_shard, src, space_future, workers=w, allow_other_workers=True, pure=False
        )
        for src, w in zip(sources, where)
    ]
    infos = client.gather(
        [client.submit(S.shard_info, f, space_future, pure=False) for f in shard_futures]
    )
    # one block per worker: its shards (contiguous indices) as one corpus; the shards' data is then
    # dropped, their tasks stay in the graph, so a lost block is rebuilt from the files
    blocks = []
    for k in range(min(nw, ns)):
        idx = [i for i in range(ns) if i * nw // ns == k]
        if idx:
            blocks.append(
                client.submit(
                    S.concat_shards,
                    *[shard_futures[i] for i in idx],
                    workers=where[idx[0]],
                    allow_other_workers=True,
                    pure=False,
                )
            )
    await_futures(client, blocks, worker_timeout(wait_timeout))
    for f in shard_futures:
        f.release()
    sc = ShardedCorpus(client, sources, space, blocks, space_future, infos, threads)
    sc.worker_timeout = worker_timeout(wait_timeout)
    sc.space_digest = space_digest
    sc.n_columns = ncols
    sc.format = format
    if log:
        log(
            f"dask: {sc.n_sequences} sequences, {sc.n_tokens} tokens encoded on {nw} workers "
            f"({sc.nbytes / 2**20:.1f} MiB resident) in {time.perf_counter() - t0:.2f}s"
        )
    return space, sc


class DistributedObjective:
    """The full-batch objective of :class:`crfkit.objective.Objective` over a
    :class:`ShardedCorpus`: ``f(w) = (1/n) sum_i nll_i + (l2/2)|w|^2 + l1|w|_1`` with the sum over
    every shard computed on the workers (crfkit's multi-threaded kernels inside each task) and added
    by a tree of pairwise sums. The interface the L-BFGS / OWL-QN drivers and
    :func:`crfkit.train.train_corpus` use: ``value_and_grad``, ``value``, ``nll_sum_grad``,
    ``nll_sum``, ``empirical_counts``, ``n``, ``reg``,
    ``n_full`` / ``n_oracle`` / ``effective_passes``, ``to_crfsuite``."""

    #: ``value_and_grad`` returns a new gradient array at every call (the reduced one)
    fresh_gradients = True

    def __init__(self, corpus: ShardedCorpus, reg: Regularization = Regularization()):  # noqa: B008
        self.corpus = corpus
        self.client = corpus.client
        self.space = corpus.space
        self.reg = reg
        self.n = corpus.n_sequences
        self.W = float(self.n)  # no sample weights over shards: W = n
        self.weighted = False
        self.threads = corpus.threads
        self.n_full = 0
        self.n_oracle = 0
        self._emp = None
        self.seconds_remote = 0.0  # wall time inside the map-reduce calls

    @property
    def n_features(self) -> int:
        return self.space.n_features

    @property
    def effective_passes(self) -> float:
        return self.n_full + self.n_oracle / self.n

    def scatter(self, w: np.ndarray):
        """``w`` for the workers (one future): a task result, so that a worker lost during an
        evaluation leaves it recomputable (scattered data would not be)."""
        return self.client.submit(S.const, np.ascontiguousarray(w, dtype=np.float64), pure=False)

    def map_reduce(self, fn, *args, w=None):
        """The sum over shards of ``fn(shard, [w,] *args)``, by the fixed pairwise tree (a shard
        holds the space it was encoded against)."""
        t = time.perf_counter()
        c = self.corpus
        extra = (self.scatter(w),) if w is not None else ()
        parts = [self.client.submit(fn, s, *extra, *args, pure=False) for s in c.shards]
        root = tree_sum(self.client, parts)
        del parts
        await_futures(self.client, [root], c.worker_timeout)
        out = root.result()
        root.release()
        self.seconds_remote += time.perf_counter() - t
        return out

    def nll_sum_grad(self, w: np.ndarray, g_out: np.ndarray | None = None):
        """sum_i -log p(y_i|x_i, w) and its gradient (unnormalised, no regulariser)."""
        v, g = self.map_reduce(S.loss_grad, self.threads, w=w)
        self.n_full += 1
        if g_out is not None:
            g_out[:] = g
            g = g_out
        return float(v), g

    def nll_sum(self, w: np.ndarray, count: bool = True) -> float:
        self.n_full += bool(count)
        return float(self.map_reduce(S.loss_only, self.threads, w=w))

    def value_and_grad(self, w: np.ndarray):
        w = np.ascontiguousarray(w, dtype=np.float64)
        v, g = self.nll_sum_grad(w)
        g /= self.n
        if self.reg.l2:
            _vec.axpy(self.reg.l2, w, g)  # g += l2 w without a temporary of the problem's size
        return self.reg.penalized(v / self.n, w), g

    def value(self, w: np.ndarray, count: bool = True) -> float:
        w = np.ascontiguousarray(w, dtype=np.float64)
        return self.reg.penalized(self.nll_sum(w, count) / self.n, w)

    @property
    def empirical_counts(self) -> np.ndarray:
        """sum_i phi(x_i, y_i) over every shard."""
        if self._emp is None:
            self._emp = self.map_reduce(_shard_empirical, self.threads)
        return self._emp

    def to_crfsuite(self, f: float) -> float:
        return f * self.n

    def oracle(self, *a, **k):
        raise CrfkitError(
            "the per-example oracle does not run on the client of a Dask cluster: the stochastic "
            "methods train by parameter mixing (sg, asg, sgd-l1)"
        )

    apply_gradient = oracle


def _shard_empirical(shard, threads):
    S.set_shard_threads(threads)
    with shard._lock:
        return np.array(shard.objective(threads).empirical_counts, copy=True)
