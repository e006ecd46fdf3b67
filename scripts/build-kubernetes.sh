#!/usr/bin/env bash
# Builds kube-apiserver and kube-controller-manager 1.20.2 from Debian's source package
# and installs etcd-server, caching the binaries under $AI_INFERENCE_CACHE (default
# ~/.cache/ai-inference). Idempotent: a warm cache returns at once.
#
# Why from source: no registry reachable here ships a kube-apiserver binary, but Debian
# ships the full 1.20.2 tree with vendor/, and it builds with Debian's golang-go.
set -euo pipefail

CACHE="${AI_INFERENCE_CACHE:-$HOME/.cache/ai-inference}"
BIN="$CACHE/bin"
SRC="$CACHE/src"
mkdir -p "$BIN" "$SRC"

log() { printf '[build-kubernetes] %s\n' "$*" >&2; }

need_apt=()
command -v etcd >/dev/null 2>&1 || need_apt+=(etcd-server)
if [[ ! -x "$BIN/kube-apiserver" || ! -x "$BIN/kube-controller-manager" ]]; then
  command -v go >/dev/null 2>&1 || need_apt+=(golang-go)
  command -v rsync >/dev/null 2>&1 || need_apt+=(rsync)
  command -v jq >/dev/null 2>&1 || need_apt+=(jq)
  dpkg -s golang-github-modern-go-reflect2-dev >/dev/null 2>&1 || need_apt+=(golang-github-modern-go-reflect2-dev)
  dpkg -s dpkg-dev >/dev/null 2>&1 || need_apt+=(dpkg-dev)
fi

apt_updated=0
apt_update() {
  if [[ $apt_updated == 0 ]]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=1
  fi
}

if ((${#need_apt[@]})); then
  log "installing ${need_apt[*]}"
  apt_update
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
# etcd-server's maintainer script may start a system etcd on 2379; ours uses free ports,
# but a stray one wastes memory.
pkill -U 0 --full "^/usr/bin/etcd$" 2>/dev/null || true

if [[ -x "$BIN/kube-apiserver" && -x "$BIN/kube-controller-manager" ]]; then
  log "binaries cached in $BIN"
  exit 0
fi

# A deb-src twin of the machine's own Debian source, so apt-get source works.
SRC_LIST=/etc/apt/sources.list.d/ai-inference-deb-src.sources
if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
  log "adding a deb-src entry for bookworm main"
  cat >"$SRC_LIST" <<'SRCS'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRCS
  apt_updated=0
fi
apt_update

TREE="$SRC/kubernetes"
if [[ ! -f "$TREE/Makefile" ]]; then
  log "fetching Debian's kubernetes source package"
  (cd "$SRC" && apt-get source --download-only -qq kubernetes)
  orig=$(ls "$SRC"/kubernetes_*.orig.tar.* | head -n1)
  rm -rf "$TREE.tmp" && mkdir -p "$TREE.tmp"
  tar -xf "$orig" -C "$TREE.tmp" --strip-components=1
  mv "$TREE.tmp" "$TREE"
fi

# reflect2 v1.0.1 (vendored) crashes the API server under Go >= 1.18 on the first
# custom-resource write; Debian's 1.0.2 copy is API-compatible.
R2_SYS=$(dpkg -L golang-github-modern-go-reflect2-dev | grep '/reflect2\.go$' | head -n1 | xargs dirname)
R2_VENDOR="$TREE/vendor/github.com/modern-go/reflect2"
if ! cmp -s "$R2_SYS/reflect2.go" "$R2_VENDOR/reflect2.go"; then
  log "replacing vendored reflect2 with Debian's $(basename "$R2_SYS")"
  rm -f "$R2_VENDOR"/*.go "$R2_VENDOR"/*.s
  cp "$R2_SYS"/*.go "$R2_VENDOR"/
  cp "$R2_SYS"/*.s "$R2_VENDOR"/ 2>/dev/null || true
  rm -f "$R2_VENDOR"/*_test.go
fi

log "building kube-apiserver and kube-controller-manager (cold: ~15 min on 2 cores)"
mkdir -p "$TREE/.go/src/k8s.io"
ln -sfn "$TREE" "$TREE/.go/src/k8s.io/kubernetes"
(
  cd "$TREE/.go/src/k8s.io/kubernetes"
  export GOPATH="$TREE/.go" GO111MODULE=off CGO_ENABLED=0 GOFLAGS=-mod=vendor
  export GOCACHE="$CACHE/go-build"
  # debian/rules builds this way; KUBE_GIT_* keep make from asking git for a version.
  export KUBE_GIT_VERSION=v1.20.2 KUBE_GIT_TREE_STATE=clean KUBE_GIT_COMMIT=debian
  make WHAT="cmd/kube-apiserver cmd/kube-controller-manager"
)
out="$TREE/_output/local/bin/linux/$(go env GOARCH)"
install -m 0755 "$out/kube-apiserver" "$out/kube-controller-manager" "$BIN/"
log "binaries installed in $BIN"
