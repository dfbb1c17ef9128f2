"""The HTTP tagging service behind ``crfkit serve``: a long-lived tagging process with a small API.

A ``crfkit tag`` process pays, on every run, for what a tagger needs only once: importing numpy and
numba, loading the model (decompressing its arrays, building its attribute index) and loading the
compiled kernels.  On a CoNLL-2000 chunker with every label pair a feature that is most of a run
(``benchmarks/nbest_vs_crfpp.py`` measures it).  ``crfkit serve -m MODEL`` does it once, then
answers requests; taggers in shell loops and behind web requests then pay only for the tagging.

Requests (the server listens on 127.0.0.1 by default; it has no authentication, so do not bind it to
an address others can reach):

* ``POST /tag``, the body a column file (or a CRFsuite attribute file), the options of
  ``crfkit tag`` as query parameters named as its long options: ``nbest=5``, ``constraints=bio``,
  ``forbid=O,I-NP`` (repeatable), ``marginals=1``, ``format=crfsuite``,
  ``labels=1`` / ``no-labels=1``, ``eval=1``...  The answer's body is exactly what ``crfkit tag``
  writes for that input and those options; what it would print on standard error (the ``--eval``
  report, warnings) comes percent-encoded in the ``X-Crfkit-Stderr`` header, its exit status in
  ``X-Crfkit-Status``.  A request ``crfkit tag`` would refuse gets status 400 and the error message
  as the body.  For example ``curl --data-binary @test.txt 'http://127.0.0.1:8400/tag?nbest=5'``.
* ``POST /tag`` with ``Content-Type: application/json``, for programs:
  ``{"sentences": [...], "nbest": K, "constraints": "bio", "forbid": [["O", "I-NP"]],
  "allowed": [...], "decode": "posterior", "marginals": true, "probability": true}``.  A sentence
  is a list of tokens; a token is the list of its column values (or one whitespace-separated
  string) for a model trained from a column file, its attributes (a list of strings, or a dict of
  name -> value) otherwise.  ``allowed`` gives per sentence per token ``null`` (any label), a label
  (forced) or a list of labels.  The answer: ``{"labels": [[...], ...]}``, plus ``"probability"``
  (each best sequence's probability) and ``"marginals"`` (each predicted label's marginal) when
  asked; with ``nbest``: ``{"nbest": [[{"labels": [...], "probability": p}, ...], ...]}``.
* ``GET /health``: the model's labels and feature counts, as JSON.

``crfkit tag --server URL [options] [FILE]`` is the client: it sends the file and the options, and
writes the answer where ``crfkit tag`` would (``-o`` through a temporary file renamed at the end),
prints the standard-error part and exits with the same status; it imports neither numpy nor numba.

Tagging requests are served one at a time (under a lock; a request uses all the server's threads),
each connection in its own thread, so that a slow client's upload does not hold up the others.
Before it listens, the server tags a small synthetic batch through Viterbi, n-best and the
marginals so that the first request does not load the compiled kernels.

Here: :class:`TagService` (the model and the requests' work), :func:`make_server` (the HTTP server
over it) and :func:`serve` (load, warm, listen until stopped), with typed options in: a request's
query becomes a :class:`~crfkit.tagging.TagOptions` (:func:`options_of`), handed to
:func:`crfkit.tagging.run_tag`; :class:`ServeOptions` are ``crfkit serve``'s.  No argparse: the
command line's shell is :mod:`crfkit.cli.serve`, the client :func:`crfkit.cli.tag.client_tag`.
"""

from __future__ import annotations

import io
import json
import os
import sys
import threading
import time
from contextlib import redirect_stderr
from dataclasses import dataclass, fields
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, quote, urlsplit

from .errors import CrfkitError
from .tagging import EXIT_ERROR, FORMATS, SCHEMES, TagOptions, parse_pair, print_error, run_tag

DEFAULT_PORT = 8400
MAX_REQUEST_BYTES = 256 << 20


