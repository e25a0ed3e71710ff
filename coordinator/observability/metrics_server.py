"""The node's /metrics endpoint and its HTTP probes (/livez, /readyz), on servers with bounds.

prometheus-client's own `start_http_server` answered 200 with the metrics on any
path, started a thread for every connection and read each request without a time
limit (200 half-sent requests held 200 threads), and with TLS it did the handshake
in its accepting thread, so one silent connection stopped every scrape. Here the
exposition (`make_wsgi_app`) and the WSGI plumbing are still prometheus-client's and
wsgiref's; the server around them:

- answers GET /metrics, and GET /livez and /readyz when given the node's health
  report (404 on other paths, 405 for other methods);
- serves at most `max_connections` connections at once, each on its own thread,
  and closes any beyond at once (a scraper retries at its next interval);
- gives each connection `request_timeout_s` from accept to the end of its answer,
  TLS handshake included, done on the connection's thread: then the socket is shut;
- with TLS (`tls`), serves HTTPS with the node's certificate, and requires a client
  certificate of the node's CA when the node requires one on gRPC; `tls` may be a
  function giving the context to use for each connection (transport.tls'
  ContextReloader: the files followed as the gRPC port follows them).

`start_probe_server` serves the probe paths alone, over plain HTTP: the kubelet shows
no client certificate, so it cannot probe a metrics port that requires one, and the
probe answers (a status and a one-line reason) are not worth a TLS handshake each.
"""
from __future__ import annotations

import socket
import ssl
import threading
from socketserver import ThreadingMixIn
from typing import Any, Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import REGISTRY, make_wsgi_app

from coordinator.observability.health_report import LIVE_PATH, READY_PATH, HealthReport

METRICS_PATH = "/metrics"
MAX_CONNECTIONS = 8
REQUEST_TIMEOUT_S = 5.0


def tls_context(certfile: str, keyfile: str, client_cafile: str | None = None,
                client_auth_required: bool = False) -> ssl.SSLContext:
    """The server's TLS settings: its certificate (read now), TLS 1.2 or later, and a
    client certificate of `client_cafile` when required."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    if client_cafile:
        context.load_verify_locations(cafile=client_cafile)
    context.verify_mode = ssl.CERT_REQUIRED if client_auth_required else ssl.CERT_NONE
    return context


WSGIApp = Callable[..., Iterable[bytes]]
TLS = ssl.SSLContext | Callable[[], ssl.SSLContext]  # a context, or what gives the current one


def _text(start_response: Callable[..., Any], status: str, line: str, *headers: tuple[str, str]) -> list[bytes]:
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"), *headers])
    return [f"{line}\n".encode()]


def routed(metrics: WSGIApp | None, report: HealthReport | None) -> WSGIApp:
    """GET /metrics to `metrics`, GET /livez and /readyz answered from `report` (each
    when given); 404 on every other path, 405 for methods other than GET."""
    paths = ([METRICS_PATH] if metrics is not None else []) + ([LIVE_PATH, READY_PATH] if report is not None else [])

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO")
        if path not in paths:
            return _text(start_response, "404 Not Found", f"not found: this port serves {', '.join(paths)}")
        if environ.get("REQUEST_METHOD") != "GET":
            return _text(start_response, "405 Method Not Allowed", "only GET", ("Allow", "GET"))
        if path == METRICS_PATH:
            return metrics(environ, start_response)  # type: ignore[misc]
        verdict = report.verdict(path)  # type: ignore[union-attr]
        code, phrase = verdict.status
        return _text(start_response, f"{code} {phrase}", verdict.reason if not verdict.ok else "ok",
                     ("Cache-Control", "no-store"))
    return app


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the stdlib's name)
        """A log line per scrape would be noise."""


class MetricsServer(ThreadingMixIn, WSGIServer):
    """An HTTP(S) server for one WSGI app with the bounds of the module docstring."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily, tls: TLS | None = None,
                 max_connections: int = MAX_CONNECTIONS, request_timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.address_family = family
        super().__init__(address, _QuietHandler)
        self.tls, self.request_timeout_s = tls, request_timeout_s
        self._slots = threading.BoundedSemaphore(max_connections)
        self.refused = 0  # connections closed at once for want of a slot
        self.cut = 0  # connections shut at their deadline

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)  # starts the connection's thread
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: socket.socket, client_address: Any) -> None:
        conn: list[socket.socket] = [request]  # what the deadline shuts: the TLS socket once there is one
        deadline = threading.Timer(self.request_timeout_s, self._cut, (conn,))
        deadline.daemon = True
        deadline.start()
        try:
            if self.tls is not None:
                context = self.tls if isinstance(self.tls, ssl.SSLContext) else self.tls()
                conn[0] = context.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
                conn[0].do_handshake()
            self.finish_request(conn[0], client_address)
        except (OSError, ValueError):
            pass  # a client gone, cut, or failing the handshake: nothing to answer
        finally:
            deadline.cancel()
            self.shutdown_request(conn[0])
            self._slots.release()

    def _cut(self, conn: list[socket.socket]) -> None:
        self.cut += 1
        try:
            socket.socket.shutdown(conn[0], socket.SHUT_RDWR)  # wakes the thread blocked reading it
        except OSError:
            pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client's broken request is its own business: no traceback on stderr."""


def start_metrics_server(address: str, tls: TLS | None = None, registry: Any = REGISTRY,
                         max_connections: int = MAX_CONNECTIONS, request_timeout_s: float = REQUEST_TIMEOUT_S,
                         report: HealthReport | None = None) -> MetricsServer:
    """Serve /metrics on "host:port" (port 0: any free port, see server.server_address)
    on a daemon thread; HTTPS with `tls`; the probe paths too with `report`.

    A separate port from gRPC so scraping works even when the gRPC server is
    overloaded or refusing requests; bound to the given host only, never 0.0.0.0 by
    default. Returns the server so callers (tests) can read the port and shut it down."""
    return _start(address, tls, routed(make_wsgi_app(registry), report), max_connections, request_timeout_s,
                  "raftpoint-metrics")


def start_probe_server(address: str, report: HealthReport, max_connections: int = MAX_CONNECTIONS,
                       request_timeout_s: float = REQUEST_TIMEOUT_S) -> MetricsServer:
    """Serve GET /livez and /readyz alone, plain HTTP, on "host:port" on a daemon thread."""
    return _start(address, None, routed(None, report), max_connections, request_timeout_s, "raftpoint-probes")


def _start(address: str, tls: TLS | None, app: WSGIApp, max_connections: int, request_timeout_s: float,
           thread_name: str) -> MetricsServer:
    host, _, port = address.rpartition(":")
    family, _, _, _, sockaddr = socket.getaddrinfo(host.strip("[]") or "127.0.0.1", int(port),
                                                   type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    server = MetricsServer(sockaddr[:2], family, tls, max_connections, request_timeout_s)
    server.set_app(app)
    threading.Thread(target=server.serve_forever, name=thread_name, daemon=True).start()
    return server
