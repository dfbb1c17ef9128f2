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

* ``GET /metrics``: request counts by route and status, latency histograms, refusals by limit
  (Prometheus' text format).

Every door is bounded (:class:`ServeLimits`, ``crfkit serve``'s options, docs/guide/serving.md):
the body as sent and once inflated (``Content-Encoding: gzip``/``deflate``, inflated chunk by chunk,
never past the limit), the tokens per request and ``nbest``, the time for the headers and for the
body, the open connections, the requests tagging or queued (503 beyond); a refused request's
connection is closed, so that no byte of its body is read as a request.  JSON requests are read into
a typed schema (:mod:`crfkit.serving_schema`, pydantic): a malformed one gets a 400 naming the
field.

Tagging requests run in worker threads, the model under a lock (one request is tagged at a time,
with all the server's threads; ``sys.stderr`` is redirected for it), so that the transport keeps
reading other uploads and answering ``/health``.  Before it listens, the server tags a small
synthetic batch through Viterbi, n-best and the marginals so that the first request does not load
the compiled kernels.

Here: :class:`TagService` (the model, the requests' checks and work, :class:`Metrics`),
:class:`Inflater` (bounded request bodies), :func:`make_server` (the standard library's HTTP server
over it: the fallback without the ``crfkit[serve]`` extra, with the same limits), with typed
options in: a request's query becomes a :class:`~crfkit.tagging.TagOptions` (:func:`options_of`),
handed to :func:`crfkit.tagging.run_tag`; :class:`ServeOptions` are ``crfkit serve``'s.  The ASGI
app on uvicorn is :mod:`crfkit.serving_asgi`; the command (which picks the transport) is
:mod:`crfkit.cli.serve`, the client :func:`crfkit.cli.tag.client_tag`.
"""

from __future__ import annotations

import io
import json
import os
import socket
import sys
import threading
import time
import zlib
from contextlib import redirect_stderr
from dataclasses import dataclass, fields
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, quote, urlsplit

from .errors import CrfkitError
from .tagging import EXIT_ERROR, FORMATS, SCHEMES, TagOptions, parse_pair, print_error, run_tag


class BadRequest(Exception):
    """A request the server refuses, with its HTTP status and message."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


DEFAULT_PORT = 8400
MAX_REQUEST_BYTES = 16 << 20


@dataclass(frozen=True)
class ServeLimits:
    """What one request, one connection and the server as a whole may take (``crfkit serve``'s
    options of the same names; docs/guide/serving.md)."""

    #: the largest request body, as sent (413 beyond; checked on ``Content-Length`` and while the
    #: body streams in)
    max_request_bytes: int = MAX_REQUEST_BYTES
    #: the largest body once inflated (``Content-Encoding: gzip``/``deflate``, or a gzip stream as
    #: the body): inflated chunk by chunk, never past this (413)
    max_inflated_bytes: int = 32 << 20
    #: the most tokens (non-blank lines of a text body; tokens of a JSON request, an empty
    #: sentence counting as one) a request may have (413)
    max_tokens: int = 100_000
    #: the largest ``nbest`` (400); also, tokens x nbest is at most ``10 * max_tokens``
    max_nbest: int = 100
    #: seconds for a request's line and headers to arrive (the connection is closed after)
    header_timeout: float = 10.0
    #: seconds for a request's whole body to arrive (408)
    body_timeout: float = 60.0
    #: seconds an idle keep-alive connection is kept
    keep_alive: float = 5.0
    #: open connections at most (503 beyond)
    max_connections: int = 64
    #: threads that run the tagging (the model is used under one lock: more threads overlap the
    #: parsing and formatting of requests with the tagging, not the tagging itself)
    workers: int = 2
    #: requests waiting for a worker at most (503 beyond)
    queue: int = 16
    #: the largest request line + headers (431/400 beyond)
    max_header_bytes: int = 64 << 10

    def check_nbest(self, k: int | None, tokens: int, name: str = "nbest") -> None:
        """:class:`BadRequest` if an n-best list of ``k`` over ``tokens`` tokens is too much."""
        if not k:
            return
        if k > self.max_nbest:
            raise BadRequest(
                f"{name}: {k} is more than this server's limit, {self.max_nbest} "
                "(crfkit serve --max-nbest)"
            )
        if k * tokens > 10 * self.max_tokens:
            raise BadRequest(
                f"{name}: {k} lists over {tokens} tokens: more than this server takes "
                f"(tokens x nbest <= {10 * self.max_tokens:,}, 10 x crfkit serve --max-tokens); "
                "split the request",
                413,
            )

    def check_tokens(self, tokens: int) -> None:
        """:class:`BadRequest` (413) if a request has more than ``max_tokens`` tokens."""
        if tokens > self.max_tokens:
            raise BadRequest(
                f"the request has {tokens:,} tokens; this server takes at most "
                f"{self.max_tokens:,} per request (crfkit serve --max-tokens); split it",
                413,
            )


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


# --------------------------------------------------------------------------- bodies

GZIP_MAGIC = b"\x1f\x8b"


class Inflater:
    """A request body assembled chunk by chunk, inflated as it comes when it is compressed
    (``Content-Encoding: gzip`` / ``deflate``, or a body that starts with the gzip magic, which
    the column reader would otherwise inflate without a bound), never past ``limit`` bytes
    (:class:`BadRequest` 413)."""

    def __init__(self, encoding: str | None, limit: int):
        enc = (encoding or "identity").strip().lower()
        if enc == "x-gzip":
            enc = "gzip"
        if enc not in ("identity", "gzip", "deflate"):
            raise BadRequest(
                f"Content-Encoding {encoding}: not supported (gzip, deflate or none)", 415
            )
        self.mode = enc
        self.limit = limit
        self.out = bytearray()
        self._head = b""  # the first bytes, until the gzip magic can be told
        self._d = None
        self.compressed = 0

    def _too_big(self) -> BadRequest:
        return BadRequest(
            f"the request's body inflates to more than {self.limit:,} bytes "
            "(crfkit serve --max-inflated-mb)",
            413,
        )

    def _start(self, data: bytes):
        if self.mode == "identity" and data.startswith(GZIP_MAGIC):
            self.mode = "gzip"
        if self.mode == "gzip":
            self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif self.mode == "deflate":  # zlib-wrapped (RFC 9110), or raw as some clients send
            wrapped = (
                len(data) >= 2 and (data[0] & 0x0F) == 8 and (data[0] << 8 | data[1]) % 31 == 0
            )
            self._d = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)

    def feed(self, data: bytes) -> None:
        """Take the next chunk of the body."""
        if self._head is not None:
            data = self._head + data
            if len(data) < 2 and self.mode != "deflate":
                self._head = data
                return
            self._head = None
            self._start(data)
        if self._d is None:
            if len(self.out) + len(data) > self.limit:
                raise self._too_big()
            self.out += data
            return
        self.compressed += len(data)
        try:
            while data:
                room = self.limit - len(self.out)
                chunk = self._d.decompress(data, room + 1)
                if len(chunk) > room:
                    raise self._too_big()
                self.out += chunk
                data = b""
                if self._d.eof and self._d.unused_data:  # a next gzip member
                    data = self._d.unused_data
                    if self.mode != "gzip" or not data.startswith(GZIP_MAGIC):
                        raise BadRequest(f"the {self.mode} body has trailing bytes")
                    self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        except zlib.error as e:
            raise BadRequest(f"the {self.mode} body is damaged: {e}") from None

    def finish(self) -> bytes:
        """The whole (inflated) body."""
        if self._head is not None:  # fewer than 2 bytes came
            head, self._head = self._head, None
            if head:
                self._start(head)
                if self._d is None:
                    self.out += head
                else:
                    self.feed(head)
        if self._d is not None:
            try:
                rest = self._d.flush()
            except zlib.error as e:
                raise BadRequest(f"the {self.mode} body is damaged: {e}") from None
            if len(self.out) + len(rest) > self.limit:
                raise self._too_big()
            self.out += rest
            if not self._d.eof:
                raise BadRequest(f"the {self.mode} body is truncated")
            if self.out.startswith(GZIP_MAGIC):  # the reader would inflate it again, unbounded
                raise BadRequest("the body is compressed twice: compress it once")
        return bytes(self.out)


def count_tokens(body: bytes) -> int:
    """The tokens of a text request: its non-blank lines (a token per line in a column file, an
    item per line in a CRFsuite attribute file)."""
    return sum(1 for line in body.splitlines() if line.strip())


# --------------------------------------------------------------------------- metrics


class Metrics:
    """Request counts and latencies, thread-safe; :meth:`render` writes them in the Prometheus
    text format (``GET /metrics``)."""

    BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

    def __init__(self):
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, int], int] = {}
        self.latency: dict[str, list] = {}  # route -> [bucket counts..., +Inf, sum]
        self.rejected: dict[str, int] = {}

    def observe(self, route: str, status: int, seconds: float) -> None:
        """Count a request answered on ``route`` with ``status`` after ``seconds``."""
        with self._lock:
            key = (route, status)
            self.requests[key] = self.requests.get(key, 0) + 1
            h = self.latency.get(route)
            if h is None:
                h = self.latency[route] = [0] * (len(self.BUCKETS) + 1) + [0.0]
            for i, b in enumerate(self.BUCKETS):
                if seconds <= b:
                    h[i] += 1
            h[len(self.BUCKETS)] += 1
            h[-1] += seconds

    def reject(self, reason: str) -> None:
        """Count a request refused by a limit (``body``, ``inflated``, ``tokens``, ``busy``...)."""
        with self._lock:
            self.rejected[reason] = self.rejected.get(reason, 0) + 1

    def total(self) -> int:
        """Requests answered so far."""
        with self._lock:
            return sum(self.requests.values())

    def render(self, gauges: dict[str, float] | None = None) -> str:
        """The Prometheus text format of the counts, the latency histograms and ``gauges``."""
        with self._lock:
            out = [
                "# HELP crfkit_requests_total Requests answered, by route and status.",
                "# TYPE crfkit_requests_total counter",
            ]
            for (route, status), n in sorted(self.requests.items()):
                out.append(f'crfkit_requests_total{{route="{route}",status="{status}"}} {n}')
            out += [
                "# HELP crfkit_request_seconds Time from a request's headers to its answer.",
                "# TYPE crfkit_request_seconds histogram",
            ]
            for route, h in sorted(self.latency.items()):
                for b, n in zip(self.BUCKETS, h):
                    out.append(f'crfkit_request_seconds_bucket{{route="{route}",le="{b}"}} {n}')
                n = h[len(self.BUCKETS)]
                out.append(f'crfkit_request_seconds_bucket{{route="{route}",le="+Inf"}} {n}')
                out.append(f'crfkit_request_seconds_sum{{route="{route}"}} {h[-1]:.6f}')
                out.append(f'crfkit_request_seconds_count{{route="{route}"}} {n}')
            out += [
                "# HELP crfkit_rejected_total Requests refused by a limit, by limit.",
                "# TYPE crfkit_rejected_total counter",
            ]
            for reason, n in sorted(self.rejected.items()):
                out.append(f'crfkit_rejected_total{{limit="{reason}"}} {n}')
        for name, v in (gauges or {}).items():
            out += [f"# TYPE crfkit_{name} gauge", f"crfkit_{name} {v}"]
        return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- the service


def _reason(e: BadRequest) -> str | None:
    msg = str(e)
    if e.status == 413:
        return (
            "inflated"
            if "inflates" in msg
            else "tokens"
            if "tokens" in msg or "nbest" in msg
            else "body"
        )
    if e.status == 408:
        return "body_timeout"
    if e.status == 503:
        return "busy"
    if msg.startswith("nbest") and "limit" in msg:
        return "nbest"
    return None


class TagService:
    """The model and what the requests share: ``tag_text`` tags a request's body as ``crfkit tag``
    does (:func:`crfkit.tagging.run_tag`), ``tag_json`` answers a JSON request; both check the
    request against :attr:`limits` first.  The transports (:func:`make_server`, the standard
    library's; :mod:`crfkit.serving_asgi`, uvicorn's) read the bodies and call these from worker
    threads."""

    def __init__(
        self,
        model_path: str,
        threads: int | None = None,
        log=None,
        limits: ServeLimits | None = None,
    ):
        from .parallel import set_threads

        self.log = log if log is not None else sys.stderr
        self.model_path = model_path
        self.threads = threads
        self.limits = limits if limits is not None else ServeLimits()
        self.metrics = Metrics()
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
    def text_options(self, body: bytes, params: list[tuple[str, str]]) -> TagOptions:
        """The :class:`~crfkit.tagging.TagOptions` of a text request, checked against the
        limits (:class:`BadRequest` otherwise)."""
        args = options_of(params)
        tokens = count_tokens(body)
        self.limits.check_tokens(tokens)
        self.limits.check_nbest(args.nbest, tokens)
        return args

    def tag_text(self, body: bytes, params: list[tuple[str, str]]) -> tuple[int, str, str]:
        """(exit status, what ``crfkit tag`` writes on standard output, on standard error) for the
        input ``body`` (already inflated) and the options ``params``."""
        args = self.text_options(body, params)
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
    def json_request(self, body: bytes):
        """The typed request (:class:`crfkit.serving_schema.TagRequest`) of a JSON body, checked
        against the limits; :class:`BadRequest` naming the field otherwise."""
        try:
            from .serving_schema import RequestError, parse_request
        except ImportError:  # the stdlib fallback without the crfkit[serve] extra
            raise BadRequest(
                "JSON requests need pydantic (pip install 'crfkit[serve]'); text requests "
                "(a column file as the body) work without it",
                415,
            ) from None
        try:
            req = parse_request(body)
        except RequestError as e:
            raise BadRequest(str(e)) from None
        tokens = sum(max(len(s), 1) for s in req.sentences)
        self.limits.check_tokens(tokens)
        self.limits.check_nbest(req.nbest, tokens)
        return req

    def tag_json(self, req) -> dict:
        """The answer to a JSON request (see the module docstring): ``req`` the request's bytes, a
        dict, or a :meth:`json_request`."""
        from .decode import make_constraints

        if isinstance(req, (bytes, bytearray)):
            req = self.json_request(bytes(req))
        elif isinstance(req, dict) or not hasattr(req, "sentences"):
            req = self.json_request(json.dumps(req).encode())
        sents = req.sentences
        k = req.nbest or 0
        method = req.decode
        try:
            pairs = [parse_pair(p) for p in req.forbid or ()]
        except CrfkitError as e:
            raise BadRequest(f"forbid: {e}") from None
        allowed = req.allowed
        want_p = req.probability or req.marginals
        with self.lock:
            self.requests += 1
            try:
                cons = make_constraints(self.model.labels, req.constraints, pairs)
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
                    if req.probability:
                        out["probability"] = [float(p) for p in probs]
                    if req.marginals:
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
        """What ``GET /health`` answers: the model's labels and feature counts, the requests."""
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

    def answer(self, body: bytes, params, as_json: bool) -> tuple[int, bytes, str, list]:
        """(HTTP status, body, content type, headers) of a ``POST /tag`` whose body was read (and
        inflated): the work of a worker thread, the same for both transports."""
        try:
            if as_json:
                ans = self.tag_json(self.json_request(body))
                return 200, json.dumps(ans).encode(), "application/json", []
            status, out, err = self.tag_text(body, params)
        except BadRequest as e:
            return self.refusal(e, as_json)
        except Exception as e:  # a bug: say so rather than drop the connection
            self.log.write(f"crfkit serve: internal error on a request: {e!r}\n")
            self.log.flush()
            return self.refusal(BadRequest(f"internal error: {e!r}", 500), as_json)
        headers = [("X-Crfkit-Status", str(status))]
        if err:
            headers.append(("X-Crfkit-Stderr", quote(err)))
        if status != 0:
            return 400, err.encode("utf-8"), TEXT, headers
        return 200, out.encode("utf-8"), TEXT, headers

    def refusal(self, e: BadRequest, as_json: bool) -> tuple[int, bytes, str, list]:
        """The answer to a refused request (counted by limit in the metrics)."""
        reason = _reason(e)
        if reason:
            self.metrics.reject(reason)
        if as_json:
            return e.status, json.dumps({"error": str(e)}).encode(), "application/json", []
        return e.status, (str(e).rstrip("\n") + "\n").encode("utf-8"), TEXT, []


TEXT = "text/plain; charset=utf-8"
PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"
NOT_FOUND = "no such resource (POST /tag, GET /health, GET /metrics)"


def is_json(content_type: str | None) -> bool:
    """Whether a request's ``Content-Type`` is JSON's."""
    return (content_type or "").split(";")[0].strip().lower() == "application/json"


# --------------------------------------------------------------------------- the stdlib fallback


class _DeadlineReader(io.RawIOBase):
    """A socket's reads, each with the time left to the handler's deadline as its timeout: a
    client that sends a byte now and then (slowloris) still runs out of time."""

    def __init__(self, sock, handler):
        self.sock = sock
        self.handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        left = self.handler.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        self.sock.settimeout(left)
        return self.sock.recv_into(b)


def make_server(
    service: TagService,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    max_bytes: int | None = None,
    quiet: bool = True,
    limits: ServeLimits | None = None,
):
    """The standard library's HTTP server over ``service`` (not yet serving): the fallback of
    ``crfkit serve`` without the ``crfkit[serve]`` extra, with the same limits as the ASGI
    server (``limits``, by default the service's; ``max_bytes`` overrides its
    ``max_request_bytes``): a thread per connection, at most ``max_connections`` of them (beyond,
    the oldest connection waiting for a request head is closed to make room, else a 503),
    deadlines on the headers and the body, ``workers + queue`` requests tagging or waiting (503
    beyond), and the connection closed after any refused request."""
    from dataclasses import replace
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    limits = limits if limits is not None else service.limits
    if max_bytes is not None:
        limits = replace(limits, max_request_bytes=max_bytes)
    log = service.log
    metrics = service.metrics
    slots = threading.BoundedSemaphore(limits.workers + limits.queue)
    workers = threading.BoundedSemaphore(limits.workers)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "crfkit-serve"
        deadline = 0.0

        def setup(self):
            super().setup()
            self.opened = time.monotonic()
            self.rfile = io.BufferedReader(_DeadlineReader(self.connection, self), 1 << 16)

        def handle_one_request(self):
            self.deadline = time.monotonic() + limits.header_timeout
            self.started = None
            self.server.waiting[self.connection] = self.opened  # for a request head
            try:
                super().handle_one_request()
            finally:
                self.server.waiting.pop(self.connection, None)

        def parse_request(self):
            ok = super().parse_request()  # reads the headers
            self.server.waiting.pop(self.connection, None)
            self.started = time.perf_counter()
            return ok

        def log_message(self, format, *a):  # noqa: A002 (the base class's name)
            if not quiet:
                log.write(f"crfkit serve: {self.address_string()} {format % a}\n")
                log.flush()

        def _send(self, status: int, body: bytes, ctype: str, headers=(), close=False) -> None:
            if close:
                self.close_connection = True
            # the reads left the socket's timeout at what remained of their deadline
            self.connection.settimeout(max(limits.body_timeout, 1.0))
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            if self.close_connection:
                self.send_header("Connection", "close")
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)
            if self.started is not None:
                route = urlsplit(self.path).path
                route = route if route in ("/tag", "/health", "/metrics") else "other"
                metrics.observe(route, status, time.perf_counter() - self.started)

        def _refuse(self, e: BadRequest, as_json: bool) -> None:
            # the body (if any) is not read: the connection is closed so that no byte of it is
            # read as the next request
            self._send(*service.refusal(e, as_json), close=True)

        def do_GET(self):  # noqa: N802 (the base class's name)
            path = urlsplit(self.path).path
            if path in ("/health", "/"):
                self._send(200, json.dumps(service.health()).encode(), "application/json")
            elif path == "/metrics":
                self._send(200, metrics.render(self.server.gauges()).encode(), PROMETHEUS)
            else:
                self._refuse(BadRequest(f"{path}: {NOT_FOUND}", 404), False)

        def _read_body(self) -> bytes:
            if "Transfer-Encoding" in self.headers:
                raise BadRequest(
                    "Transfer-Encoding is not supported here: send a Content-Length", 501
                )
            n = self.headers.get("Content-Length")
            if n is None:
                raise BadRequest("the request needs a Content-Length", 411)
            if len(self.headers.get_all("Content-Length")) > 1 or not (n.isascii() and n.isdigit()):
                raise BadRequest(f"Content-Length {n!r} is not a number of bytes")
            n = int(n)
            if n > limits.max_request_bytes:
                raise BadRequest(
                    f"the request has {n:,} bytes; this server takes at most "
                    f"{limits.max_request_bytes:,} (crfkit serve --max-request-mb)",
                    413,
                )
            inflater = Inflater(self.headers.get("Content-Encoding"), limits.max_inflated_bytes)
            self.deadline = time.monotonic() + limits.body_timeout
            left = n
            try:
                while left:
                    chunk = self.rfile.read1(min(left, 1 << 16))
                    if not chunk:
                        raise BadRequest("the body ended before its Content-Length")
                    left -= len(chunk)
                    inflater.feed(chunk)
            except TimeoutError:
                raise BadRequest(
                    f"the body did not arrive within {limits.body_timeout:g} s "
                    "(crfkit serve --body-timeout)",
                    408,
                ) from None
            return inflater.finish()

        def do_POST(self):  # noqa: N802
            parts = urlsplit(self.path)
            as_json = is_json(self.headers.get("Content-Type"))
            if parts.path != "/tag":
                self._refuse(BadRequest(f"{parts.path}: {NOT_FOUND}", 404), as_json)
                return
            if slots._value == 0:  # full already: refused before the body is read
                self._refuse(BadRequest(BUSY, 503), as_json)
                return
            try:
                body = self._read_body()
            except BadRequest as e:
                self._refuse(e, as_json)
                return
            if not slots.acquire(blocking=False):
                self._refuse(BadRequest(BUSY, 503), as_json)
                return
            try:
                with workers:
                    ans = service.answer(
                        body, parse_qsl(parts.query, keep_blank_values=True), as_json
                    )
            finally:
                slots.release()
            self._send(*ans)

        # the other methods: 501 and the connection closed (the base class keeps it open)
        def send_error(self, code, message=None, explain=None):
            self.close_connection = True
            super().send_error(code, message, explain)

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        allow_reuse_address = True
        request_queue_size = 128

        def __init__(self, *a, **kw):
            self.active = 0
            self._count = threading.Lock()
            self.waiting = {}  # connection socket -> when it opened, while it waits for a head
            super().__init__(*a, **kw)

        def _evict(self) -> bool:
            # full: the oldest connection waiting for a request head (stalled or idle) is closed
            # to make room, so that stalled uploads cannot starve the others (/health included)
            pending = list(self.waiting.items())
            if not pending:
                return False
            victim = min(pending, key=lambda kv: kv[1])[0]
            self.waiting.pop(victim, None)
            try:
                victim.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return True

        def gauges(self) -> dict:
            return {
                "connections": self.active,
                "tagging_pending": limits.workers + limits.queue - slots._value,
                "tagging_capacity": limits.workers + limits.queue,
            }

        def process_request(self, request, client_address):
            with self._count:
                full = self.active >= limits.max_connections and not self._evict()
                if not full:
                    self.active += 1  # the evicted one's thread ends on its own
            if full:  # answered here, without a thread, and closed
                metrics.reject("connections")
                msg = f"{BUSY_CONNECTIONS}\n".encode()
                try:
                    request.setblocking(False)
                    request.send(
                        b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n"
                        b"Content-Type: text/plain; charset=utf-8\r\n"
                        + f"Content-Length: {len(msg)}\r\n\r\n".encode()
                        + msg
                    )
                except OSError:
                    pass
                self.shutdown_request(request)
                return
            super().process_request(request, client_address)

        def process_request_thread(self, request, client_address):
            try:
                super().process_request_thread(request, client_address)
            finally:
                with self._count:
                    self.active -= 1

    return Server((host, port), Handler)