class BadRequest(Exception):
    """A request the server refuses, with its HTTP status and message."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


#: the values of a flag in a query: given (``eval=1``, ``eval=``), or not (``eval=0``)
FLAG_TRUE = ("", "1", "true", "yes", "on")
FLAG_FALSE = ("0", "false", "no", "off")


class QueryOption(NamedTuple):
    """How a query parameter of ``POST /tag`` sets a :class:`~crfkit.tagging.TagOptions` field."""

    field: str
    flag: str  # the option as ``crfkit tag``'s messages name it
    # flag (sets value), count (an integer >= 1), choice (one of value), text, list (repeatable)
    read: str
    value: Any = True


#: the query parameters of ``POST /tag``: ``crfkit tag``'s long options (without the dashes) that a
#: request may give (the model, the threads, the input and the output are the server's); the client,
#: :func:`crfkit.cli.tag.query_of`, sends the options given on its command line under these names
QUERY_OPTIONS = {
    "format": QueryOption("format", "-f/--format", "choice", FORMATS),
    "reference": QueryOption("reference", "-r/--reference", "flag"),
    "marginals": QueryOption("marginals", "--marginals", "flag"),
    "all-marginals": QueryOption("all_marginals", "--all-marginals", "flag"),
    "probability": QueryOption("probability", "--probability", "flag"),
    "labels": QueryOption("labels", "--labels", "flag", True),
    "no-labels": QueryOption("labels", "--no-labels", "flag", False),
    "eval": QueryOption("eval", "--eval", "flag"),
    "raw": QueryOption("raw", "--raw", "flag"),
    "batch-tokens": QueryOption("batch_tokens", "--batch-tokens", "count"),
    "encoding": QueryOption("encoding", "--encoding", "text"),
    "nbest": QueryOption("nbest", "-n/--nbest", "count"),
    "constraints": QueryOption("constraints", "--constraints", "choice", ("none",) + SCHEMES),
    "forbid": QueryOption("forbid", "--forbid", "list"),
    "allowed-column": QueryOption("allowed_column", "--allowed-column", "count"),
    "force": QueryOption("force", "--force", "flag"),
    "decode": QueryOption("decode", "--decode", "choice", ("viterbi", "posterior")),
}


def _refused(q: QueryOption, problem: str) -> BadRequest:
    return BadRequest(f"crfkit tag: error: argument {q.flag}: {problem}")


def options_of(params: list[tuple[str, str]]) -> TagOptions:
    """The :class:`~crfkit.tagging.TagOptions` of a request's query parameters
    (:data:`QUERY_OPTIONS`; a repeated one: the last, ``forbid``: each); :class:`BadRequest` with
    ``crfkit tag``'s message for a value it would refuse."""
    opts = TagOptions()
    labels_by = None  # --labels and --no-labels exclude each other
    for name, value in params:
        key = name.replace("_", "-")
        q = QUERY_OPTIONS.get(key)
        if q is None:
            if key.lstrip("-") in ("m", "model", "o", "output", "threads", "server", "file"):
                raise BadRequest(
                    f"{name}: not an option of a request (the model and the threads are the "
                    "server's; the input is the request's body, the output its answer)"
                )
            raise BadRequest(
                f"{name}: not an option of crfkit tag (options: {', '.join(sorted(QUERY_OPTIONS))})"
            )
        if q.read == "flag":
            v = value.strip().lower()
            if v in FLAG_TRUE:
                if q.field == "labels":
                    if labels_by not in (None, key):
                        raise _refused(
                            q, f"not allowed with argument {QUERY_OPTIONS[labels_by].flag}"
                        )
                    labels_by = key
                setattr(opts, q.field, q.value)
            elif v not in FLAG_FALSE:
                raise BadRequest(f"{name}={value}: a flag takes 1 or 0")
        elif q.read == "count":
            try:
                n = int(value)
            except ValueError:
                raise _refused(q, f"not an integer: {value!r}") from None
            if n <= 0:
                raise _refused(q, f"must be >= 1, got {value!r}")
            setattr(opts, q.field, n)
        elif q.read == "choice":
            if value not in q.value:
                raise _refused(
                    q, f"invalid choice: {value!r} (choose from {', '.join(map(repr, q.value))})"
                )
            setattr(opts, q.field, value)
        elif q.read == "list":
            setattr(opts, q.field, (getattr(opts, q.field) or []) + [value])
        else:
            setattr(opts, q.field, value)
    return opts


