#!/usr/bin/env python3
"""Side-by-side proxy benchmark on loopback.

Against one fast `flexinfer-sim` backend it measures, in one run:
  direct          no proxy
  flexinfer       flexinfer-gateway (model read from the JSON body, rewritten;
                  errors only in the log)
  flexinfer-log   the same at its default log level (an access-log line per
                  request, written to a file)
  flexinfer-tenants  the same with an API-key file: every request names a
                  tenant by its key and passes its model list and its
                  requests/s and tokens/min budgets (charged and corrected)
  flexinfer-usage the same with --usage-headers: each answer held whole for
                  its X-Flexinfer-Prompt-Tokens and other usage headers
  flexinfer-validate  the same with --validate-requests true (every body
                  checked against the API's schema rules)
  flexinfer-cache-aware  a model with `routing: cache-aware` on a gateway
                  peered with a second replica (each pick published to it)
  flexinfer-base  flexinfer-gateway of --base-gateway-bin (another build, e.g. an
                  earlier commit), set up as `flexinfer`: before/after in one run
  flexinfer-base-tenants  the same build set up as `flexinfer-tenants`
  pingora         the floor: a Pingora proxy with no logic (one upstream,
                  bodies passed through unread; gateway/examples/pingora_floor.rs)
  pingora-configured  the same floor set up as the gateway is: its allocator
                  (mimalloc) and its default upstream timeouts (Pingora arms
                  the read timeout again at each read that waits); what
                  FlexInfer spends beyond it is its logic
  nginx           nginx as a reverse proxy (keep-alive upstream, no buffering)
  haproxy         HAProxy in HTTP mode (keep-alive upstream)
  litellm         LiteLLM proxy, when `litellm` is importable (--litellm-python)

For each: requests/s at a fixed concurrency with 1 KiB, 32 KiB and 1 MiB
JSON chat bodies, p50/p99 latency and the latency added over
direct, CPU seconds per 1,000 requests and peak RSS of the proxy process
(from /proc), and for streamed answers the time to the first byte and the
median gap between chunks compared with direct, and the CPU a proxy spends
per streamed answer of 128 tokens (--sse-streams answers, --sse-concurrency
at a time, from a simulator that streams 2,000 tokens/s: the cost of
passing tokens, not of waiting for them). The same bodies are also
sent one request at a time: the latency a proxy adds when nothing queues
(under load, added latency is mostly the proxy's CPU taken from the backend
and the load generator on a shared machine). Rounds go round the targets in
turn, so that a machine whose speed drifts during the run favours none.
Ratios against direct make figures from noisy machines comparable.

Output: a Markdown table on stdout, FlexInfer's ratios to the Pingora floor
and to nginx, and JSON and a PNG plot in --out.

  benchmark/proxy/compare.py [--duration 8] [--rounds 3] [--connections 32] [--out DIR]

Needs wrk, nginx and haproxy (Debian: wrk nginx-light haproxy) and release
builds of flexinfer-gateway and flexinfer-sim (built on start).
"""

import argparse
import http.client
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The floor targets and the example each runs.
FLOORS = {"pingora": "pingora_floor", "pingora-configured": "pingora_floor_configured"}

SIZES = (("small", 1024), ("medium", 32 * 1024), ("large", 1024 * 1024))
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"{what} did not listen on {port} within {limit:.0f} s")


def proc_cpu_seconds(pids) -> float:
    """CPU time of the processes: the nanosecond run time of each of their
    threads (`/proc/PID/task/*/schedstat`), or user + system clock ticks
    (10 ms each) where that is not available."""
    total = 0.0
    for pid in pids:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
            total += sum(int((t / "schedstat").read_text().split()[0]) for t in tasks) / 1e9
            continue
        except (OSError, ValueError, IndexError):
            pass
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # utime, stime, cutime, cstime are fields 14-17 (1-based) of the whole line.
        total += sum(int(v) for v in fields[11:15]) / CLOCK_TICKS
    return total