BUSY = (
    "the server is busy: every tagging worker and queue slot is taken (crfkit serve --queue); retry"
)
BUSY_CONNECTIONS = "the server is busy: too many open connections (crfkit serve --max-connections)"


def write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.{os.getpid()}.part"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def asgi_available() -> bool:
    """Whether the ``crfkit[serve]`` extra (starlette, uvicorn, pydantic) is installed."""
    import importlib.util

    return all(importlib.util.find_spec(m) for m in ("starlette", "uvicorn", "pydantic"))


@dataclass
class ServeOptions:
    """The options of :func:`serve` (``crfkit serve``'s)."""

    model: str
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    url_file: str | None = None
    threads: int | None = None
    max_request_mb: float = MAX_REQUEST_BYTES / (1 << 20)
    max_inflated_mb: float = ServeLimits.max_inflated_bytes / (1 << 20)
    max_tokens: int = ServeLimits.max_tokens
    max_nbest: int = ServeLimits.max_nbest
    header_timeout: float = ServeLimits.header_timeout
    body_timeout: float = ServeLimits.body_timeout
    keep_alive: float = ServeLimits.keep_alive
    max_connections: int = ServeLimits.max_connections
    workers: int = ServeLimits.workers
    queue: int = ServeLimits.queue
    stdlib_server: bool = False
    no_warm: bool = False
    verbose: bool = False

    @classmethod
    def of(cls, ns) -> ServeOptions:
        """The options an ``argparse`` namespace (``crfkit serve``'s) holds."""
        return cls(**{f.name: getattr(ns, f.name) for f in fields(cls) if hasattr(ns, f.name)})

    def limits(self) -> ServeLimits:
        """The :class:`ServeLimits` these options set."""
        return ServeLimits(
            max_request_bytes=int(self.max_request_mb * (1 << 20)),
            max_inflated_bytes=int(self.max_inflated_mb * (1 << 20)),
            max_tokens=self.max_tokens,
            max_nbest=self.max_nbest,
            header_timeout=self.header_timeout,
            body_timeout=self.body_timeout,
            keep_alive=self.keep_alive,
            max_connections=self.max_connections,
            workers=self.workers,
            queue=self.queue,
        )
