"""``crfkit serve`` on uvicorn: the ASGI (Starlette) app over a :class:`~crfkit.serving.TagService`
(the ``crfkit[serve]`` extra).

The service's work and checks are :mod:`crfkit.serving`'s; here is the transport, with every door
bounded (:class:`~crfkit.serving.ServeLimits`):

* the request line and headers: at most ``max_header_bytes`` (h11's incomplete-event limit) and
  ``header_timeout`` seconds to arrive (:class:`_H11`: a connection still waiting for a whole
  request head when its time is up is closed); an idle keep-alive connection: ``keep_alive`` s;
* the body: read as it streams, at most ``max_request_bytes`` as sent and ``max_inflated_bytes``
  once inflated (gzip/deflate inflated chunk by chunk), within ``body_timeout`` seconds (408);
  a ``Content-Length`` over the limit is refused before a byte of the body is read;
* connections: at most ``max_connections``; a new one past it closes the oldest connection that
  waits for a request head (stalled or idle), so that stalled uploads cannot starve the others;
  when every connection has a request in flight, the new request gets a 503 (uvicorn's
  ``limit_concurrency``);
* tagging: ``workers`` threads (a :class:`~concurrent.futures.ThreadPoolExecutor`: the event loop
  never tags, and keeps answering ``/health`` and ``/metrics`` and reading other uploads while a
  request is tagged), at most ``workers + queue`` requests tagging or waiting (503 beyond);
* a refused request's answer closes the connection (``Connection: close``); h11 frames the
  requests, so no byte of a body is ever read as a request.

:func:`make_app` builds the app, :func:`listen` the socket, :func:`run` serves until a signal;
:func:`start` runs a server in a thread (tests, benchmarks).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import parse_qsl

import h11
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol

from .serving import (
    BUSY,
    NOT_FOUND,
    PROMETHEUS,
    BadRequest,
    Inflater,
    ServeLimits,
    TagService,
    is_json,
)

__all__ = ["listen", "make_app", "run", "start"]


def make_app(service: TagService, limits: ServeLimits | None = None) -> Starlette:
    """The Starlette app answering ``service``'s requests within ``limits`` (by default the
    service's)."""
    limits = limits if limits is not None else service.limits
    metrics = service.metrics
    pool = ThreadPoolExecutor(limits.workers, thread_name_prefix="crfkit-tag")
    state = {"pending": 0}  # requests tagging or queued (touched on the event loop only)
    capacity = limits.workers + limits.queue

    def respond(route, started, status, body, ctype, headers=(), close=False) -> Response:
        h = dict(headers)
        if close:
            h["Connection"] = "close"
        metrics.observe(route, status, time.perf_counter() - started)
        return Response(body, status_code=status, media_type=ctype, headers=h)

    def refuse(route, started, e: BadRequest, as_json: bool) -> Response:
        # the body may be unread: close the connection after the answer
        return respond(route, started, *service.refusal(e, as_json), close=True)

    async def read_body(request: Request) -> bytes:
        n = request.headers.get("content-length")
        if n is not None and int(n) > limits.max_request_bytes:  # h11 checked it is a number
            raise BadRequest(
                f"the request has {int(n):,} bytes; this server takes at most "
                f"{limits.max_request_bytes:,} (crfkit serve --max-request-mb)",
                413,
            )
        inflater = Inflater(request.headers.get("content-encoding"), limits.max_inflated_bytes)
        got = 0
        try:
            async with asyncio.timeout(limits.body_timeout):
                async for chunk in request.stream():
                    got += len(chunk)
                    if got > limits.max_request_bytes:  # chunked, or more than announced
                        raise BadRequest(
                            f"the request's body is over {limits.max_request_bytes:,} bytes "
                            "(crfkit serve --max-request-mb)",
                            413,
                        )
                    inflater.feed(chunk)
        except TimeoutError:
            raise BadRequest(
                f"the body did not arrive within {limits.body_timeout:g} s "
                "(crfkit serve --body-timeout)",
                408,
            ) from None
        except ClientDisconnect:
            raise BadRequest("the client went away before the end of the body") from None
        return inflater.finish()

    async def tag(request: Request) -> Response:
        started = time.perf_counter()
        as_json = is_json(request.headers.get("content-type"))
        if state["pending"] >= capacity:
            return refuse("/tag", started, BadRequest(BUSY, 503), as_json)
        try:
            body = await read_body(request)
        except BadRequest as e:
            return refuse("/tag", started, e, as_json)
        if state["pending"] >= capacity:
            return refuse("/tag", started, BadRequest(BUSY, 503), as_json)
        params = parse_qsl(request.scope["query_string"].decode("latin-1"), keep_blank_values=True)
        state["pending"] += 1
        try:
            loop = asyncio.get_running_loop()
            ans = await loop.run_in_executor(pool, service.answer, body, params, as_json)
        finally:
            state["pending"] -= 1
        return respond("/tag", started, *ans)

    async def health(request: Request) -> Response:
        started = time.perf_counter()
        metrics.observe("/health", 200, time.perf_counter() - started)
        return JSONResponse(service.health())

    async def metrics_page(request: Request) -> Response:
        gauges = {"tagging_pending": state["pending"], "tagging_capacity": capacity}
        started = time.perf_counter()
        text = metrics.render(gauges)
        metrics.observe("/metrics", 200, time.perf_counter() - started)
        return Response(text, media_type=PROMETHEUS)

    async def not_found(request: Request) -> Response:
        as_json = is_json(request.headers.get("content-type"))
        e = BadRequest(f"{request.url.path}: {NOT_FOUND}", 404)
        return refuse("other", time.perf_counter(), e, as_json)

    routes = [
        Route("/tag", tag, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/", health, methods=["GET"]),
        Route("/metrics", metrics_page, methods=["GET"]),
    ]

    async def on_error(request, exc) -> Response:
        return await not_found(request)

    async def wrong_method(request, exc) -> Response:
        e = BadRequest(f"{request.method} {request.url.path}: {NOT_FOUND}", 405)
        return refuse("other", time.perf_counter(), e, False)

    app = Starlette(routes=routes, exception_handlers={404: on_error, 405: wrong_method})
    app.state.pool = pool
    return app


class _H11(H11Protocol):
    """uvicorn's h11 protocol, with a deadline on each request's line and headers: a connection
    that has not sent a whole request head ``header_timeout`` seconds after it opened (or after
    the first byte of the next request) is closed. uvicorn bounds only the idle time between
    requests (``timeout_keep_alive``)."""

    header_timeout = 10.0
    max_connections = 64
    _head_timer = None
    _opened = 0.0

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._opened = time.monotonic()
        self._arm()
        if len(self.connections) > self.max_connections:
            self._evict()

    def _waiting(self) -> bool:
        """Whether this connection waits for a request head (new, stalled or idle)."""
        return (
            self.conn.their_state is h11.IDLE
            and (self.cycle is None or self.cycle.response_complete)
            and not self.transport.is_closing()
        )

    def _evict(self) -> None:
        # the server is full: the oldest connection that holds a slot without a request in
        # flight (stalled headers, slowloris; or idle) makes room, so that stalled uploads cannot
        # starve the others (/health included); when every connection has a request, uvicorn
        # answers the new one 503 (limit_concurrency)
        others = [c for c in self.connections if c is not self and isinstance(c, _H11)]
        waiting = [c for c in others if c._waiting()]
        if waiting:
            oldest = min(waiting, key=lambda c: c._opened)
            oldest._disarm()
            oldest.transport.close()
            oldest.connections.discard(oldest)

    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self._arm()  # part of a request head: its time runs
        else:
            self._disarm()

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            if self.cycle is None or self.cycle.response_complete:
                self.transport.close()


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def _server(service: TagService, verbose: bool = False):
    import uvicorn

    limits = service.limits
    proto = type(
        "H11",
        (_H11,),
        {"header_timeout": limits.header_timeout, "max_connections": limits.max_connections},
    )
    config = uvicorn.Config(
        make_app(service, limits),
        http=proto,
        ws="none",
        lifespan="off",
        # uvicorn counts the connection of the request it checks: + 1 for max_connections others
        limit_concurrency=limits.max_connections + 1,
        timeout_keep_alive=limits.keep_alive,
        h11_max_incomplete_event_size=limits.max_header_bytes,
        timeout_graceful_shutdown=5,
        log_level="info" if verbose else "warning",
        access_log=verbose,
        server_header=False,
    )
    return uvicorn.Server(config)


def run(service: TagService, sock: socket.socket, verbose: bool = False) -> None:
    """Serve ``service`` on the listening ``sock`` until SIGINT/SIGTERM (uvicorn stops gracefully,
    then the signal is raised again for the caller: ``KeyboardInterrupt`` or the CLI's
    ``Terminated``)."""
    server = _server(service, verbose)
    try:
        server.run(sockets=[sock])
    finally:
        server.config.app.state.pool.shutdown(wait=False, cancel_futures=True)


def start(service: TagService, host: str = "127.0.0.1", port: int = 0):
    """A uvicorn server for ``service`` running in a daemon thread: ``(url, stop)``, ``stop()``
    ends it.  For tests and benchmarks."""
    sock = listen(host, port)
    host, port = sock.getsockname()[:2]
    url = f"http://{host}:{port}"
    server = _server(service)
    th = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    th.start()
    for _ in range(500):
        if server.started or not th.is_alive():
            break
        time.sleep(0.01)

    def stop() -> None:
        server.should_exit = True
        th.join(10)
        server.config.app.state.pool.shutdown(wait=False, cancel_futures=True)
        sock.close()

    return url, stop
