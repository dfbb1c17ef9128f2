"""Training on a Dask cluster (``pip install 'crfkit[dask]'``): corpora that never sit in one
process.

::

    from dask.distributed import Client
    from crfkit.train import train
    client = Client("tcp://scheduler:8786")            # or crfkit.distributed.local_client(4)
    res = train(["data/part-*.txt.gz"], None, client=client, c2=1.0)   # column files, chunking templates
    res.model.save("model.crfkit")

* **Sharded data** (:func:`load_sharded`): one shard per file; the workers read and count their
  shards (map), the client merges the counts into ONE feature space with the frequency cut-off
  applied globally (reduce: the feature ids of a single-process run on the concatenated files),
  sends it to every worker (as a task result, recomputable), and the workers encode their shards and
  keep them as futures.
* **Exact full-batch oracle** (:class:`DistributedObjective`): L-BFGS / OWL-QN run unchanged on the
  client; each evaluation sends ``w`` to the workers, every shard returns its loss and gradient
  (crfkit's multi-threaded kernels in the worker), a fixed tree of pairwise sums adds them.
* **Parameter mixing** (:mod:`crfkit.distributed.mixing`) for ``sg``, ``asg``, ``sgd-l1``; the
  other stochastic methods are refused with the reason.
* **Faults**: the encoded shards are task results derived from the files, so Dask re-runs them from
  the files when a worker is lost; the sums are a fixed tree by shard index, so training goes on
  to the same (bitwise) result.  The client's checkpoints work as in one process.

Nothing here is imported by the single-process path (``import crfkit``, ``crfkit.train``,
``crfkit.cli`` do not import dask).  See ``docs/distributed.md`` for the cost model.
"""

from __future__ import annotations

import os

from ..errors import CrfkitError, ParameterError

try:  # the optional extra
    import dask  # noqa: F401

    import distributed  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise CrfkitError(
        f"training on a Dask cluster needs the optional extra: pip install 'crfkit[dask]' ({e})"
    ) from None

from .core import (  # noqa: E402
    DEFAULT_WORKER_TIMEOUT,
    MIXING,
    DistributedObjective,
    NoLiveWorkers,
    RemoteNames,
    ShardedCorpus,
    expand_paths,
    load_sharded,
    resolve_names,
    tree_sum,
    worker_timeout,
)

__all__ = [
    "DEFAULT_WORKER_TIMEOUT",
    "MIXING",
    "NoLiveWorkers",
    "worker_timeout",
    "DistributedObjective",
    "RemoteNames",
    "ShardedCorpus",
    "resolve_names",
    "expand_paths",
    "load_sharded",
    "tree_sum",
    "train_files",
    "local_client",
    "connect",
    "dashboard",
]


def local_client(n_workers: int, threads_per_worker: int = 1, **kwargs):
    """A :class:`distributed.Client` on a new ``LocalCluster`` of ``n_workers`` worker processes
    (``threads_per_worker`` Dask threads each; crfkit's numba threads inside a task are the
    ``threads`` of training).  The workers get this crfkit on their ``PYTHONPATH``.  The client
    fetches results from the workers directly (``direct_to_workers``: the reduced gradient,
    megabytes at every evaluation, does not pass through the scheduler), which the workers of a
    local cluster allow."""
    from distributed import Client, LocalCluster

    if int(n_workers) < 1:
        raise ParameterError("a LocalCluster needs at least one worker")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    pp = os.environ.get("PYTHONPATH", "")
    if root not in pp.split(os.pathsep):
        os.environ["PYTHONPATH"] = root + (os.pathsep + pp if pp else "")
    kwargs.setdefault("dashboard_address", ":0")
    kwargs.setdefault("silence_logs", 40)
    cluster = LocalCluster(
        n_workers=int(n_workers),
        threads_per_worker=int(threads_per_worker),
        processes=True,
        **kwargs,
    )
    return Client(cluster, direct_to_workers=True)


def connect(spec: str, threads_per_worker: int = 1):
    """``local:N`` (a LocalCluster of N worker processes) or a scheduler address
    (``tcp://host:8786``)."""
    if spec.startswith("local:"):
        try:
            n = int(spec[6:])
        except ValueError:
            raise ParameterError(
                f"--dask {spec!r}: expected local:N with N a number of workers"
            ) from None
        return local_client(n, threads_per_worker)
    from distributed import Client

    try:
        return Client(spec, timeout="30s")
    except (OSError, TimeoutError) as e:
        raise CrfkitError(f"cannot reach the Dask scheduler at {spec}: {e}") from None


def dashboard(client) -> str | None:
    """The dashboard link when the scheduler runs one (it needs bokeh), else None."""
    try:
        if "dashboard" in client.scheduler_info().get("services", {}):
            return client.dashboard_link
    except Exception:  # pragma: no cover
        return None
    return None


