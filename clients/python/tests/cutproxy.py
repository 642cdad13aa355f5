"""A TCP proxy in front of the real service that cuts connections: after ``cut_after(n)`` the
connection carrying the n-th byte sent towards the service (counted from that call, over all
connections) is closed both ways right there, in the middle of whatever request it was carrying.
With ``down`` set every new connection is closed at once (the service unreachable).
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from typing import List, Optional, Tuple


@dataclass
class CutProxy:
    upstream: Tuple[str, int]
    down: bool = False
    forwarded: int = 0  # bytes sent towards the service, all connections
    cuts: int = 0
    _budget: Optional[int] = None
    _then_down: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _listener: Optional[socket.socket] = None
    _conns: List[socket.socket] = field(default_factory=list)

    @property
    def url(self) -> str:
        assert self._listener is not None
        host, port = self._listener.getsockname()[:2]
        return f"http://{host}:{port}"

    def cut_after(self, n: int, then_down: bool = False) -> None:
        """Cuts the connection that carries the n-th byte towards the service from now on; with
        then_down the proxy is ``down`` from that moment."""
        with self._lock:
            self._budget, self._then_down = n, then_down

    def start(self) -> "CutProxy":
        self._listener = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            for c in self._conns:
                _close(c)

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.down:
                _close(client)
                continue
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._conns += [client, server]
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _take(self, n: int) -> Tuple[int, bool]:
        """How many of n bytes towards the service may pass, and whether to cut after them."""
        with self._lock:
            if self._budget is None:
                self.forwarded += n
                return n, False
            k = min(n, self._budget)
            self._budget -= k
            self.forwarded += k
            if self._budget > 0:
                return k, False
            self._budget = None
            self.cuts += 1
            self.down = self.down or self._then_down
            return k, True

    def _pump(self, src: socket.socket, dst: socket.socket, upstream: bool) -> None:
        try:
            while True:
                b = src.recv(1 << 16)
                if not b:
                    break
                cut = False
                if upstream:
                    k, cut = self._take(len(b))
                    b = b[:k]
                dst.sendall(b)
                if cut:
                    break
        except OSError:
            pass
        _close(src)
        _close(dst)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()
