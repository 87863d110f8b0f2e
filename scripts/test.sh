#!/usr/bin/env bash
# The whole check suite: formatting, lints and every test of the workspace.
# Installs what a fresh machine lacks first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export FLEXINFER_PYTHON="$PWD/.venv/bin/python"
# The host as the lanes find it: compared with the host after them, at the
# end (the real-node lane changes sysctls, nftables rules, links, mounts and
# cgroups, and must put all of it back).
host_before=$(mktemp)
scripts/host-state.sh >"$host_before"
# The real-backend lane (a real llama.cpp server and model, built once into
# ~/.cache/flexinfer, about 15 minutes the first time). Set
# FLEXINFER_SKIP_REAL_BACKEND=1 to leave it out; the lane then says it is
# skipped, and fails if FLEXINFER_REQUIRE_REAL_BACKEND=1.
if [ "${FLEXINFER_SKIP_REAL_BACKEND:-0}" != 1 ]; then
  eval "$(scripts/real-backend.sh)"
fi
# The real-cluster lane (gateway/tests/gateway/real_cluster.rs): etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and helm
# built from their Go modules once into ~/.cache/flexinfer (about 12 minutes
# the first time; needs Go). Set FLEXINFER_SKIP_CONTROL_PLANE=1 to leave it
# out; without Go or with that set, the lane says it is skipped, and fails
# if FLEXINFER_REQUIRE_CONTROL_PLANE=1.
if [ "${FLEXINFER_SKIP_CONTROL_PLANE:-0}" != 1 ]; then
  eval "$(scripts/control-plane.sh)"
  # The Gateway API's CRDs for that lane's Gateway API tests.
  eval "$(scripts/gateway-api.sh)"
fi
# The real-node lane (gateway/tests/gateway/real_node.rs): Debian's
# containerd, runc and CNI plugins, CoreDNS and a pause program from their Go
# sources (scripts/real-node.sh), kubelet and kube-proxy from the control
# plane's. Set FLEXINFER_SKIP_REAL_NODE=1 to leave it out; the lane then says
# it is skipped, and fails if FLEXINFER_REQUIRE_REAL_NODE=1.
if [ "${FLEXINFER_SKIP_CONTROL_PLANE:-0}" != 1 ] && [ "${FLEXINFER_SKIP_REAL_NODE:-0}" != 1 ]; then
  eval "$(scripts/real-node.sh)"
fi
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# Every binary first: lanes that run several components as processes find them.
cargo build --workspace --bins
# The container images (scripts/images.sh): every runtime target of
# docker/Dockerfile, from the binaries just built, on stand-in bases (nothing
# can be pulled), pushed to a local registry; the real-node lane
# (gateway/tests/gateway/real_node.rs) runs them. Set FLEXINFER_SKIP_IMAGES=1
# to leave them out; the lane then says it is skipped, and fails if
# FLEXINFER_REQUIRE_IMAGES=1.
if [ "${FLEXINFER_SKIP_IMAGES:-0}" != 1 ]; then
  eval "$(scripts/images.sh)"
fi
# The fault lane (gateway/tests/gateway/faults.rs): dead, black-holed and killed
# endpoints, backends that close before answering, slow, oversized and
# malformed requests, private backend routes, a gateway killed under its
# model processes.
cargo test -p flexinfer-gateway --test gateway --no-fail-fast -- fault_lane::
# Everything else, the chart scenario lane (gateway/tests/gateway/chart_scenarios.rs)
# included.
cargo test --workspace --no-fail-fast -- --skip fault_lane:: --skip gaie_conformance_suite
# GAIE's conformance suite on the real node (about fifteen pods on two
# cores): on its own, so that its load does not slow the timing-bound tests
# above.
cargo test -p flexinfer-gateway --test gateway --no-fail-fast -- gaie_conformance_suite
# The conformance suite's quick profile against a gateway and simulator started on loopback.
"${CARGO_TARGET_DIR:-target}/debug/flexinfer-conformance" run --local --profile quick
# The host as the lanes found it.
if ! diff <(cat "$host_before") <(scripts/host-state.sh) >&2; then
  echo "test.sh: the lanes left the host changed (above: < before, > after)" >&2
  exit 1
fi
