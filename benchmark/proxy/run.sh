#!/usr/bin/env bash
# Side-by-side proxy benchmark on loopback: small JSON chat POSTs (non-streaming)
#   1. direct to flexinfer-sim,
#   2. through flexinfer-gateway (model read from the JSON body, rewritten),
#   3. through nginx configured as an equivalent reverse proxy (keep-alive upstream, no buffering).
# Prints requests/s and p50/p99 latency for each, the added p99 latency, and the
# gateway's idle RSS. Needs wrk and nginx (Debian: wrk, nginx-light).
#
#   benchmark/proxy/run.sh [--duration 10s] [--connections 32] [--gateway-threads 1]
set -euo pipefail
cd "$(dirname "$0")/../.."
DURATION=10s
CONNS=32
GW_THREADS=1
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION=$2; shift 2 ;;
    --connections) CONNS=$2; shift 2 ;;
    --gateway-threads) GW_THREADS=$2; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
for tool in wrk nginx; do
  command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install wrk nginx-light)" >&2; exit 1; }
done

cargo build --release -q -p flexinfer-gateway -p flexinfer-conformance
bin=${CARGO_TARGET_DIR:-target}/release
work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 not ready" >&2; exit 1; }

SIM=$(port); GW=$(port); ADMIN=$(port); NG=$(port)
"$bin/flexinfer-sim" --port "$SIM" --model bench-backend --recorder-capacity 0 >/dev/null 2>&1 &
pids+=($!)
cat >"$work/models.yaml" <<YAML
models:
  - name: bench
    backendModel: bench-backend
    endpoints: ["http://127.0.0.1:$SIM"]
YAML
RUST_LOG=warn "$bin/flexinfer-gateway" --config "$work/models.yaml" --listen "127.0.0.1:$GW" \
  --metrics-listen "127.0.0.1:$ADMIN" --threads "$GW_THREADS" >/dev/null 2>&1 &
gw_pid=$!
pids+=($gw_pid)
cat >"$work/nginx.conf" <<NGINX
worker_processes $GW_THREADS;
daemon off;
pid $work/nginx.pid;
error_log $work/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/body;
  proxy_temp_path $work/proxy;
  fastcgi_temp_path $work/fastcgi;
  uwsgi_temp_path $work/uwsgi;
  scgi_temp_path $work/scgi;
  upstream sim { server 127.0.0.1:$SIM; keepalive 64; }
  server {
    listen 127.0.0.1:$NG;
    location / {
      proxy_pass http://sim;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
    }
  }
}
NGINX
nginx -c "$work/nginx.conf" &
pids+=($!)
wait_port "$SIM"; wait_port "$GW"; wait_port "$NG"
sleep 0.5
rss_idle=$(awk '/VmRSS/ {print $2}' "/proc/$gw_pid/status")

# The sim serves "bench-backend": the direct and nginx runs send that name;
# the gateway run sends "bench" and the gateway rewrites it.
sed 's/"model":"bench"/"model":"bench-backend"/' benchmark/proxy/chat.lua >"$work/direct.lua"
run() { wrk -t2 -c"$CONNS" -d"$DURATION" --latency -s "$2" "http://127.0.0.1:$1" | grep RESULT; }
echo "warm-up"; run "$GW" benchmark/proxy/chat.lua >/dev/null; run "$NG" "$work/direct.lua" >/dev/null
direct=$(run "$SIM" "$work/direct.lua")
gateway=$(run "$GW" benchmark/proxy/chat.lua)
nginx=$(run "$NG" "$work/direct.lua")
rss_after=$(awk '/VmRSS/ {print $2}' "/proc/$gw_pid/status")

field() { sed -n "s/.*$2=\([0-9.]*\).*/\1/p" <<<"$1"; }
printf '%-10s %10s %10s %10s\n' target req/s p50_ms p99_ms
for name in direct gateway nginx; do
  line=${!name}
  printf '%-10s %10s %10s %10s\n' "$name" "$(field "$line" rps)" "$(field "$line" p50_ms)" "$(field "$line" p99_ms)"
done
python3 - "$direct" "$gateway" "$nginx" <<'PY'
import re, sys
d, g, n = ({k: float(v) for k, v in re.findall(r"(\w+)=([0-9.]+)", s)} for s in sys.argv[1:])
print(f"gateway/nginx req/s ratio: {g['rps']/n['rps']:.2f}")
print(f"added p99 latency: gateway {g['p99_ms']-d['p99_ms']:.3f} ms, nginx {n['p99_ms']-d['p99_ms']:.3f} ms")
print(f"added p50 latency: gateway {g['p50_ms']-d['p50_ms']:.3f} ms, nginx {n['p50_ms']-d['p50_ms']:.3f} ms")
PY
echo "gateway RSS: idle ${rss_idle} KiB, after load ${rss_after} KiB"
