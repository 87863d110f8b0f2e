#!/usr/bin/env bash
# What the real-node lane needs besides the control plane
# (scripts/control-plane.sh, which also builds kubelet and kube-proxy):
# Debian's containerd, runc and CNI plugins, and CoreDNS and a pause
# program built from their Go sources, once, cached. Run after
# scripts/control-plane.sh; scripts/images.sh then packs CoreDNS and the
# pause program as images (nothing can be pulled).
#
#   eval "$(scripts/real-node.sh)"   # exports FLEXINFER_REAL_NODE
#
# Without Go it prints nothing and exits 0, saying why (the lane is then
# skipped, and fails with FLEXINFER_REQUIRE_REAL_NODE=1).
set -euo pipefail
COREDNS_VERSION=1.14.7
CACHE="${FLEXINFER_CACHE:-$HOME/.cache/flexinfer}"
OUT="$CACHE/real-node/coredns-$COREDNS_VERSION"
BIN="$OUT/bin"
log() { echo "real-node: $*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  log "no Go toolchain on this machine: the real node cannot be built"
  exit 0
fi
need=()
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
command -v nft >/dev/null || need+=(nftables)
command -v iptables >/dev/null || need+=(iptables)
command -v conntrack >/dev/null || need+=(conntrack)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >&2
fi
mkdir -p "$BIN" "$OUT/src/coredns" "$OUT/src/pause"
export GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0

if [ ! -x "$BIN/coredns" ]; then
  log "building CoreDNS $COREDNS_VERSION (about a minute)"
  cd "$OUT/src/coredns"
  [ -f go.mod ] || go mod init flexinfer.test/real-node/coredns >/dev/null 2>&1
  cat >main.go <<'GO'
// CoreDNS with the plugins of its own build, as its binary runs.
package main

import (
	_ "github.com/coredns/coredns/core/plugin"
	"github.com/coredns/coredns/coremain"
)

func main() { coremain.Run() }
GO
  go get "github.com/coredns/coredns@v$COREDNS_VERSION" >"$OUT/go-get.log" 2>&1
  go build -trimpath -ldflags "-s -w" -o "$BIN/coredns.partial" . >&2
  mv "$BIN/coredns.partial" "$BIN/coredns"
fi
if [ ! -x "$BIN/pause" ]; then
  cd "$OUT/src/pause"
  [ -f go.mod ] || printf 'module flexinfer.test/real-node/pause\n\ngo 1.22\n' >go.mod
  cat >main.go <<'GO'
// A pod sandbox's pause process: holds the pod's namespaces until told to
// stop.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
GO
  go build -trimpath -ldflags "-s -w" -o "$BIN/pause" . >&2
fi
# A real engine for the lane's llama.cpp image: llama-server from the
# llama.cpp sources vendored in llama-cpp-python's sdist (PyPI; the same
# version the real-backend lane uses), static, CPU only, no OpenMP. About
# 10 minutes on 2 cores the first time.
LLAMA_CPP_PYTHON=0.3.36
if [ ! -x "$BIN/llama-server" ]; then
  log "building llama-server (llama.cpp of llama-cpp-python $LLAMA_CPP_PYTHON; about 10 minutes)"
  src="$CACHE/llama-server/src"
  mkdir -p "$src"
  if [ ! -d "$src/llama_cpp_python-$LLAMA_CPP_PYTHON" ]; then
    "${FLEXINFER_PYTHON:-python3}" -m pip download -q --no-deps --no-binary :all: \
      "llama-cpp-python==$LLAMA_CPP_PYTHON" -d "$src" >&2
    tar -C "$src" -xzf "$src/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz"
  fi
  llama="$src/llama_cpp_python-$LLAMA_CPP_PYTHON/vendor/llama.cpp"
  cmake -S "$llama" -B "$llama/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON >"$OUT/llama-cmake.log" 2>&1
  cmake --build "$llama/build" --target llama-server -j"$(nproc)" >"$OUT/llama-build.log" 2>&1
  cp "$llama/build/bin/llama-server" "$BIN/llama-server.partial"
  mv "$BIN/llama-server.partial" "$BIN/llama-server"
fi
log "ready in $BIN: coredns $COREDNS_VERSION, pause, llama-server; containerd $(containerd --version | awk '{print $3}')"
echo "export FLEXINFER_REAL_NODE=$BIN"
