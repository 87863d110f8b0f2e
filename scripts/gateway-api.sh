#!/usr/bin/env bash
# The Gateway API's CRDs for the Gateway API lane
# (gateway/tests/gateway/real_cluster/gateway_api.rs): the standard channel
# of sigs.k8s.io/gateway-api and the InferencePool CRD of
# sigs.k8s.io/gateway-api-inference-extension, at the versions GAIE's
# conformance suite v1.6.0 is built against, taken from their Go modules
# (the module proxy is the one place they can come from here), once, cached.
#
# Also builds the inference extension's light endpoint picker (`lwepp`,
# v1.6.2, from its Go module: no image can be pulled here), the picker the
# lane puts FlexInfer's ext_proc client against.
#
# Prints the variables the lane reads, ready for `eval`:
#   FLEXINFER_GATEWAY_API_CRDS  folder holding the CRD manifests
#   FLEXINFER_LWEPP             the lwepp binary
#   FLEXINFER_ECHO_BASIC        the suite's echo server
#   FLEXINFER_GAIE_SUITE        GAIE's conformance suite (a Go test binary)
#
# Without Go it prints nothing and exits 0, saying why on stderr (the lane
# then says it is skipped).
#
# Cache: $FLEXINFER_CACHE (default ~/.cache/flexinfer): gateway-api/<versions>/.
set -euo pipefail

GATEWAY_API_VERSION=v1.6.1
GAIE_VERSION=v1.6.0
# The picker: v1.6.2 fixes full-duplex streaming of the v1.6.0 picker (the
# v1.6.2 release ships the v1.6.0 suite with it).
LWEPP_VERSION=v1.6.2

CACHE="${FLEXINFER_CACHE:-$HOME/.cache/flexinfer}"
OUT="$CACHE/gateway-api/gateway-api-$GATEWAY_API_VERSION-gaie-$GAIE_VERSION"
CRDS="$OUT/crds"

log() { echo "gateway-api: $*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  log "no Go toolchain on this machine: the Gateway API CRDs cannot be fetched"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOFLAGS="-mod=mod"

if [ ! -f "$CRDS/.complete" ]; then
  dir_of() { # module@version
    (cd "$work" && go mod download -json "$1") |
      sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
  }
  gw=$(dir_of "sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION")
  gaie=$(dir_of "sigs.k8s.io/gateway-api-inference-extension@$GAIE_VERSION")
  if [ -z "$gw" ] || [ -z "$gaie" ]; then
    log "the Go module proxy did not serve sigs.k8s.io/gateway-api $GATEWAY_API_VERSION or the inference extension $GAIE_VERSION"
    exit 1
  fi
  mkdir -p "$CRDS"
  for kind in gatewayclasses gateways httproutes grpcroutes referencegrants backendtlspolicies listenersets tlsroutes; do
    src="$gw/config/crd/standard/gateway.networking.k8s.io_$kind.yaml"
    if [ -f "$src" ]; then cp "$src" "$CRDS/"; fi
  done
  cp "$gaie/config/crd/bases/inference.networking.k8s.io_inferencepools.yaml" "$CRDS/"
  chmod u+w "$CRDS"/*.yaml
  touch "$CRDS/.complete"
  log "CRDs of gateway-api $GATEWAY_API_VERSION (standard) and the inference extension $GAIE_VERSION in $CRDS"
fi
LWEPP="$CACHE/gateway-api/lwepp-$LWEPP_VERSION/lwepp"
if [ ! -x "$LWEPP" ]; then
  src=$( (cd "$work" && go mod download -json "sigs.k8s.io/gateway-api-inference-extension@$LWEPP_VERSION") |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  if [ -z "$src" ]; then
    log "the Go module proxy did not serve the inference extension $LWEPP_VERSION"
    exit 1
  fi
  # The module cache is read-only: build from a copy.
  cp -r "$src" "$work/src"
  chmod -R u+w "$work/src"
  log "building lwepp $LWEPP_VERSION (about a minute the first time)"
  mkdir -p "$(dirname "$LWEPP")"
  (cd "$work/src" && GOWORK=off CGO_ENABLED=0 go build -o "$LWEPP.part" ./cmd/lwepp) >&2
  mv "$LWEPP.part" "$LWEPP"
fi
# The suite's echo server (sigs.k8s.io/gateway-api/conformance's
# echo-basic) and the suite itself: GAIE's conformance module, compiled as
# a test binary inside a copy of the extension's main module at the same
# version, as its `replace ... => ../` expects.
ECHO_BASIC="$OUT/echo-basic"
if [ ! -x "$ECHO_BASIC" ]; then
  src=$( (cd "$work" && go mod download -json "sigs.k8s.io/gateway-api/conformance@$GATEWAY_API_VERSION") |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  cp -r "$src" "$work/echo"
  chmod -R u+w "$work/echo"
  log "building echo-basic ($GATEWAY_API_VERSION)"
  (cd "$work/echo" && GOWORK=off CGO_ENABLED=0 go build -o "$ECHO_BASIC.part" ./echo-basic) >&2
  mv "$ECHO_BASIC.part" "$ECHO_BASIC"
fi
SUITE="$OUT/gaie-conformance.test"
if [ ! -x "$SUITE" ]; then
  main=$( (cd "$work" && go mod download -json "sigs.k8s.io/gateway-api-inference-extension@$GAIE_VERSION") |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  suite=$( (cd "$work" && go mod download -json "sigs.k8s.io/gateway-api-inference-extension/conformance@$GAIE_VERSION") |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  cp -r "$main" "$work/gaie"
  chmod -R u+w "$work/gaie"
  rm -rf "$work/gaie/conformance"
  cp -r "$suite" "$work/gaie/conformance"
  chmod -R u+w "$work/gaie/conformance"
  log "building GAIE's conformance suite $GAIE_VERSION (a few minutes the first time)"
  (cd "$work/gaie/conformance" && GOWORK=off CGO_ENABLED=0 go test -c -o "$SUITE.part" .) >&2
  mv "$SUITE.part" "$SUITE"
fi
echo "export FLEXINFER_GATEWAY_API_CRDS=$CRDS"
echo "export FLEXINFER_LWEPP=$LWEPP"
echo "export FLEXINFER_ECHO_BASIC=$ECHO_BASIC"
echo "export FLEXINFER_GAIE_SUITE=$SUITE"
