#!/usr/bin/env bash
# End-to-end check of flexinfer-operator on a real Kubernetes cluster (kind
# or k3d), with the flexinfer-sim image standing in for vLLM. Not run in CI.
# See README.md next to this script.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CLUSTER="${CLUSTER:-flexinfer-e2e}"
TOOL="${TOOL:-kind}"                 # kind | k3d
IMAGE="${IMAGE:-flexinfer-sim:e2e}"
NS="${NS:-flexinfer-e2e}"
KEEP="${KEEP:-0}"                    # 1 = keep the cluster afterwards
WORK="$(mktemp -d)"
KUBECONFIG_FILE="$WORK/kubeconfig"
OPERATOR_PID=""

log() { printf '\n=== %s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

cleanup() {
  [ -n "$OPERATOR_PID" ] && kill "$OPERATOR_PID" 2>/dev/null || true
  if [ "$KEEP" != "1" ]; then
    case "$TOOL" in
      kind) kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true ;;
      k3d) k3d cluster delete "$CLUSTER" >/dev/null 2>&1 || true ;;
    esac
  fi
  echo "operator log: $WORK/operator.log"
}
trap cleanup EXIT

for bin in "$TOOL" kubectl docker cargo; do
  command -v "$bin" >/dev/null || fail "$bin is required"
done

log "cluster $CLUSTER ($TOOL)"
case "$TOOL" in
  kind)
    kind create cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG_FILE" --wait 120s ;;
  k3d)
    k3d cluster create "$CLUSTER" --kubeconfig-update-default=false --wait
    k3d kubeconfig get "$CLUSTER" > "$KUBECONFIG_FILE" ;;
  *) fail "TOOL must be kind or k3d" ;;
esac
export KUBECONFIG="$KUBECONFIG_FILE"
k() { kubectl --kubeconfig "$KUBECONFIG_FILE" "$@"; }

log "simulator image $IMAGE"
docker build -f "$ROOT/docker/Dockerfile" --target flexinfer-sim -t "$IMAGE" "$ROOT"
case "$TOOL" in
  kind) kind load docker-image "$IMAGE" --name "$CLUSTER" ;;
  k3d) k3d image import "$IMAGE" -c "$CLUSTER" ;;
esac

log "CRDs"
k apply -f "$ROOT/crds/manifests/"
k wait --for=condition=Established crd/models.ai.flexinfer --timeout=60s

log "a fake NVIDIA GPU on every node (extended resource + RuntimeClass nvidia -> runc)"
for node in $(k get nodes -o name); do
  k patch "$node" --subresource=status --type=json \
    -p '[{"op":"add","path":"/status/capacity/nvidia.com~1gpu","value":"4"}]'
done
k apply -f - <<YAML
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: nvidia}
handler: runc
YAML
k create namespace "$NS" --dry-run=client -o yaml | k apply -f -

log "operator (out of cluster, against $KUBECONFIG_FILE)"
cargo build --release -p flexinfer-operator --manifest-path "$ROOT/Cargo.toml"
"$ROOT/target/release/flexinfer-operator" --kubeconfig "$KUBECONFIG_FILE" \
  --health-probe-bind-address 127.0.0.1:18081 --metrics-bind-address 127.0.0.1:18080 \
  >"$WORK/operator.log" 2>&1 &
OPERATOR_PID=$!
for _ in $(seq 1 60); do curl -sf http://127.0.0.1:18081/readyz >/dev/null && break; sleep 1; done
curl -sf http://127.0.0.1:18081/readyz >/dev/null || fail "operator not ready (see $WORK/operator.log)"

log "Model sim (vllm backend, simulator image, always on)"
k -n "$NS" apply -f - <<YAML
apiVersion: ai.flexinfer/v1alpha2
kind: Model
metadata: {name: sim}
spec:
  backend: vllm
  source: HF://sim/sim-model
  image: $IMAGE
  gpu: {vendor: nvidia}
  cache: {strategy: None}
  serverless: {enabled: false}
YAML
k -n "$NS" wait model/sim --for=jsonpath='{.status.phase}'=Ready --timeout=180s
k -n "$NS" get deployment sim service sim
[ "$(k -n "$NS" get model sim -o jsonpath='{.status.endpoint}')" = "http://sim.$NS.svc:8000" ] \
  || fail "unexpected status.endpoint"
k -n "$NS" get endpointslices -l kubernetes.io/service-name=sim -o jsonpath='{.items[0].endpoints[0].conditions.ready}' | grep -q true \
  || fail "no ready endpoint in the Service's EndpointSlice"
[ "$(k -n "$NS" get model sim -o jsonpath='{.metadata.finalizers[0]}')" = "flexinfer.ai/model-cleanup" ] \
  || fail "finalizer missing"

log "steady state: no writes across a requeue (30 s)"
rv_model=$(k -n "$NS" get model sim -o jsonpath='{.metadata.resourceVersion}')
rv_dep=$(k -n "$NS" get deployment sim -o jsonpath='{.metadata.generation}')
rv_svc=$(k -n "$NS" get service sim -o jsonpath='{.metadata.resourceVersion}')
sleep 40
[ "$rv_model" = "$(k -n "$NS" get model sim -o jsonpath='{.metadata.resourceVersion}')" ] || fail "Model rewritten"
[ "$rv_dep" = "$(k -n "$NS" get deployment sim -o jsonpath='{.metadata.generation}')" ] || fail "Deployment spec rewritten"
[ "$rv_svc" = "$(k -n "$NS" get service sim -o jsonpath='{.metadata.resourceVersion}')" ] || fail "Service rewritten"

log "scale to zero: serverless with a 20 s idle timeout"
k -n "$NS" patch model sim --type=merge -p '{"spec":{"serverless":{"enabled":true,"minReplicas":0,"idleTimeout":"20s"}}}'
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
k -n "$NS" patch model sim --subresource=status --type=merge --field-manager=flexinfer-gateway \
  -p "{\"status\":{\"lastActiveTime\":\"$now\"}}"
k -n "$NS" wait model/sim --for=jsonpath='{.status.phase}'=Idle --timeout=120s
[ "$(k -n "$NS" get deployment sim -o jsonpath='{.spec.replicas}')" = "0" ] || fail "not scaled to zero"
[ "$(k -n "$NS" get model sim -o jsonpath='{.status.lastActiveTime}')" = "$now" ] || fail "lastActiveTime changed"

log "wake up: the gateway's touch scales it back"
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
k -n "$NS" patch model sim --subresource=status --type=merge --field-manager=flexinfer-gateway \
  -p "{\"status\":{\"lastActiveTime\":\"$now\"}}"
k -n "$NS" wait model/sim --for=jsonpath='{.status.phase}'=Ready --timeout=180s

log "unknown backend fails with a reason"
k -n "$NS" apply -f - <<YAML
apiVersion: ai.flexinfer/v1alpha2
kind: Model
metadata: {name: broken}
spec: {backend: tgi, source: HF://x/y}
YAML
k -n "$NS" wait model/broken --for=jsonpath='{.status.phase}'=Failed --timeout=60s

log "deletion cleans up"
k -n "$NS" delete model sim broken --wait=true --timeout=60s
k -n "$NS" get deployment sim 2>/dev/null && fail "Deployment left behind"
k -n "$NS" get service sim 2>/dev/null && fail "Service left behind"

curl -sf http://127.0.0.1:18080/metrics | grep -q flexinfer_operator_reconciles_total || fail "metrics missing"
log "PASS"
