"""`/healthz` and `/readyz` for the kubelet's probes of the controller's own pod.

Alive while the process can work: `/healthz` fails once the controller gave up (its
caches did not sync, its log was unreachable at take-over, a newer leader appeared), so
the kubelet restarts a process that would otherwise sit there. Ready while it can serve:
it leads or stands by for the Lease — readiness is not leadership. A standby that
reported not-ready would hold up every rolling update (the new pod waits for the Lease
the old one holds) and count as a disruption against the PodDisruptionBudget. `/readyz`
says which role the process has (`leading` or `standby`), for people; the probe reads
only the code.
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
        alive: Callable[[], bool] = lambda: True,
        leading: Callable[[], bool] = lambda: False,
        host: str = "0.0.0.0",  # noqa: S104
        port: int = 8081,
    ) -> None:
        is_ready, is_alive, is_leading = ready, alive, leading

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/healthz":
                    code, body = (200, b"ok\n") if is_alive() else (503, b"cannot work\n")
                elif self.path == "/readyz":
                    if not is_ready():
                        code, body = 503, b"not ready\n"
                    else:
                        code, body = 200, b"leading\n" if is_leading() else b"standby\n"
                else:
                    code, body = 404, b"not found\n"
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