def proc_rss_kib(pids) -> int:
    rss = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1])
        except OSError:
            pass
    return rss


def children(pid: int):
    """`pid` and its descendants (nginx and LiteLLM fork workers)."""
    out = [pid]
    try:
        listed = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    except OSError:
        return out
    for child in listed.split():
        out.extend(children(int(child)))
    return out


class Proxy:
    def __init__(self, name: str, port: int, proc, model: str):
        self.name, self.port, self.proc, self.model = name, port, proc, model

    def pids(self):
        return children(self.proc.pid) if self.proc else []


def start(cmd, env=None, log=None):
    return subprocess.Popen(
        cmd,
        stdout=log or subprocess.DEVNULL,
        stderr=log or subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )


def wrk_script(work: Path, name: str, model: str, body_bytes: int) -> Path:
    """A wrk script posting a chat request of about `body_bytes` for `model`."""
    filler = "x" * max(0, body_bytes - 120)
    body = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "Say hello. " + filler}],
            "max_tokens": 16,
        },
        separators=(",", ":"),
    )
    body_file = work / f"{name}.json"
    body_file.write_text(body)
    script = work / f"{name}.lua"
    script.write_text(
        f"""
wrk.method = "POST"
wrk.path = "/v1/chat/completions"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer bench-key"
local f = io.open("{body_file}", "r")
wrk.body = f:read("*a")
f:close()
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT rps=%.1f p50_ms=%.3f p99_ms=%.3f requests=%d errors=%d\\n",
    summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, summary.requests,
    e.status + e.connect + e.read + e.write + e.timeout))
end
"""
    )
    return script


def run_wrk(port: int, script: Path, duration: int, connections: int) -> dict:
    out = subprocess.run(
        ["wrk", f"-t{min(2, connections)}", f"-c{connections}", f"-d{duration}s", "--latency", "-s", str(script),
         f"http://127.0.0.1:{port}"],
        capture_output=True, text=True, timeout=duration + 60,
    ).stdout
    line = next((l for l in out.splitlines() if l.startswith("RESULT")), "")
    return {k: float(v) for k, v in re.findall(r"(\w+)=([0-9.]+)", line)}


def median_figures(rounds: list[dict]) -> dict:
    """Each figure's median over the rounds that report it."""
    keys = {k for r in rounds for k in r}
    return {k: statistics.median(r[k] for r in rounds if k in r) for k in sorted(keys)}


def sse_samples(port: int, model: str, streams: int) -> tuple[list, list]:
    """Times to first byte and gaps between chunks of `streams` streamed
    answers, one after another on one connection."""
    body = json.dumps(
        {"model": model, "messages": [{"role": "user", "content": "stream"}],
         "max_tokens": 20, "stream": True}
    )
    ttfb, gaps = [], []
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for _ in range(streams):
        started = time.perf_counter()
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        arrivals = []
        while True:
            line = resp.readline()
            if not line:
                break
            if line.startswith(b"data:"):
                arrivals.append(time.perf_counter())
                if b"[DONE]" in line:
                    break
        resp.read()
        if arrivals:
            ttfb.append((arrivals[0] - started) * 1e3)
            gaps.extend((b - a) * 1e3 for a, b in zip(arrivals, arrivals[1:-1]))
    conn.close()
    return ttfb, gaps


def sse_load(port: int, model: str, streams: int, concurrency: int, tokens: int = 128) -> int:
    """Streams `streams` answers of `tokens` tokens, `concurrency` at a
    time, each on its own keep-alive connection; returns the `data:` events
    received."""
    import threading

    body = json.dumps(
        {"model": model, "messages": [{"role": "user", "content": "stream"}],
         "max_tokens": tokens, "stream": True}
    )
    left = [streams]
    events = [0]
    lock = threading.Lock()

    def worker():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while True:
            with lock:
                if left[0] == 0:
                    break
                left[0] -= 1
            # The tenants' target takes the key; the others ignore it.
            conn.request("POST", "/v1/chat/completions", body,
                         {"Content-Type": "application/json", "Authorization": "Bearer bench-key"})
            resp = conn.getresponse()
            got = sum(1 for line in resp if line.startswith(b"data:"))
            if resp.status != 200:
                sys.exit(f"streaming through port {port} answered {resp.status}")
            with lock:
                events[0] += got
        conn.close()

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return events[0]


