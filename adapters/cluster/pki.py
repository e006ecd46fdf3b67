"""Keys and certificates of a local control plane, made with the system's openssl.

A CA, a serving certificate for 127.0.0.1/localhost signed by it (so kubeconfigs verify
TLS instead of skipping it), and the service-account signing key pair.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["Pki", "make_pki"]


class Pki:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.ca_cert = folder / "ca.crt"
        self.ca_key = folder / "ca.key"
        self.serving_cert = folder / "apiserver.crt"
        self.serving_key = folder / "apiserver.key"
        self.sa_key = folder / "sa.key"
        self.sa_pub = folder / "sa.pub"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(folder: Path) -> Pki:
    """Create the PKI once; an existing folder is reused as it is."""
    folder.mkdir(parents=True, exist_ok=True)
    pki = Pki(folder)
    if pki.serving_cert.exists() and pki.sa_pub.exists():
        return pki
    _openssl("genrsa", "-out", "ca.key", "2048", cwd=folder)
    _openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        "ca.key",
        "-days",
        "3650",
        "-subj",
        "/CN=ai-inference-local-ca",
        "-out",
        "ca.crt",
        cwd=folder,
    )
    _openssl("genrsa", "-out", "apiserver.key", "2048", cwd=folder)
    _openssl(
        "req",
        "-new",
        "-key",
        "apiserver.key",
        "-subj",
        "/CN=kube-apiserver",
        "-out",
        "apiserver.csr",
        cwd=folder,
    )
    (folder / "san.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n"
        "extendedKeyUsage=serverAuth\n",
        encoding="utf-8",
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        "apiserver.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "3650",
        "-extfile",
        "san.ext",
        "-out",
        "apiserver.crt",
        cwd=folder,
    )
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=folder)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=folder)
    for key in (pki.ca_key, pki.serving_key, pki.sa_key):
        key.chmod(0o600)
    return pki
