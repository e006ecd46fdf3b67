#!/usr/bin/env bash
# Builds the controller's OCI image from Debian packages and the project's wheel, with
# Debian's own tools: no base image from a registry (none is reachable here, and a
# platform team can rebuild it from the same mirror).
#
#   scripts/build-image.sh [--archive FILE] [--rebuild]
#
# 1. mmdebstrap: a minimal root of the machine's Debian release (essential packages,
#    python3, python3-venv, ca-certificates), docs and man pages left out.
# 2. The project's wheel (hatchling, `pip wheel --no-deps .`) and its runtime
#    dependencies with the `postgres` extra (pip may fetch them from PyPI) installed into
#    a venv at /opt/ai-inference inside that root, offline from a local wheelhouse.
# 3. The non-root user 64535 (as deploy/controller.yaml runs it), /var/lib/ai-inference
#    for the SQLite log; nothing else is written at run time (read-only root file system;
#    HF_HOME and byte-code writes point at /tmp or are off).
# 4. umoci: one layer, entrypoint `ai-inference`, cmd `controller`, OCI labels; every
#    time stamp is SOURCE_DATE_EPOCH (the last commit's time unless set), so the same
#    inputs give the same layer and config digests.
#
# Prints the OCI layout's path and tag (`DIR:TAG`) as its last line, e.g.
# `build/image:0.1.0`; `skopeo copy oci:build/image:0.1.0 docker://REGISTRY/...` pushes it.
# Cached under $AI_INFERENCE_CACHE/image (default ~/.cache/ai-inference/image), keyed
# by a hash of every input: a warm run only rebuilds the wheel and copies the layout.
# `--rebuild` assembles the root and the layout again from the cached Debian root and
# wheels (the tests use it to show the same inputs give the same digests).
# Runs as root (mmdebstrap's root mode, chroot, umoci keeping file owners).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[build-image] %s\n' "$*" >&2; }

archive=""
rebuild=0
while (($#)); do
  case $1 in
    --archive) archive=$2; shift 2 ;;
    --rebuild) rebuild=1; shift ;;
    *) log "unknown argument $1 (usage: scripts/build-image.sh [--archive FILE] [--rebuild])"; exit 2 ;;
  esac
done

if [[ $(id -u) != 0 ]]; then
  log "must run as root (mmdebstrap root mode, chroot, file owners in the layer)"; exit 1
fi

CACHE="${AI_INFERENCE_CACHE:-$HOME/.cache/ai-inference}/image"
OUT="${AI_INFERENCE_IMAGE_DIR:-build/image}"
SUITE=$(. /etc/os-release && echo "$VERSION_CODENAME")
MIRROR="${AI_INFERENCE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PACKAGES="python3,python3-venv,ca-certificates,libstdc++6"
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -n1)
TAG="${AI_INFERENCE_IMAGE_TAG:-$VERSION}"
VENV=/opt/ai-inference
USER_ID=64535
if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
  SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || stat -c %Y pyproject.toml)
fi
export SOURCE_DATE_EPOCH
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
# The wheel is built from the work tree: say so when it differs from the commit.
git diff --quiet HEAD -- 2>/dev/null || REVISION="$REVISION-dirty"
CREATED=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
mkdir -p "$CACHE"
# One build at a time per machine: worktrees and test sessions share the cache.
exec 9>"$CACHE/.lock"
flock 9

