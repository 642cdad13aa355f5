"""A real HTTP proxy in front of the real service that injects faults on chosen requests: an
answer of its own (503 or 429 with Retry-After) or a connection cut halfway through the request
body. Everything else is forwarded unchanged."""

from __future__ import annotations

import http.client
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import List, Optional
from urllib.parse import urlsplit


@dataclass
class Fault:
    """What to do to the next request matching ``method`` and containing ``path_part``."""

    method: str
    path_part: str
    kind: str  # "status" or "cut"
    status: int = 503
    retry_after: Optional[str] = None
    times: int = 1
    min_body: int = -1  # only requests whose body is larger than this match


@dataclass
class Seen:
    method: str
    path: str
    at: float
    body_bytes: int
    fault: str = ""


@dataclass
class FaultProxy:
    upstream: str
    faults: List[Fault] = field(default_factory=list)
    seen: List[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: Optional[ThreadingHTTPServer] = None

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def take(self, method: str, path: str, body_bytes: int = 0) -> Optional[Fault]:
        with self.lock:
            for f in self.faults:
                if f.times > 0 and f.method == method and f.path_part in path and body_bytes > f.min_body:
                    f.times -= 1
                    return f
        return None

    def record(self, s: Seen) -> None:
        with self.lock:
            self.seen.append(s)

    def requests(self, method: str, path_part: str) -> List[Seen]:
        with self.lock:
            return [s for s in self.seen if s.method == method and path_part in s.path]

    def start(self) -> "FaultProxy":
        proxy = self
        up = urlsplit(self.upstream)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                f = proxy.take(self.command, self.path, n)
                if f is not None and f.kind == "cut":
                    got = len(self.rfile.read(n // 2))
                    proxy.record(Seen(self.command, self.path, time.monotonic(), got, "cut"))
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                body = self.rfile.read(n) if n else b""
                if f is not None:
                    proxy.record(Seen(self.command, self.path, time.monotonic(), len(body), f"status {f.status}"))
                    msg = b'{"type":"about:blank","title":"injected","status":%d}' % f.status
                    self.send_response(f.status)
                    self.send_header("Content-Type", "application/problem+json")
                    if f.retry_after is not None:
                        self.send_header("Retry-After", f.retry_after)
                    self.send_header("Content-Length", str(len(msg)))
                    self.end_headers()
                    self.wfile.write(msg)
                    return
                proxy.record(Seen(self.command, self.path, time.monotonic(), len(body)))
                conn = http.client.HTTPConnection(up.hostname or "127.0.0.1", up.port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection", "transfer-encoding")}
                headers["Content-Length"] = str(len(body))
                conn.request(self.command, self.path, body=body, headers=headers)
                r = conn.getresponse()
                data = r.read()
                self.send_response(r.status)
                for k, v in r.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def gaps(seen: List[Seen]) -> List[float]:
    return [b.at - a.at for a, b in zip(seen, seen[1:])]

