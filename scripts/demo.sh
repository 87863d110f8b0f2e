#!/usr/bin/env bash
# Runs the gateway in front of two simulated model servers and sends it a real
# chat completion. The gateway keeps running (Ctrl-C stops everything).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
cargo build --release -p flexinfer-gateway -p flexinfer-conformance
bin=${CARGO_TARGET_DIR:-target}/release
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT INT TERM

for port in 18001 18002; do
  "$bin/flexinfer-sim" --port "$port" --model smollm2-135m-instruct --model sql-lora \
    --pod-name "sim-$port" --ttft 50ms --tokens-per-second 40 >/dev/null &
  pids+=($!)
done
"$bin/flexinfer-gateway" --config examples/local.yaml --listen 127.0.0.1:8080 \
  --metrics-listen 127.0.0.1:9090 &
pids+=($!)

for _ in $(seq 1 100); do
  curl -fsS http://127.0.0.1:8080/healthz >/dev/null 2>&1 && break
  sleep 0.1
done

echo "--- POST /v1/chat/completions through the gateway (model alias gpt-4o-mini)"
curl -sS -i http://127.0.0.1:8080/v1/chat/completions \
  -H 'Content-Type: application/json' -H 'X-Session-ID: demo' \
  -d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello!"}],"max_tokens":12}'
echo
echo "--- the gateway is serving on http://127.0.0.1:8080 (metrics on :9090/metrics); Ctrl-C to stop"
wait