# --- tools -------------------------------------------------------------------------------
need=()
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
command -v umoci >/dev/null 2>&1 || need+=(umoci)
command -v skopeo >/dev/null 2>&1 || need+=(skopeo)
if ((${#need[@]})); then
  log "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

PY=${PYTHON:-.venv/bin/python}
if [[ ! -x $PY ]]; then
  # Only pip is needed from it; a small venv of our own keeps the system Python clean.
  [[ -x $CACHE/tools/bin/python ]] || python3 -m venv "$CACHE/tools"
  PY=$CACHE/tools/bin/python
fi

key_of() { sha256sum | cut -c1-16; }

# --- 1. the Debian root (cached as a tarball) ------------------------------------------
DPKG_OPTS=(
  --dpkgopt='path-exclude=/usr/share/man/*'
  --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-exclude=/usr/share/doc/*'
  --dpkgopt='path-include=/usr/share/doc/*/copyright'
)
VARIANT=essential
base_key=$(printf '%s\n' "$VARIANT" "$SUITE" "$MIRROR" "$PACKAGES" "${DPKG_OPTS[@]}" | key_of)
base="$CACHE/base-$base_key.tar"
if [[ ! -f $base ]]; then
  log "mmdebstrap $SUITE ($PACKAGES) — a minute or two on a cold cache"
  mmdebstrap --mode=root --format=tar --variant="$VARIANT" --include="$PACKAGES" "${DPKG_OPTS[@]}" \
    --quiet "$SUITE" "$base.partial" "$MIRROR"
  mv "$base.partial" "$base"
  find "$CACHE" -maxdepth 1 -name 'base-*.tar' ! -name "base-$base_key.tar" -delete
fi

# --- 2. the wheels ------------------------------------------------------------------------
work=$(mktemp -d /tmp/ai-inference-image.XXXXXX)
trap 'rm -rf "$work"' EXIT
log "building the project's wheel"
"$PY" -m pip wheel -q --no-deps --wheel-dir "$work/project" . >/dev/null
wheel=$(ls "$work"/project/ai_inference-*.whl)
deps_key=$(cat pyproject.toml <("$PY" -c 'import sys; print(sys.version_info[:2])') | key_of)
deps="$CACHE/wheels-$deps_key"
if [[ ! -d $deps ]]; then
  log "fetching the runtime dependencies' wheels"
  "$PY" -m pip wheel -q --wheel-dir "$deps.partial" "${wheel}[postgres]" >/dev/null
  rm -f "$deps.partial"/ai_inference-*.whl
  mv "$deps.partial" "$deps"
  find "$CACHE" -maxdepth 1 -name 'wheels-*' ! -name "wheels-$deps_key" -exec rm -rf {} +
fi

image_key=$(
  {
    echo "$base_key" "$SOURCE_DATE_EPOCH" "$TAG" "$REVISION"
    sha256sum "$0" "$wheel" "$deps"/*.whl | awk '{print $1}'
  } | key_of
)
layout="$CACHE/oci-$image_key"

# --- 3. the image root and 4. the OCI layout --------------------------------------------
if [[ $rebuild == 1 || ! -f $layout/.complete ]]; then
  rm -rf "$layout"
  log "assembling the root"
  root="$work/root"
  mkdir "$root"
  tar --numeric-owner -xpf "$base" -C "$root"
  mkdir -p "$root/tmp/wheels"
  cp "$wheel" "$deps"/*.whl "$root/tmp/wheels/"
  # SOURCE_DATE_EPOCH makes pip's byte-code hash-checked, not time-stamped.
  in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" HOME=/root "$@"; }
  in_root python3 -m venv "$VENV"
  in_root "$VENV/bin/pip" install -q --no-index --no-cache-dir --find-links /tmp/wheels \
    "ai-inference[postgres]"
  # The running image installs nothing.
  in_root "$VENV/bin/pip" uninstall -q -y pip setuptools
  rm -rf "$root/tmp/wheels"
  ln -s "$VENV/bin/ai-inference" "$root/usr/local/bin/ai-inference"

  echo "ai-inference:x:$USER_ID:$USER_ID:ai-inference controller:/var/lib/ai-inference:/usr/sbin/nologin" >>"$root/etc/passwd"
  echo "ai-inference:x:$USER_ID:" >>"$root/etc/group"
  echo "ai-inference:*:0:0:99999:7:::" >>"$root/etc/shadow"
  install -d -m 0750 -o "$USER_ID" -g "$USER_ID" "$root/var/lib/ai-inference"
  chmod 1777 "$root/tmp"
  # The runtime provides /dev, /proc, the host name and DNS; caches are not the image's.
  rm -rf "$root"/dev/* "$root"/var/cache/* "$root"/var/log/* "$root"/run/* \
    "$root/etc/hostname" "$root/etc/resolv.conf"
  find "$root" -newermt "@$SOURCE_DATE_EPOCH" -print0 |
    xargs -0r touch --no-dereference --date="@$SOURCE_DATE_EPOCH"

  log "writing the OCI layout"
  umoci init --layout "$work/oci"
  umoci new --image "$work/oci:$TAG"
  umoci unpack --image "$work/oci:$TAG" "$work/bundle" >/dev/null
  cp -a "$root/." "$work/bundle/rootfs/"
  touch --no-dereference --date="@$SOURCE_DATE_EPOCH" "$work/bundle/rootfs"
  umoci repack --image "$work/oci:$TAG" \
    --history.created "$CREATED" --history.created_by "scripts/build-image.sh" \
    --history.comment "debian $SUITE ($PACKAGES) and ai-inference $VERSION" "$work/bundle"
  umoci config --no-history --image "$work/oci:$TAG" \
    --created "$CREATED" --author "ai-inference" \
    --config.user "$USER_ID:$USER_ID" \
    --config.entrypoint ai-inference --config.cmd controller \
    --config.workingdir /var/lib/ai-inference \
    --config.env "PATH=$VENV/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --config.env PYTHONDONTWRITEBYTECODE=1 \
    --config.env PYTHONUNBUFFERED=1 \
    --config.env HF_HOME=/tmp/huggingface \
    --config.label "org.opencontainers.image.title=ai-inference controller" \
    --config.label "org.opencontainers.image.version=$VERSION" \
    --config.label "org.opencontainers.image.revision=$REVISION" \
    --config.label "org.opencontainers.image.created=$CREATED" \
    --config.label "org.opencontainers.image.licenses=Apache-2.0" \
    --config.label "org.opencontainers.image.base.name=debian:$SUITE (mmdebstrap)"
  umoci gc --layout "$work/oci"
  mv "$work/oci" "$layout"
  touch "$layout/.complete"
  find "$CACHE" -maxdepth 1 -name 'oci-*' ! -name "oci-$image_key" -exec rm -rf {} +
else
  log "image cached ($layout)"
fi

rm -rf "$OUT"
mkdir -p "$(dirname "$OUT")"
cp -a "$layout" "$OUT"
rm -f "$OUT/.complete"
if [[ -n $archive ]]; then
  rm -f "$archive"
  skopeo copy --quiet "oci:$OUT:$TAG" "oci-archive:$archive:$TAG"
  log "archive $archive"
fi
echo "$OUT:$TAG"
