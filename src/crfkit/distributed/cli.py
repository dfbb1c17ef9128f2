"""``crfkit train --dask ADDRESS|local:N FILE...``: the CLI's shell over :func:`crfkit.distributed.train_files`."""
from __future__ import annotations

import os

from ..errors import CrfkitError


def check_args(args, files) -> None:
    """Refuse the options the Dask path does not take, before anything is read."""
    if files == ["-"] or "-" in files:
        raise CrfkitError("--dask: the workers read the training files: standard input (-) cannot be a shard")
    for opt, name in (("encoding", "--encoding"), ("dense_columns", "--dense-columns"),
                      ("partial_labels", "--partial-labels"), ("fine_tune", "--fine-tune"),
                      ("init_model", "--init-model")):
        if getattr(args, opt, None):
            raise CrfkitError(f"{name} is not supported with --dask yet")


def train_dask(args, files, fmt, templates, kwargs, log):
    """Start or reach the cluster, print the dashboard link, train, close what was started."""
    from . import connect, dashboard, train_files
    spec = args.dask
    local = spec.startswith("local:")
    client = connect(spec)
    try:
        nworkers = len(client.scheduler_info()["workers"])
        threads = args.dask_threads or args.threads
        if threads is None:
            from ..parallel import cpu_count
            threads = max(1, cpu_count() // max(nworkers, 1)) if local else 1
        link = dashboard(client)
        if not args.quiet:
            log(f"dask: {'LocalCluster' if local else spec} with {nworkers} workers, {threads} numba threads per task"
                + (f"; dashboard: {link}" if link else " (no dashboard: install bokeh for one)"))
        kw = dict(kwargs)
        kw["threads"] = threads
        return train_files(client, files, templates=templates, format=fmt, pad=not args.no_pad,
                           dev_path=os.fspath(args.dev) if args.dev is not None else None, **kw)
    finally:
        cluster = getattr(client, "cluster", None)
        client.close()
        if local and cluster is not None:
            cluster.close()
