#!/usr/bin/env bash
# Builds a real Kubernetes control plane and Helm from their published Go
# modules, once, cached: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl and helm, for the real-cluster test lane. Needs Go (1.26 or
# later) and the Go module proxy; about 25 minutes on 2 cores the first time,
# seconds afterwards.
#
# Prints the variable the lane reads, ready for `eval`:
#   FLEXINFER_CONTROL_PLANE  folder holding the six binaries
#
# Without Go it prints nothing and exits 0, saying why on stderr (the lane
# then says it is skipped).
#
# Cache: $FLEXINFER_CACHE (default ~/.cache/flexinfer): control-plane/<versions>/.
set -euo pipefail

K8S_VERSION=1.36.3
ETCD_VERSION=3.6.16
HELM_VERSION=4.3.2

CACHE="${FLEXINFER_CACHE:-$HOME/.cache/flexinfer}"
OUT="$CACHE/control-plane/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-helm-$HELM_VERSION"
BIN="$OUT/bin"
WORK="$OUT/src"

log() { echo "control-plane: $*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  log "no Go toolchain on this machine: the real control plane cannot be built"
  exit 0
fi

mkdir -p "$BIN" "$WORK"
export GOFLAGS="-mod=mod -buildvcs=false"
export CGO_ENABLED=0

# One module per component, so that their dependency versions never meet.
module() { # name, main package(s)...
  local dir="$WORK/$1"
  mkdir -p "$dir"
  if [ ! -f "$dir/go.mod" ]; then
    (cd "$dir" && go mod init "flexinfer.test/control-plane/$1" >/dev/null 2>&1)
  fi
  echo "$dir"
}

build() { # module dir, output name, package, ldflags
  local dir=$1 name=$2 pkg=$3 ldflags=${4:-}
  if [ -x "$BIN/$name" ]; then
    return
  fi
  log "building $name ($pkg)"
  local started
  started=$(date +%s)
  (cd "$dir" && go build -trimpath -ldflags "-s -w $ldflags" -o "$BIN/$name.partial" "$pkg")
  mv "$BIN/$name.partial" "$BIN/$name"
  log "$name built in $(($(date +%s) - started)) s"
}

# etcd: the server module's own main entry point, in a main package of ours.
etcd_dir=$(module etcd)
if [ ! -f "$etcd_dir/main.go" ]; then
  cat >"$etcd_dir/main.go" <<'GO'
// The etcd server, as its own binary runs it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  (cd "$etcd_dir" && go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >&2)
fi
build "$etcd_dir" etcd . "-X go.etcd.io/etcd/api/v3/version.GitSHA=v$ETCD_VERSION"

# Kubernetes: k8s.io/kubernetes pins its staging modules as v0.0.0 with
# replacements into its own tree; a module that depends on it replaces each
# with the published v0.<minor>.<patch> of the same release.
kube_dir=$(module kube)
if ! grep -q "k8s.io/kubernetes v$K8S_VERSION" "$kube_dir/go.mod"; then
  gomod=$(cd "$kube_dir" && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" |
    sed -n 's/^\s*"GoMod": "\(.*\)",$/\1/p')
  staging_version="v0.${K8S_VERSION#1.}"
  sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$gomod" | while read -r m; do
    echo "replace $m => $m $staging_version"
  done >>"$kube_dir/go.mod"
  (cd "$kube_dir" && go get "k8s.io/kubernetes@v$K8S_VERSION" >&2)
fi
minor=${K8S_VERSION#*.}
minor=${minor%%.*}
kube_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X $pkg.gitVersion=v$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  kube_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
# kubelet and kube-proxy too, for the real-node lane (scripts/real-node.sh).
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy; do
  build "$kube_dir" "$cmd" "k8s.io/kubernetes/cmd/$cmd" "$kube_ldflags"
done

# Helm.
helm_dir=$(module helm)
if ! grep -q "helm.sh/helm/v4 v$HELM_VERSION" "$helm_dir/go.mod"; then
  (cd "$helm_dir" && go get "helm.sh/helm/v4@v$HELM_VERSION" >&2)
fi
build "$helm_dir" helm helm.sh/helm/v4/cmd/helm \
  "-X helm.sh/helm/v4/internal/version.version=v$HELM_VERSION"

cat >"$OUT/VERSIONS" <<EOF
etcd $ETCD_VERSION
kubernetes $K8S_VERSION
helm $HELM_VERSION
go $(go env GOVERSION)
EOF
log "ready in $BIN: $(tr '\n' ' ' <"$OUT/VERSIONS")"
echo "export FLEXINFER_CONTROL_PLANE=$BIN"
