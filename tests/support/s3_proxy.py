"""A loopback HTTP proxy in front of the test S3 server that injects faults.

SeaweedFS never throttles and never damages a body on its own, so the tests put this
between client and server: it answers the next N requests with 503 SlowDown (what S3
sends when throttling) or flips a byte in the next PUT body before forwarding. The
Host header is forwarded unchanged so SigV4 signatures still verify.
"""
from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
             b'<Message>Please reduce your request rate.</Message></Error>')


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        target = urlparse(upstream)
        self._upstream = (target.hostname or "127.0.0.1", target.port or 80)
        self._lock = threading.Lock()
        self.throttle_next = 0
        self.corrupt_next_put = False
        self.throttled = 0
        self.requests = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with proxy._lock:
                    proxy.requests += 1
                    throttle = proxy.throttle_next > 0
                    if throttle:
                        proxy.throttle_next -= 1
                        proxy.throttled += 1
                    corrupt = self.command == "PUT" and body and proxy.corrupt_next_put
                    if corrupt:
                        proxy.corrupt_next_put = False
                if throttle:
                    self._answer(503, SLOW_DOWN)
                    return
                if corrupt:
                    body = bytes([body[0] ^ 0xFF]) + body[1:]
                conn = http.client.HTTPConnection(*proxy._upstream, timeout=30)
                try:
                    conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                    for name, value in self.headers.items():
                        conn.putheader(name, value)
                    conn.endheaders(body if body else None)
                    resp = conn.getresponse()
                    data = resp.read()
                    self.send_response(resp.status, resp.reason)
                    for name, value in resp.getheaders():
                        if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                            self.send_header(name, value)
                    # HEAD has no body: its Content-Length is the object's size, passed on.
                    length_header = resp.getheader("Content-Length", "0") if self.command == "HEAD" else len(data)
                    self.send_header("Content-Length", str(length_header))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    conn.close()

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = _relay

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-fault-proxy", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
