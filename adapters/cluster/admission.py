"""What a 1.34 API server validates of the DRA kinds that their 1.20 stand-in CRDs cannot.

A ResourceClaimTemplate's spec and a ResourceClaim's spec are immutable in 1.34: an
update that changes either is refused (422, "field is immutable"). A 1.20 CRD has no
transition rules (CEL came in 1.23), so the bed's API server would take the change in
place, and the controller's way of changing a claim template on a real cluster (the API
refuses the apply, the template is deleted and made anew) would never run here. The
local control plane starts this server beside the API server and registers it as a
validating webhook for those two kinds' updates, so the bed refuses what 1.34 refuses.

Run by `local.up` as `python -m adapters.cluster.admission --port P --cert C --key K`,
serving HTTPS on 127.0.0.1 with the API server's own serving certificate (its SAN is
127.0.0.1, and the API server trusts the plane's CA).
"""

from __future__ import annotations

import argparse
import json
import logging
import ssl
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["PATH", "WEBHOOK_NAME", "judge", "main", "webhook_configuration"]

log = logging.getLogger(__name__)

PATH = "/validate-immutable-spec"
WEBHOOK_NAME = "immutable-spec.resource.k8s.io"
_IMMUTABLE_SPEC = ("resourceclaimtemplates", "resourceclaims")
_MAX_BODY = 4 * 1024 * 1024  # an object is at most 1.5 MiB in etcd; a review holds two


def judge(review: dict[str, Any]) -> dict[str, Any]:
    """The AdmissionReview answering `review`: allowed, unless an update changes a spec
    the kind holds immutable. The refusal is the 422 the API server itself gives."""
    request = review.get("request") or {}
    response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": True}
    resource = (request.get("resource") or {}).get("resource")
    if (
        request.get("operation") == "UPDATE"
        and not request.get("subResource")
        and resource in _IMMUTABLE_SPEC
    ):
        new = (request.get("object") or {}).get("spec")
        old = (request.get("oldObject") or {}).get("spec")
        if new != old:
            kind = (request.get("kind") or {}).get("kind", "")
            name = request.get("name", "")
            cause = "Invalid value: field is immutable"
            response["allowed"] = False
            response["status"] = {
                "status": "Failure",
                "code": 422,
                "reason": "Invalid",
                "message": f'{kind}.resource.k8s.io "{name}" is invalid: spec: {cause}',
                "details": {
                    "name": name,
                    "group": "resource.k8s.io",
                    "kind": kind,
                    "causes": [{"reason": "FieldValueInvalid", "message": cause, "field": "spec"}],
                },
            }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def webhook_configuration(port: int, ca_bundle: str) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration that sends those updates to this server.
    `ca_bundle`: the plane's CA, base64. Failing closed, as built-in validation does."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "local-plane-immutable-spec"},
        "webhooks": [
            {
                "name": WEBHOOK_NAME,
                "clientConfig": {"url": f"https://127.0.0.1:{port}{PATH}", "caBundle": ca_bundle},
                "rules": [
                    {
                        "apiGroups": ["resource.k8s.io"],
                        "apiVersions": ["*"],
                        "operations": ["UPDATE"],
                        "resources": list(_IMMUTABLE_SPEC),
                        "scope": "Namespaced",
                    }
                ],
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
            }
        ],
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # the API server keeps its connection to a webhook

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        path = self.path.split("?", 1)[0]  # the API server adds ?timeout=5s
        if path != PATH or not 0 < length <= _MAX_BODY:
            self.send_error(404 if path != PATH else 413)
            return
        try:
            answer = judge(json.loads(self.rfile.read(length)))
        except (ValueError, AttributeError) as err:
            self.send_error(400, f"not an AdmissionReview: {err}")
            return
        body = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug(format, *args)


class _TLSServer(ThreadingHTTPServer):
    """The handshake is made in the request's own thread: one slow or broken client
    cannot hold the accepting loop."""

    daemon_threads = True

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.context = context

    def finish_request(self, request: Any, client_address: Any) -> None:
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as err:
            # Also the plane's own check that the port is open (local.py).
            log.debug("TLS handshake with %s failed: %s", client_address, err)
            return
        try:
            super().finish_request(tls, client_address)
        finally:
            tls.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    server = _TLSServer(args.port, context)
    log.info("serving %s on https://127.0.0.1:%d", PATH, args.port)
    server.serve_forever()


if __name__ == "__main__":
    main()
