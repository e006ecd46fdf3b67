#!/usr/bin/env bash
# Everything a fresh machine needs before the demo or the tests: the Python environment,
# the Kubernetes binaries (built once from Debian's source, then cached) and etcd, and a
# running PostgreSQL for the event-log tests (AI_INFERENCE_SKIP_POSTGRES=1, as `make demo`
# sets, skips that check). Idempotent and quick when warm.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup] %s\n' "$*" >&2; }

PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  log "Python >= 3.11 is required (found $("$PY" --version 2>&1))"; exit 1
fi
if [[ ! -x .venv/bin/python ]]; then
  log "creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [[ ! -f $stamp ]]; then
  log "installing the package and its dev dependencies into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev]'
  rm -f .venv/.installed-* && touch "$stamp"
fi

command -v kubectl >/dev/null 2>&1 || {
  log "installing kubectl (Debian's kubernetes-client)"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubernetes-client >/dev/null
}
command -v openssl >/dev/null 2>&1 || {
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
}

bash scripts/build-kubernetes.sh

if [[ ${AI_INFERENCE_SKIP_POSTGRES:-0} != 1 ]]; then
  if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    if command -v pg_ctlcluster >/dev/null 2>&1; then
      log "starting PostgreSQL"
      pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
    fi
  fi
  pg_isready -q -h 127.0.0.1 -p 5432 || { log "PostgreSQL is not reachable on 127.0.0.1:5432"; exit 1; }
fi