# --------------------------------------------------------------------------- server


class TagService:
    """The model and what the requests share: ``tag_text`` tags a request's body as ``crfkit tag``
    does (:func:`crfkit.tagging.run_tag`), ``tag_json`` answers a JSON request."""

    def __init__(self, model_path: str, threads: int | None = None, log=None):
        from .parallel import set_threads

        self.log = log if log is not None else sys.stderr
        self.model_path = model_path
        self.threads = threads
        set_threads(threads)
        t = time.perf_counter()
        from .interop import load_any  # crfkit's model, or a peer's recognised by its first bytes

        self.model = load_any(model_path)
        self.load_seconds = time.perf_counter() - t
        meta = self.model.meta if isinstance(self.model.meta, dict) else {}
        self.has_templates = bool(meta.get("templates"))
        self.lock = threading.Lock()
        self.requests = 0

    # ------------------------------------------------------------------ warm-up
    def warm(self) -> float:
        """Tag a synthetic batch (more tokens than the numpy small-input path takes) through
        Viterbi, the marginals and n-best, so that the compiled kernels are loaded before the first
        request. Returns the seconds it took."""
        from .npdecode import max_tokens

        t = time.perf_counter()
        n_tok = max(max_tokens(), 0) + 64
        length = 32
        n_seq = n_tok // length + 1
        if self.has_templates:
            ncols = int(self.model.meta.get("columns") or 1)
            dense = set(self.model.meta.get("dense_columns") or ())  # 1-based; numbers there
            rows = [
                [
                    ["0" if c + 1 in dense else f"w{(s + i) % 7}" for c in range(ncols)]
                    for i in range(length)
                ]
                for s in range(n_seq)
            ]
            from .pipeline import inputs_of_rows

            X, B, dense = inputs_of_rows(self.model, rows)
        else:
            X = [[[f"a{(s + i) % 7}"] for i in range(length)] for s in range(n_seq)]
            B = dense = None
            if getattr(self.model.space, "n_dense", 0):
                return time.perf_counter() - t  # dense-feature models: the first request loads them
        kw = dict(threads=self.threads, dense=dense, B=B)
        self.model.tag(X, **kw)
        self.model.tag_with_probability(X, **kw)
        self.model.nbest(X, 2, **kw)
        return time.perf_counter() - t

    # ------------------------------------------------------------------ text requests
    def tag_text(self, body: bytes, params: list[tuple[str, str]]) -> tuple[int, str, str]:
        """(exit status, what ``crfkit tag`` writes on standard output, on standard error) for the
        input ``body`` and the options ``params``."""
        args = options_of(params)
        err = io.StringIO()
        out = io.StringIO()
        # sys.stderr is the process's: it is redirected under the lock only, one request at a time
        with self.lock, redirect_stderr(err):
            src = io.BytesIO(body)
            src.name = "<request>"
            args.file = src
            args.model = self.model_path
            args.threads = self.threads
            args.output = out
            self.requests += 1
            try:
                status = run_tag(args, self.model)
            except CrfkitError as e:
                print_error(str(e))
                status = EXIT_ERROR
        return status, out.getvalue(), err.getvalue()

    # ------------------------------------------------------------------ JSON requests
    def tag_json(self, req) -> dict:
        """The answer to a JSON request (see the module docstring)."""
        from .decode import make_constraints

        if not isinstance(req, dict):
            raise BadRequest('a JSON request is an object: {"sentences": [...], ...}')
        known = {
            "sentences",
            "nbest",
            "constraints",
            "forbid",
            "allowed",
            "decode",
            "marginals",
            "probability",
        }
        extra = sorted(set(req) - known)
        if extra:
            raise BadRequest(
                f"unknown field(s) {', '.join(extra)} (fields: {', '.join(sorted(known))})"
            )
        sents = req.get("sentences")
        if not isinstance(sents, list):
            raise BadRequest('"sentences": a list of sentences, each a list of tokens')
        k = req.get("nbest") or 0
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise BadRequest(f'"nbest": a positive integer, not {k!r}')
        method = req.get("decode", "viterbi")
        if method not in ("viterbi", "posterior"):
            raise BadRequest(f'"decode": viterbi or posterior, not {method!r}')
        if k and method != "viterbi":
            raise BadRequest(
                '"nbest" lists the most probable sequences; it does not combine with '
                '"decode": "posterior"'
            )
        forbid = req.get("forbid") or []
        try:
            pairs = [
                parse_pair(",".join(p)) if isinstance(p, list) else parse_pair(str(p))
                for p in forbid
            ]
        except (CrfkitError, TypeError) as e:
            raise BadRequest(f'"forbid": {e}') from None
        allowed = req.get("allowed")
        if allowed is not None:
            if not isinstance(allowed, list) or len(allowed) != len(sents):
                raise BadRequest('"allowed": one list per sentence')
            allowed = [[set(c) if isinstance(c, list) else c for c in seq] for seq in allowed]
        want_p = bool(req.get("probability")) or bool(req.get("marginals"))
        with self.lock:
            self.requests += 1
            try:
                cons = make_constraints(self.model.labels, req.get("constraints"), pairs)
                X, B, dense = self._inputs(sents)
                kw = dict(threads=self.threads, dense=dense, B=B, allowed=allowed, constraints=cons)
                if not X:
                    return {"nbest": []} if k else {"labels": []}
                if k:
                    lists = self.model.nbest(X, k, **kw)
                    return {
                        "nbest": [
                            [{"labels": list(ys), "probability": float(p)} for ys, p in nb]
                            for nb in lists
                        ]
                    }
                if want_p:
                    from .pipeline import split_marginals

                    pred, probs, marg, corpus = self.model.tag_with_probability(
                        X, method=method, **kw
                    )
                    out = {"labels": pred}
                    if req.get("probability"):
                        out["probability"] = [float(p) for p in probs]
                    if req.get("marginals"):
                        m, _ = split_marginals(self.model, pred, marg, corpus)
                        out["marginals"] = [[float(x) for x in row] for row in m]
                    return out
                return {"labels": self.model.tag(X, method=method, **kw)}
            except CrfkitError as e:
                raise BadRequest(str(e)) from None

    def _inputs(self, sents):
        if self.has_templates:
            from .pipeline import inputs_of_rows

            return inputs_of_rows(self.model, sents, name="<request>")
        from .features.dicts import to_attributes

        return to_attributes(sents, name="sentences"), None, None

    def health(self) -> dict:
        sp = self.model.space
        return {
            "status": "ok",
            "model": self.model_path,
            "labels": list(self.model.labels),
            "features": int(sp.n_features),
            "active_features": int(self.model.n_active),
            "templates": self.has_templates,
            "requests": self.requests,
        }


