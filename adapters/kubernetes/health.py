"""`/healthz` and `/readyz` for the kubelet's probes of the controller's own pod.

Alive while the process serves HTTP; ready while it leads and its workers run (a
standby replica is alive but not ready, so it takes no traffic and shows why).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["HealthServer"]


class HealthServer:
    # The kubelet probes the pod's own address, so the default binds every interface.
    def __init__(
        self,
        ready: Callable[[], bool],
        *,
        host: str = "0.0.0.0",  # noqa: S104
        port: int = 8081,
    ) -> None:
        is_ready = ready

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/healthz":
                    code = 200
                elif self.path == "/readyz":
                    code = 200 if is_ready() else 503
                else:
                    code = 404
                body = {200: b"ok\n", 503: b"not leading\n", 404: b"not found\n"}[code]
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return  # probes every few seconds would flood the log

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="health", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
