"""A TCP relay on 127.0.0.1 between a client and the API server, to break the network.

Two ways to break it, both leaving the server alone:

- `black_hole()`: a partition. Open connections go silent (what either side sends is
  swallowed) and new ones are refused.
- `silence()`: a middlebox that lost its state for the connections open now (a NAT or
  load balancer restarted): they stay open but nothing more comes through, and one on
  which the client sends again (a new request on a pooled connection) is reset, as such
  a box answers. New connections pass (unless `refuse_new`). A watch stream — the client
  sends nothing after its request — hangs silent until something on the client's side
  gives up on it; every other request fails fast and is sent again on a new connection.

`heal()` lets new connections through again; the silenced ones stay dead.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlparse

__all__ = ["Relay"]


class _Link:
    def __init__(self, near: socket.socket, far: socket.socket) -> None:
        self.near, self.far = near, far
        self.silent = False
        self.reset_on_send = False

    def close(self) -> None:
        for sock in (self.near, self.far):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class Relay:
    """Forwards 127.0.0.1:<port> to `target` (an https URL) until told to break."""

    def __init__(self, target: str) -> None:
        url = urlparse(target)
        self._target = (url.hostname or "127.0.0.1", url.port or 443)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self._server.getsockname()[1]}"
        self._refusing = False
        self._links: list[_Link] = []
        self._lock = threading.Lock()
        self.accepted = 0  # connections forwarded
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                near, _ = self._server.accept()
            except OSError:
                return
            if self._refusing:
                near.close()
                continue
            try:
                far = socket.create_connection(self._target, timeout=5)
                far.settimeout(None)
            except OSError:
                near.close()  # the server is down: so is the relay's far side
                continue
            link = _Link(near, far)
            with self._lock:
                self._links.append(link)
                self.accepted += 1
            for src, dst, upstream in ((near, far, True), (far, near, False)):
                threading.Thread(
                    target=self._pump, args=(link, src, dst, upstream), daemon=True
                ).start()

    @staticmethod
    def _pump(link: _Link, src: socket.socket, dst: socket.socket, upstream: bool) -> None:
        try:
            while data := src.recv(65536):
                if upstream and link.reset_on_send:
                    break  # the middlebox forgot this flow: answer with a reset
                if not link.silent:
                    dst.sendall(data)
        except OSError:
            pass
        link.close()

    def black_hole(self) -> None:
        """Open connections go silent; new ones are refused."""
        self._refusing = True
        with self._lock:
            for link in self._links:
                link.silent = True

    def silence(self, *, refuse_new: bool = False) -> None:
        """Open connections go silent, and are reset if the client sends on them."""
        self._refusing = refuse_new
        with self._lock:
            for link in self._links:
                link.silent = link.reset_on_send = True

    def heal(self) -> None:
        """New connections work again (the silent ones stay silent)."""
        self._refusing = False

    def close(self) -> None:
        self._server.close()
        with self._lock:
            for link in self._links:
                link.close()