def nginx_proxy(work: Path, backend: int, model: str, connections: int = 4096) -> Proxy:
    """nginx as a reverse proxy to `backend`, one worker holding up to
    `connections` connections (clients and upstreams together)."""
    port = free_port()
    conf = work / "nginx.conf"
    conf.write_text(f"""
worker_processes 1;
worker_rlimit_nofile {connections + 64};
daemon off;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log warn;
events {{ worker_connections {connections}; }}
http {{
  access_log off;
  client_body_temp_path {work}/body;
  proxy_temp_path {work}/proxy;
  fastcgi_temp_path {work}/fastcgi;
  uwsgi_temp_path {work}/uwsgi;
  scgi_temp_path {work}/scgi;
  client_max_body_size 32m;
  upstream sim {{ server 127.0.0.1:{backend}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port} backlog={min(connections, 16384)};
    location / {{
      proxy_pass http://sim;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 300s;
    }}
  }}
}}
""")
    return Proxy("nginx", port, start(["nginx", "-c", str(conf)]), model)


def haproxy_proxy(work: Path, backend: int, model: str) -> Proxy:
    port = free_port()
    conf = work / "haproxy.cfg"
    conf.write_text(f"""
global
  nbthread 1
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  option http-keep-alive
frontend front
  bind 127.0.0.1:{port}
  default_backend sim
backend sim
  http-reuse always
  server s1 127.0.0.1:{backend}
""")
    return Proxy("haproxy", port, start(["haproxy", "-f", str(conf)]), model)


