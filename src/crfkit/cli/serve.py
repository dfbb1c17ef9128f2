"""``crfkit serve``: the argparse shell over :func:`crfkit.serving.serve` (the HTTP tagging
service)."""

from __future__ import annotations

from ..serving import DEFAULT_PORT, MAX_REQUEST_BYTES, ServeOptions, serve
from .common import Terminated


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
    s.add_argument(
        "--max-request-mb",
        type=float,
        default=MAX_REQUEST_BYTES >> 20,
        metavar="MB",
        help=f"largest request body accepted (default {MAX_REQUEST_BYTES >> 20})",
    )
    s.add_argument(
        "--no-warm", action="store_true", help="do not load the compiled kernels before listening"
    )
    s.add_argument(
        "-v", "--verbose", action="store_true", help="log every request on standard error"
    )
    s.set_defaults(func=cmd_serve)
