#!/usr/bin/env bash
# Runs the gateway on examples/local.yaml (embedded operator, no Kubernetes)
# and sends it a real chat request: the model's server is not running yet, so
# the request waits through a cold start and is answered once it is up.
# The gateway keeps running afterwards; Ctrl-C stops it and its model servers.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
cargo build --release -p flexinfer-gateway -p flexinfer-conformance
bin=$(cd "${CARGO_TARGET_DIR:-target}/release" && pwd)
export PATH="$bin:$PATH"

flexinfer-gateway --config examples/local.yaml --listen 127.0.0.1:8080 \
  --metrics-listen 127.0.0.1:9090 &
gw=$!
trap 'kill -TERM $gw 2>/dev/null; wait $gw 2>/dev/null' EXIT INT TERM
for _ in $(seq 1 100); do
  curl -fsS http://127.0.0.1:8080/healthz >/dev/null 2>&1 && break
  sleep 0.1
done

echo "--- POST /v1/chat/completions (model alias gpt-4o-mini; cold start of smollm2)"
time curl -sS http://127.0.0.1:8080/v1/chat/completions \
  -H 'Content-Type: application/json' \
  -d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello!"}],"max_tokens":12}'
echo
echo "--- GET /admin/models"
curl -sS http://127.0.0.1:8080/admin/models
echo
echo "--- serving on http://127.0.0.1:8080 (metrics on :9090/metrics); Ctrl-C to stop"
wait $gw
