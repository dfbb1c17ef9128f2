"""``crfkit serve``: the argparse shell and :func:`serve`, which runs the HTTP tagging
service (:mod:`crfkit.serving`) on uvicorn (:mod:`crfkit.serving_asgi`, the ``crfkit[serve]`` extra)
or on the standard library's server."""

from __future__ import annotations

import os
import sys

from ..serving import (
    DEFAULT_PORT,
    ServeLimits,
    ServeOptions,
    TagService,
    asgi_available,
    make_server,
    write_atomic,
)
from .common import Terminated, nonneg_int, pos_float, pos_int


def serve(args: ServeOptions, stop: tuple = (KeyboardInterrupt,)) -> int:
    """Load the model, warm the kernels (unless ``no_warm``), listen, and answer requests until one
    of the exceptions ``stop`` (Ctrl-C; ``crfkit serve`` adds its SIGTERM exception) is raised; exit
    status 0.  The server is uvicorn's (:mod:`crfkit.serving_asgi`) when the ``crfkit[serve]``
    extra is installed, else (or with ``stdlib_server``) the standard library's."""
    log = sys.stderr
    limits = args.limits()
    service = TagService(args.model, threads=args.threads, log=log, limits=limits)
    sp = service.model.space
    msg = (
        f"crfkit serve: {args.model}: {len(service.model.labels)} labels, {sp.n_features:,} features, "
        f"loaded in {service.load_seconds:.2f} s"
    )
    if not args.no_warm:
        msg += f"; kernels warmed in {service.warm():.2f} s"
    asgi = not args.stdlib_server and asgi_available()
    if asgi:
        from ..serving_asgi import listen, run

        sock = listen(args.host, args.port)
        host, port = sock.getsockname()[:2]
        kind = "uvicorn"
    else:
        server = make_server(service, args.host, args.port, quiet=not args.verbose)
        host, port = server.server_address[:2]
        kind = "the standard library's server" + (
            "" if args.stdlib_server else " (pip install 'crfkit[serve]' for uvicorn)"
        )
    url = f"http://{host}:{port}"
    log.write(
        f"{msg}\ncrfkit serve: listening on {url} with {kind} (POST /tag, GET /health, "
        "GET /metrics; Ctrl-C stops)\n"
    )
    log.flush()
    if args.url_file:
        write_atomic(args.url_file, url + "\n")
    try:
        if asgi:
            run(service, sock, verbose=args.verbose)
        else:
            server.serve_forever(poll_interval=0.2)
    except stop:  # Ctrl-C or SIGTERM: the normal ways to stop a server
        pass
    finally:
        if not asgi:
            server.server_close()
        if args.url_file:
            try:
                os.unlink(args.url_file)
            except OSError:
                pass
    log.write(f"crfkit serve: stopped after {service.requests} request(s)\n")
    log.flush()
    return 0


def cmd_serve(args) -> int:
    """``crfkit serve``: load, warm, listen until Ctrl-C or SIGTERM."""
    return serve(ServeOptions.of(args), stop=(KeyboardInterrupt, Terminated))


def add_parser(sub) -> None:
    """Add ``serve`` to the ``crfkit`` subparsers ``sub``."""
    s = sub.add_parser(
        "serve",
        help="serve a model over HTTP (a long-lived tagger)",
        description="Load a model once and tag over HTTP: POST /tag with a column file as the "
        "body and crfkit tag's options as query parameters (the answer is what "
        "crfkit tag writes), or with a JSON body; GET /health. "
        "`crfkit tag --server URL` is the client.",
    )
    s.add_argument("-m", "--model", required=True, help="model file written by `crfkit train`")
    s.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; there is no authentication)",
    )
    s.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port (default {DEFAULT_PORT}; 0: any free one)",
    )
    s.add_argument(
        "--url-file",
        metavar="PATH",
        help="write the server's URL to PATH once it listens (removed when it stops)",
    )
    s.add_argument(
        "--threads", type=int, metavar="N", help="threads per request (default: all cores)"
    )
    lim = s.add_argument_group(
        "limits", "what a request, a connection and the server may take (docs/guide/serving.md)"
    )
    d = ServeLimits()
    lim.add_argument(
        "--max-request-mb",
        type=pos_float,
        default=d.max_request_bytes / (1 << 20),
        metavar="MB",
        help="largest request body as sent (default %(default)g; 413 beyond)",
    )
    lim.add_argument(
        "--max-inflated-mb",
        type=pos_float,
        default=d.max_inflated_bytes / (1 << 20),
        metavar="MB",
        help="largest body once a gzip/deflate body is inflated (default %(default)g; 413)",
    )
    lim.add_argument(
        "--max-tokens",
        type=pos_int,
        default=d.max_tokens,
        metavar="N",
        help="most tokens per request (default %(default)s; 413); tokens x nbest is at most 10 N",
    )
    lim.add_argument(
        "--max-nbest",
        type=pos_int,
        default=d.max_nbest,
        metavar="K",
        help="largest nbest a request may ask (default %(default)s; 400 beyond)",
    )
    lim.add_argument(
        "--header-timeout",
        type=pos_float,
        default=d.header_timeout,
        metavar="S",
        help="seconds for a request's headers to arrive (default %(default)g; then closed)",
    )
    lim.add_argument(
        "--body-timeout",
        type=pos_float,
        default=d.body_timeout,
        metavar="S",
        help="seconds for a request's body to arrive (default %(default)g; 408)",
    )
    lim.add_argument(
        "--keep-alive",
        type=pos_float,
        default=d.keep_alive,
        metavar="S",
        help="seconds an idle connection is kept open (default %(default)g)",
    )
    lim.add_argument(
        "--max-connections",
        type=pos_int,
        default=d.max_connections,
        metavar="N",
        help="open connections at most (default %(default)s; 503 beyond)",
    )
    lim.add_argument(
        "--workers",
        type=pos_int,
        default=d.workers,
        metavar="N",
        help="threads that check, tag and format requests (the tagging itself runs one at a "
        "time, on --threads cores; default %(default)s)",
    )
    lim.add_argument(
        "--queue",
        type=nonneg_int,
        default=d.queue,
        metavar="N",
        help="requests waiting for a worker at most (default %(default)s; 503 beyond)",
    )
    s.add_argument(
        "--stdlib-server",
        action="store_true",
        help="serve with the standard library's HTTP server (the same limits) even when "
        "crfkit[serve] (uvicorn) is installed",
    )
    s.add_argument(
        "--no-warm", action="store_true", help="do not load the compiled kernels before listening"
    )
    s.add_argument(
        "-v", "--verbose", action="store_true", help="log every request on standard error"
    )
    s.set_defaults(func=cmd_serve)