def make_server(
    service: TagService,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    max_bytes: int = MAX_REQUEST_BYTES,
    quiet: bool = True,
):
    """A ``ThreadingHTTPServer`` answering ``service``'s requests (not yet serving)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    log = service.log

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "crfkit-serve"

        def log_message(self, format, *a):  # noqa: A002 (the base class's name)
            if not quiet:
                log.write(f"crfkit serve: {self.address_string()} {format % a}\n")
                log.flush()

        def _send(self, status: int, body: bytes, ctype: str, headers=()) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def _error(self, status: int, message: str, as_json: bool) -> None:
            if as_json:
                self._send(status, json.dumps({"error": message}).encode(), "application/json")
            else:
                self._send(
                    status,
                    (message.rstrip("\n") + "\n").encode("utf-8"),
                    "text/plain; charset=utf-8",
                )

        def do_GET(self):  # noqa: N802 (the base class's name)
            path = urlsplit(self.path).path
            if path in ("/health", "/"):
                self._send(200, json.dumps(service.health()).encode(), "application/json")
            else:
                self._error(404, f"{path}: no such resource (POST /tag, GET /health)", False)

        def do_POST(self):  # noqa: N802
            parts = urlsplit(self.path)
            as_json = (self.headers.get("Content-Type") or "").split(";")[
                0
            ].strip() == "application/json"
            if parts.path != "/tag":
                self._error(
                    404, f"{parts.path}: no such resource (POST /tag, GET /health)", as_json
                )
                return
            n = self.headers.get("Content-Length")
            if n is None:
                self._error(411, "the request needs a Content-Length", as_json)
                return
            try:
                n = int(n)
            except ValueError:
                self._error(400, f"Content-Length {n!r} is not a number", as_json)
                return
            if n > max_bytes:
                self.close_connection = True
                self._error(
                    413,
                    f"the request has {n} bytes; this server takes at most {max_bytes} "
                    "(crfkit serve --max-request-mb)",
                    as_json,
                )
                return
            body = self.rfile.read(n)
            try:
                if as_json:
                    try:
                        req = json.loads(body.decode("utf-8"))
                    except (UnicodeDecodeError, json.JSONDecodeError) as e:
                        raise BadRequest(f"the body is not JSON: {e}") from None
                    ans = service.tag_json(req)
                    self._send(200, json.dumps(ans).encode(), "application/json")
                    return
                status, out, err = service.tag_text(
                    body, parse_qsl(parts.query, keep_blank_values=True)
                )
            except BadRequest as e:
                self._error(e.status, str(e), as_json)
                return
            except Exception as e:  # a bug: say so rather than drop the connection
                log.write(f"crfkit serve: internal error on a request: {e!r}\n")
                log.flush()
                self._error(500, f"internal error: {e!r}", as_json)
                return
            headers = [("X-Crfkit-Status", str(status))]
            if err:
                headers.append(("X-Crfkit-Stderr", quote(err)))
            if status != 0:
                self._send(400, err.encode("utf-8"), "text/plain; charset=utf-8", headers)
            else:
                self._send(200, out.encode("utf-8"), "text/plain; charset=utf-8", headers)

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    return Server((host, port), Handler)


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.{os.getpid()}.part"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


@dataclass
class ServeOptions:
    """The options of :func:`serve` (``crfkit serve``'s)."""

    model: str
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    url_file: str | None = None
    threads: int | None = None
    max_request_mb: float = MAX_REQUEST_BYTES >> 20
    no_warm: bool = False
    verbose: bool = False

    @classmethod
    def of(cls, ns) -> ServeOptions:
        """The options an ``argparse`` namespace (``crfkit serve``'s) holds."""
        return cls(**{f.name: getattr(ns, f.name) for f in fields(cls) if hasattr(ns, f.name)})


def serve(args: ServeOptions, stop: tuple = (KeyboardInterrupt,)) -> int:
    """Load the model, warm the kernels (unless ``no_warm``), listen, and answer requests until one
    of the exceptions ``stop`` (Ctrl-C; ``crfkit serve`` adds its SIGTERM exception) is raised; exit
    status 0."""
    log = sys.stderr
    service = TagService(args.model, threads=args.threads, log=log)
    sp = service.model.space
    msg = (
        f"crfkit serve: {args.model}: {len(service.model.labels)} labels, {sp.n_features:,} features, "
        f"loaded in {service.load_seconds:.2f} s"
    )
    if not args.no_warm:
        msg += f"; kernels warmed in {service.warm():.2f} s"
    server = make_server(
        service, args.host, args.port, int(args.max_request_mb * (1 << 20)), quiet=not args.verbose
    )
    host, port = server.server_address[:2]
    url = f"http://{host}:{port}"
    log.write(f"{msg}\ncrfkit serve: listening on {url} (POST /tag, GET /health; Ctrl-C stops)\n")
    log.flush()
    if args.url_file:
        _write_atomic(args.url_file, url + "\n")
    try:
        server.serve_forever(poll_interval=0.2)
    except stop:  # Ctrl-C or SIGTERM: the normal ways to stop a server
        log.write(f"crfkit serve: stopped after {service.requests} request(s)\n")
        return 0
    finally:
        server.server_close()
        if args.url_file:
            try:
                os.unlink(args.url_file)
            except OSError:
                pass
    return 0