def train_files(
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
    l1=None,
    l2=None,
    c1=None,
    c2=None,
    rho1=None,
    rho2=None,
    X_dev=None,
    Y_dev=None,
    dev_path=None,
    threads: int | None = None,
    verbose: bool = False,
    log=print,
    meta=None,
    dask_worker_timeout: float | None = None,
    **kwargs,
):
    """Train on files read by the workers of ``client``; returns :class:`crfkit.train.TrainResult`.

    ``paths``, ``templates``, ``format``, ``pad``, ``docstart``, ``support``, ``transitions``,
    ``min_freq``: see :func:`load_sharded`.  Regularisation as :func:`crfkit.train.train` (``n``:
    the sequences of every shard).  A development set, scored on the client: ``dev_path`` (a file
    of the training format) or ``X_dev``/``Y_dev`` (attribute lists).  ``threads``: numba threads
    inside each worker task (and on the client for the dev set).  The other keyword arguments go to
    :func:`crfkit.train.train_corpus` (``algorithm``, stopping rules, ``trace``, ``checkpoint``,
    ``resume``, ``params``, ``seed``...).  A model trained from column files remembers its
    templates (``model.meta``), as :func:`crfkit.pipeline.train_columns` does, so it tags column
    files.

    ``dask_worker_timeout``: seconds the run waits while the cluster has no live worker (all lost,
    none restarted) before it stops with :class:`NoLiveWorkers` (a :class:`CrfkitError`); default
    ``$CRFKIT_DASK_WORKER_TIMEOUT``, else 120.  A checkpoint written before (``checkpoint=``) is
    kept: resume from it once the cluster is back.
    """
    for k in ("dense", "B", "partial_labels", "allowed"):
        if kwargs.get(k):
            raise ParameterError(f"{k} is not supported on a Dask cluster yet")
    wait_s = worker_timeout(dask_worker_timeout)
    try:
        return _train_files(
            client,
            paths,
            templates,
            format,
            pad,
            docstart,
            support,
            transitions,
            min_freq,
            dict(l1=l1, l2=l2, c1=c1, c2=c2, rho1=rho1, rho2=rho2),
            X_dev,
            Y_dev,
            dev_path,
            threads,
            verbose,
            log,
            meta,
            wait_s,
            kwargs,
        )
    except NoLiveWorkers as e:
        ck = kwargs.get("checkpoint")
        keep = (
            f"; the checkpoint {os.fspath(ck)} holds the last state written (resume from it with "
            "resume= / --resume once the cluster has workers)"
            if ck and os.path.exists(ck)
            else ""
        )
        raise NoLiveWorkers(f"{e}{keep}") from None


def _train_files(
    client,
    paths,
    templates,
    format,
    pad,
    docstart,
    support,
    transitions,
    min_freq,
    regs,
    X_dev,
    Y_dev,
    dev_path,
    threads,
    verbose,
    log,
    meta,
    wait_s,
    kwargs,
):
    """:func:`train_files` once its arguments are checked."""
    from ..features.encode import encode
    from ..objective import regularization
    from ..training.driver import train_corpus

    space, sc = load_sharded(
        client,
        paths,
        templates=templates,
        format=format,
        pad=pad,
        docstart=docstart,
        support=support,
        transitions=transitions,
        min_freq=min_freq,
        threads=threads,
        log=log if verbose else None,
        wait_timeout=wait_s,
    )
    try:
        reg = regularization(sc.n_sequences, **regs)
        dev = dev_labels = None
        if dev_path is not None:
            from .shards import Source, read_shard

            X_dev, Y_dev, nd = read_shard(
                Source(os.fspath(dev_path), sc.format, sc.sources[0].templates, pad, docstart)
            )
            if nd is not None and nd != sc.n_columns:
                raise CrfkitError(
                    f"{dev_path}: the dev data has {nd} observation columns but the training data "
                    f"has {sc.n_columns}"
                )
        if X_dev is not None:
            # encoded where the names are (the client holds the space's layout, not its names)
            f = client.submit(encode, X_dev, sc.space_future, Y_dev, name="<dev data>", pure=False)
            dev = f.result()
            f.release()
            dev_labels = Y_dev
        md = dict(meta or {})
        md.update(
            {
                "support": support,
                "transitions": transitions or support,
                "min_freq": min_freq,
                "train_file": ",".join(s.path for s in sc.sources)
                if len(sc) <= 8
                else f"{sc.sources[0].path} and {len(sc) - 1} more files",
                "dask_workers": len(client.scheduler_info()["workers"]),
                "dask_shards": len(sc),
            }
        )
        if sc.format == "columns":
            md.update(
                {
                    "templates": sc.sources[0].templates,
                    "template_pad": bool(pad),
                    "columns": sc.n_columns,
                }
            )
        else:
            md["input_format"] = "crfsuite"
        res = train_corpus(
            space,
            sc,
            reg=reg,
            dev=dev,
            dev_labels=dev_labels,
            meta=md,
            threads=threads,
            verbose=verbose,
            log=log,
            **kwargs,
        )
        # the names, packed, now that the optimizer's vectors are gone: the model outlives the
        # cluster
        resolve_names(res.model.space)
        return res
    finally:
        sc.release()