def litellm_proxy(work: Path, backend: int, python: str, served: str) -> Proxy:
    port = free_port()
    conf = work / "litellm.yaml"
    conf.write_text(f"""
model_list:
  - model_name: bench
    litellm_params:
      model: openai/{served}
      api_base: http://127.0.0.1:{backend}/v1
      api_key: unused
""")
    proc = start(
        [python, "-m", "litellm", "--config", str(conf), "--host", "127.0.0.1", "--port", str(port),
         "--num_workers", "1"],
        env={"LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    return Proxy("litellm", port, proc, "bench")


def floor_ratios(results: dict) -> dict:
    """FlexInfer's figures divided by the Pingora floor's and nginx's."""
    flex = results.get("flexinfer")
    if not flex:
        return {}
    out = {}
    for size_name, _ in SIZES:
        f, r = flex[size_name], {}
        for other in ("pingora", "pingora-configured", "nginx"):
            o = results.get(other, {}).get(size_name)
            if not o:
                continue
            if f.get("cpu_s_per_1k") and o.get("cpu_s_per_1k"):
                r[f"cpu_vs_{other}"] = round(f["cpu_s_per_1k"] / o["cpu_s_per_1k"], 2)
            if f.get("rps") and o.get("rps"):
                r[f"rps_vs_{other}"] = round(f["rps"] / o["rps"], 2)
            r[f"{other}_added_p50_ms"] = o.get("added_p50_ms")
            r[f"{other}_c1_added_p50_ms"] = o.get("c1_added_p50_ms")
        r["added_p50_ms"] = f.get("added_p50_ms")
        r["c1_added_p50_ms"] = f.get("c1_added_p50_ms")
        r["added_p99_ms"] = f.get("added_p99_ms")
        out[size_name] = r
    sse = {name: e["sse"].get("added_ttfb_ms") for name, e in results.items() if "sse" in e}
    if sse:
        out["sse"] = sse
    stream = {}
    for other in ("pingora", "pingora-configured", "nginx"):
        f, o = flex.get("sse128"), results.get(other, {}).get("sse128")
        if f and o and o.get("cpu_ms_per_stream"):
            stream[f"cpu_vs_{other}"] = round(f["cpu_ms_per_stream"] / o["cpu_ms_per_stream"], 2)
    if stream:
        out["sse128"] = stream
    return out


def plot(results: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = list(results)
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, (key, title) in zip(
        axes,
        [("small", "1 KiB bodies: requests/s"), ("large", "1 MiB bodies: requests/s"),
         ("added_p50_ms", "added p50 latency, 1 KiB (ms)")],
    ):
        if key == "added_p50_ms":
            values = [results[n]["small"].get("added_p50_ms", 0) for n in names]
        else:
            values = [results[n][key].get("rps", 0) for n in names]
        ax.bar(names, values, color=["#888", "#2a7", "#37c", "#c73", "#a4c"][: len(names)])
        ax.set_title(title)
        ax.tick_params(axis="x", rotation=20)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=8, help="seconds per wrk run (default 8)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="wrk runs per body size; each figure is their median (default 3)")
    parser.add_argument("--connections", type=int, default=32, help="wrk connections (default 32)")
    parser.add_argument("--streams", type=int, default=60,
                        help="streamed answers per target, spread over the rounds (default 60)")
    parser.add_argument("--sse-streams", type=int, default=400,
                        help="128-token answers per target and round for the CPU per stream (default 400)")
    parser.add_argument("--sse-concurrency", type=int, default=16,
                        help="streams at a time for the CPU per stream (default 16)")
    parser.add_argument("--gateway-threads", type=int, default=1, help="gateway worker threads (default 1, like one nginx worker)")
    parser.add_argument("--litellm-python", default=None, help="Python with litellm[proxy] installed")
    parser.add_argument("--out", default="benchmark-results", help="folder for compare.json and compare.png")
    parser.add_argument("--no-build", action="store_true", help="use existing release binaries")
    parser.add_argument("--base-gateway-bin", default=None,
                        help="another flexinfer-gateway build, measured as target flexinfer-base")
    parser.add_argument("--cargo-profile", default="release",
                        help="cargo profile of every Rust binary measured: release (default) or "
                             "dist, what the container images ship (slower to build)")
    parser.add_argument("--targets", default="direct,flexinfer,flexinfer-log,pingora,nginx,haproxy",
                        help="comma-separated targets to measure (default: all but litellm)")
    args = parser.parse_args()

    for tool in ("wrk", "nginx", "haproxy"):
        if not shutil.which(tool):
            sys.exit(f"missing {tool}: apt-get install wrk nginx-light haproxy")
    if not args.no_build:
        profile = ["--profile", args.cargo_profile]
        subprocess.run(["cargo", "build", *profile, "-q", "-p", "flexinfer-gateway", "-p",
                        "flexinfer-conformance"], cwd=ROOT, check=True)
        examples = [a for name in FLOORS.values() for a in ("--example", name)]
        subprocess.run(["cargo", "build", *profile, "-q", "-p", "flexinfer-gateway", *examples],
                       cwd=ROOT, check=True)
    bins = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / args.cargo_profile
    wanted = set(args.targets.split(","))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="flexinfer-compare-"))
    served = "bench-backend"
    procs = []
    try:
        sim_port = free_port()
        # The 1 MiB body is a prompt of 262,144 tokens (4 bytes each): give the
        # simulator a context window that holds it, or it answers 400.
        sim = start([str(bins / "flexinfer-sim"), "--port", str(sim_port), "--model", served,
                     "--recorder-capacity", "0", "--max-model-len", "100000000"])
        procs.append(sim)
        # A second simulator, paced, for the streaming comparison.
        stream_port = free_port()
        stream_sim = start([str(bins / "flexinfer-sim"), "--port", str(stream_port), "--model", served,
                            "--recorder-capacity", "0", "--ttft", "50ms", "--tokens-per-second", "100"])
        procs.append(stream_sim)
        # A third, streaming fast, for the CPU a proxy spends per token.
        burst_port = free_port()
        burst_sim = start([str(bins / "flexinfer-sim"), "--port", str(burst_port), "--model", served,
                           "--recorder-capacity", "0", "--tokens-per-second", "2000"])
        procs.append(burst_sim)
        wait_port(sim_port, "flexinfer-sim")
        wait_port(stream_port, "flexinfer-sim (paced)")
        wait_port(burst_port, "flexinfer-sim (fast stream)")

        models = work / "models.yaml"
        models.write_text(
            f"models:\n  - name: bench\n    backendModel: {served}\n"
            f"    endpoints: ['http://127.0.0.1:{sim_port}']\n"
            f"  - name: bench-stream\n    backendModel: {served}\n"
            f"    endpoints: ['http://127.0.0.1:{stream_port}']\n"
            f"  - name: bench-burst\n    backendModel: {served}\n"
            f"    endpoints: ['http://127.0.0.1:{burst_port}']\n"
            f"  - name: bench-ca\n    backendModel: {served}\n    routing: cache-aware\n"
            f"    endpoints: ['http://127.0.0.1:{sim_port}']\n"
        )
        def gateway(log_level: str, log_path=None, extra=(), binary=None) -> Proxy:
            port = free_port()
            log = open(log_path, "w") if log_path else None
            proc = start([str(binary or bins / "flexinfer-gateway"), "--config", str(models), "--listen",
                          f"127.0.0.1:{port}", "--metrics-listen", f"127.0.0.1:{free_port()}",
                          "--threads", str(args.gateway_threads), "--max-body-bytes", "33554432",
                          *extra],
                         env={"RUST_LOG": log_level}, log=log)
            return Proxy("flexinfer", port, proc, "bench")

        gw = gateway("error")
        proxies = [Proxy("direct", sim_port, None, served), gw]
        if "flexinfer-log" in wanted:
            logged = gateway("info", work / "access.log")
            logged.name = "flexinfer-log"
            proxies.append(logged)
        # A tenant whose key, model list and requests/s and tokens/min
        # budgets every request passes.
        keys = work / "keys.yaml"
        keys.write_text(
            "tenants:\n  - name: bench\n    keys: [bench-key]\n    models: [bench, bench-stream, bench-burst]\n"
            "    limits: {requestsPerSecond: 1000000000, tokensPerMinute: 1000000000000}\n"
        )
        if "flexinfer-tenants" in wanted:
            tenants = gateway("error", extra=("--api-key-file", str(keys)))
            tenants.name = "flexinfer-tenants"
            proxies.append(tenants)
        for name, extra in (("flexinfer-base", ()), ("flexinfer-base-tenants", ("--api-key-file", str(keys)))):
            if name not in wanted:
                continue
            if not args.base_gateway_bin:
                sys.exit(f"target {name} needs --base-gateway-bin")
            base = gateway("error", extra=extra, binary=args.base_gateway_bin)
            base.name = name
            proxies.append(base)
        if "flexinfer-usage" in wanted:
            usage = gateway("error", extra=("--usage-headers", "true"))
            usage.name = "flexinfer-usage"
            proxies.append(usage)
        if "flexinfer-validate" in wanted:
            validating = gateway("error", extra=("--validate-requests", "true"))
            validating.name = "flexinfer-validate"
            proxies.append(validating)
        if "flexinfer-cache-aware" in wanted:
            # Two replicas sharing routing state; the first is measured.
            peer_ports = (free_port(), free_port())
            replicas = []
            for me, other in (peer_ports, peer_ports[::-1]):
                replicas.append(gateway("error", extra=(
                    "--routing-peer-listen", f"127.0.0.1:{me}",
                    "--routing-peers", f"127.0.0.1:{other}",
                    "--routing-peer-secret", "benchmark-replicas-share-this")))
            cache_aware, second = replicas
            cache_aware.name, cache_aware.model = "flexinfer-cache-aware", "bench-ca"
            procs.append(second.proc)
            wait_port(second.port, "second replica", limit=120)
            proxies.append(cache_aware)
        def floor(name: str, upstream: int) -> Proxy:
            port = free_port()
            proc = start([str(bins / "examples" / FLOORS[name]), f"127.0.0.1:{port}",
                          f"127.0.0.1:{upstream}", str(args.gateway_threads)])
            return Proxy(name, port, proc, served)

        floors = [name for name in FLOORS if name in wanted]
        proxies.extend(floor(name, sim_port) for name in floors)
        if "nginx" in wanted:
            proxies.append(nginx_proxy(work, sim_port, served))
        if "haproxy" in wanted:
            proxies.append(haproxy_proxy(work, sim_port, served))
        if args.litellm_python:
            proxies.append(litellm_proxy(work, sim_port, args.litellm_python, served))
        proxies = [p for p in proxies if p.name in wanted or p.name == "direct"
                   or (p.name == "litellm" and args.litellm_python)]
        for p in proxies:
            if p.proc:
                procs.append(p.proc)
            wait_port(p.port, p.name, limit=120)
        time.sleep(0.5)

        # Streaming goes through the same proxies to the paced simulator.
        stream_targets = {"direct": (stream_port, served), "flexinfer": (gw.port, "bench-stream")}
        (work / "s").mkdir()
        if "nginx" in wanted:
            nginx_s = nginx_proxy(work / "s", stream_port, served)
            procs.append(nginx_s.proc)
            wait_port(nginx_s.port, "nginx (stream)")
            stream_targets["nginx"] = (nginx_s.port, served)
        for name in floors:
            floor_s = floor(name, stream_port)
            procs.append(floor_s.proc)
            wait_port(floor_s.port, f"{name} (stream)")
            stream_targets[name] = (floor_s.port, served)
        if "haproxy" in wanted:
            haproxy_s = haproxy_proxy(work / "s", stream_port, served)
            procs.append(haproxy_s.proc)
            wait_port(haproxy_s.port, "haproxy (stream)")
            stream_targets["haproxy"] = (haproxy_s.port, served)

        # The CPU per 128-token stream: every FlexInfer target in its own
        # process (model bench-burst); the floor and nginx each get one more
        # instance in front of the fast-streaming simulator.
        burst_targets = {p.name: (p.port, "bench-burst", p) for p in proxies
                         if p.name.startswith("flexinfer")}
        for name in floors:
            floor_b = floor(name, burst_port)
            procs.append(floor_b.proc)
            wait_port(floor_b.port, f"{name} (fast stream)")
            burst_targets[name] = (floor_b.port, served, floor_b)
        if "nginx" in wanted:
            (work / "b").mkdir()
            nginx_b = nginx_proxy(work / "b", burst_port, served)
            procs.append(nginx_b.proc)
            wait_port(nginx_b.port, "nginx (fast stream)")
            burst_targets["nginx"] = (nginx_b.port, served, nginx_b)
        sse_cpu = {name: [] for name in burst_targets}

        # Rounds go round the targets (A, B, C, A, B, C, ...) rather than
        # finishing one target first, so that a machine that speeds up or
        # slows down during the run biases no target.
        scripts = {(p.name, size_name): wrk_script(work, f"{p.name}-{size_name}", p.model, size)
                   for p in proxies for size_name, size in SIZES}

        def conns_for(size_name: str) -> int:
            return args.connections if size_name != "large" else max(4, args.connections // 4)

        for p in proxies:
            for size_name, _ in SIZES:
                run_wrk(p.port, scripts[(p.name, size_name)], 2, conns_for(size_name))  # warm-up
        loaded = {(p.name, s): [] for p in proxies for s, _ in SIZES}
        unloaded = {(p.name, s): [] for p in proxies for s, _ in SIZES}
        ttfbs = {name: [] for name in stream_targets}
        gaps = {name: [] for name in stream_targets}
        per_round = max(1, args.streams // args.rounds)
        for _ in range(args.rounds):
            for p in proxies:
                pids = p.pids()
                for size_name, _ in SIZES:
                    script = scripts[(p.name, size_name)]
                    cpu_before = proc_cpu_seconds(pids)
                    figures = run_wrk(p.port, script, args.duration, conns_for(size_name))
                    cpu = proc_cpu_seconds(pids) - cpu_before
                    requests = figures.get("requests", 0)
                    if p.proc and requests:
                        figures["cpu_s_per_1k"] = round(cpu / requests * 1000, 4)
                    loaded[(p.name, size_name)].append(figures)
                    # The same body one request at a time: the latency the
                    # proxy adds when nothing queues.
                    unloaded[(p.name, size_name)].append(
                        run_wrk(p.port, script, max(1, args.duration // 2), 1))
                if p.name in stream_targets:
                    port, model = stream_targets[p.name]
                    t, g = sse_samples(port, model, per_round)
                    ttfbs[p.name].extend(t)
                    gaps[p.name].extend(g)
                if p.name in burst_targets:
                    port, model, owner = burst_targets[p.name]
                    owner_pids = owner.pids()
                    cpu_before = proc_cpu_seconds(owner_pids)
                    events = sse_load(port, model, args.sse_streams, args.sse_concurrency)
                    cpu = proc_cpu_seconds(owner_pids) - cpu_before
                    sse_cpu[p.name].append({"cpu_ms_per_stream": cpu / args.sse_streams * 1e3,
                                            "events_per_stream": events / args.sse_streams})
        results = {}
        for p in proxies:
            entry = {"pid_count": len(p.pids())}
            for size_name, _ in SIZES:
                figures = median_figures(loaded[(p.name, size_name)])
                figures["rss_kib"] = proc_rss_kib(p.pids()) if p.proc else None
                one = median_figures(unloaded[(p.name, size_name)])
                figures["c1_p50_ms"] = one.get("p50_ms")
                figures["c1_p99_ms"] = one.get("p99_ms")
                entry[size_name] = figures
            if sse_cpu.get(p.name):
                entry["sse128"] = {
                    "cpu_ms_per_stream": round(statistics.median(
                        r["cpu_ms_per_stream"] for r in sse_cpu[p.name]), 4),
                    "events_per_stream": statistics.median(
                        r["events_per_stream"] for r in sse_cpu[p.name]),
                }
            if ttfbs.get(p.name):
                entry["sse"] = {
                    "ttfb_ms": statistics.median(ttfbs[p.name]),
                    "chunk_gap_ms": statistics.median(gaps[p.name]) if gaps[p.name] else None,
                    "streams": len(ttfbs[p.name]),
                }
            results[p.name] = entry

        direct = results["direct"]
        for name, entry in results.items():
            for size_name, _ in SIZES:
                fig, base = entry[size_name], direct[size_name]
                if base.get("rps"):
                    fig["rps_ratio"] = round(fig.get("rps", 0) / base["rps"], 3)
                fig["added_p50_ms"] = round(fig.get("p50_ms", 0) - base.get("p50_ms", 0), 3)
                fig["added_p99_ms"] = round(fig.get("p99_ms", 0) - base.get("p99_ms", 0), 3)
                if fig.get("c1_p50_ms") is not None and base.get("c1_p50_ms") is not None:
                    fig["c1_added_p50_ms"] = round(fig["c1_p50_ms"] - base["c1_p50_ms"], 3)
            if "sse" in entry and direct.get("sse", {}).get("ttfb_ms"):
                entry["sse"]["added_ttfb_ms"] = round(entry["sse"]["ttfb_ms"] - direct["sse"]["ttfb_ms"], 3)

        meta = {"duration_s": args.duration, "connections": args.connections,
                "gateway_threads": args.gateway_threads, "cpus": os.cpu_count()}
        (out / "compare.json").write_text(json.dumps({"settings": meta, "results": results}, indent=2))
        plotted = plot(results, out / "compare.png")

        print(f"\nOn loopback, {args.connections} connections (1 MiB: {max(4, args.connections // 4)}), "
              f"{args.duration} s per run, median of {args.rounds} rounds taken in turn across the targets, "
              f"one worker per proxy, {os.cpu_count()} CPUs; '1 connection' runs send one request at a time. "
              f"SSE: {args.streams} streams per target, taken in turn; CPU per 128-token stream: "
              f"{args.sse_streams} streams per round, {args.sse_concurrency} at a time.\n")
        print("| target | 1 KiB req/s | × direct | p50 / p99 ms | added p50 / p99 ms | CPU s / 1k req | "
              "1 MiB req/s | × direct | added p50 ms | CPU s / 1k req | RSS MiB | SSE TTFB ms | chunk gap ms | "
              "CPU ms / 128-token stream |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for name, e in results.items():
            s, l, sse = e["small"], e["large"], e.get("sse", {})
            rss = max(s.get("rss_kib") or 0, l.get("rss_kib") or 0)

            def f(v, spec=".0f"):
                return "—" if v is None else format(v, spec)

            print(f"| {name} | {f(s.get('rps'))} | {f(s.get('rps_ratio'), '.2f')} | "
                  f"{f(s.get('p50_ms'), '.2f')} / {f(s.get('p99_ms'), '.2f')} | "
                  f"{f(s.get('added_p50_ms'), '.2f')} / {f(s.get('added_p99_ms'), '.2f')} | "
                  f"{f(s.get('cpu_s_per_1k'), '.3f')} | {f(l.get('rps'))} | {f(l.get('rps_ratio'), '.2f')} | "
                  f"{f(l.get('added_p50_ms'), '.2f')} | {f(l.get('cpu_s_per_1k'), '.3f')} | "
                  f"{f(rss / 1024 if rss else None, '.1f')} | {f(sse.get('ttfb_ms'), '.1f')} | "
                  f"{f(sse.get('chunk_gap_ms'), '.1f')} | {f(e.get('sse128', {}).get('cpu_ms_per_stream'), '.3f')} |")
        ratios = floor_ratios(results)
        if ratios:
            print("\nFlexInfer against the Pingora floor and nginx (CPU per request, req/s, added latency):\n")
            print("| body | CPU ÷ pingora | CPU ÷ nginx | req/s ÷ pingora | req/s ÷ nginx | added p50 ms "
                  "(pingora, nginx) | added p99 ms | 1 connection: added p50 ms (pingora, nginx) |")
            print("|---|---|---|---|---|---|---|---|")
            for size_name, r in ratios.items():
                if size_name in ("sse", "sse128"):
                    continue
                print(f"| {size_name} | {r.get('cpu_vs_pingora', '—')} | {r.get('cpu_vs_nginx', '—')} | "
                      f"{r.get('rps_vs_pingora', '—')} | {r.get('rps_vs_nginx', '—')} | "
                      f"{r.get('added_p50_ms')} ({r.get('pingora_added_p50_ms')}, {r.get('nginx_added_p50_ms')}) | "
                      f"{r.get('added_p99_ms')} | {r.get('c1_added_p50_ms')} "
                      f"({r.get('pingora_c1_added_p50_ms')}, {r.get('nginx_c1_added_p50_ms')}) |")
            configured = {k: r.get("cpu_vs_pingora-configured") for k, r in ratios.items() if k != "sse"}
            if any(configured.values()):
                print(f"\nFlexInfer CPU ÷ the floor set up as the gateway is: {configured}")
            if "sse" in ratios:
                print(f"\nSSE time to first byte: {ratios['sse']}")
            if "sse128" in ratios:
                print(f"CPU per 128-token stream, FlexInfer ÷ other: {ratios['sse128']}")
            (out / "compare.json").write_text(json.dumps(
                {"settings": meta, "results": results, "flexinfer_ratios": ratios}, indent=2))
        print(f"\nJSON: {out / 'compare.json'}" + (f"; plot: {out / 'compare.png'}" if plotted else
                                                     " (install matplotlib for the PNG plot)"))
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, 15)
            except OSError:
                pass
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 9)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
