#!/usr/bin/env python3
"""Many concurrent slow streams through one proxy: FlexInfer beside the
Pingora floor and nginx, on loopback.

For each target and each concurrency level, a fresh proxy (one worker
thread) in front of one `flexinfer-sim` that streams slowly holds LEVEL
streamed chat answers open at once, and the script prints:

  per stream    resident memory with every stream open, less idle, per stream
  CPU / chunk   the proxy's CPU time over a window, per streamed event relayed
  added p50/p99 time to the first streamed event of a probe request sent on a
                new connection while the streams are open, through the proxy,
                less the same probe sent straight to the simulator right
                after it (pairs from a process of their own)
  errors        streams that did not end with [DONE] (refused, cut, 5xx)

and the knee: the lowest level where the added p99 passes 1 ms.

  benchmark/proxy/concurrency.py [--levels 1000,2000,4000,8000]
      [--targets flexinfer,pingora,nginx] [--tokens 40] [--tokens-per-second 1]
      [--window 10] [--probes 200] [--no-build] [--out DIR]

A gateway holds two sockets per stream: 8,000 streams need a limit of open
files above 16,000 for the proxy (the script raises its own soft limit to
the hard one; children inherit it). Needs nginx (Debian: nginx-light) and
release builds of flexinfer-gateway, flexinfer-sim and the pingora_floor
example (built on start unless --no-build).
"""

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from compare import (ROOT, children, free_port, nginx_proxy, proc_cpu_seconds, proc_rss_kib, start,
                     wait_port)

MODEL = "bench-backend"


def chat(stream: bool, max_tokens: int) -> bytes:
    body = json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": "hello"}],
         "max_tokens": max_tokens, "stream": stream},
        separators=(",", ":"),
    ).encode()
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
    )


class Tally:
    """What the held streams saw."""

    def __init__(self, n: int):
        self.opened = 0
        self.events = 0
        self.done = 0
        self.errors = 0
        self.all_open = asyncio.Event()
        self.n = n

    def first_event(self):
        self.opened += 1
        if self.opened == self.n:
            self.all_open.set()


async def hold_stream(port: int, request: bytes, tally: Tally):
    """One streamed answer read to its end, counting its events."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        tally.errors += 1
        tally.first_event()
        return
    ok = False
    counted_open = False
    try:
        writer.write(request)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            return
        tail = b""
        while True:
            data = await reader.read(65536)
            if not data:
                break
            events = data.count(b"data:")
            if events and not counted_open:
                counted_open = True
                tally.first_event()
            tally.events += events
            if b"[DONE]" in tail[-16:] + data:
                ok = True
                break
            tail = data
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        pass
    finally:
        if not counted_open:
            tally.first_event()
        if ok:
            tally.done += 1
        else:
            tally.errors += 1
        writer.close()


def probe_ttfb(port: int, request: bytes) -> float | None:
    """Milliseconds from opening a connection and sending a streamed request
    to its first `data:` event (blocking, in the probe process)."""
    started = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
            conn.sendall(request)
            seen = b""
            while b"data:" not in seen:
                data = conn.recv(65536)
                if not data:
                    return None
                seen += data
            return (time.perf_counter() - started) * 1e3
    except OSError:
        return None


def probe_pairs(target_port: int, sim_port: int, probes: int, window: float) -> list:
    """`probes` pairs of probes, through the proxy then straight to the
    simulator, spread over `window` seconds. Runs in a process of its own,
    so that the held streams' event loop does not delay its reads."""
    request = chat(True, 1)
    pause = window / max(1, probes)
    pairs = []
    for _ in range(probes):
        through = probe_ttfb(target_port, request)
        direct = probe_ttfb(sim_port, request)
        if through is not None and direct is not None:
            pairs.append((through, direct))
        time.sleep(pause)
    return pairs


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def measure(target_port: int, sim_port: int, pids, args, level: int) -> dict:
    tally = Tally(level)
    held = chat(True, args.tokens)
    idle_kib = proc_rss_kib(pids)
    tasks = []
    for i in range(level):
        tasks.append(asyncio.create_task(hold_stream(target_port, held, tally)))
        if i % 200 == 199:
            await asyncio.sleep(0.01)
    await asyncio.wait_for(tally.all_open.wait(), timeout=120)
    await asyncio.sleep(1)
    open_kib = proc_rss_kib(pids)
    events_before, cpu_before, t0 = tally.events, proc_cpu_seconds(pids), time.monotonic()
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        pairs = await loop.run_in_executor(pool, probe_pairs, target_port, sim_port, args.probes,
                                           args.window)
    # The window is at least --window seconds of held streams.
    left = args.window - (time.monotonic() - t0)
    if left > 0:
        await asyncio.sleep(left)
    cpu = proc_cpu_seconds(pids) - cpu_before
    events = tally.events - events_before
    still_open = tally.opened - tally.done - tally.errors
    added = [t - d for t, d in pairs]
    await asyncio.gather(*tasks)
    return {
        "level": level,
        "per_stream_kib": (open_kib - idle_kib) / level,
        "idle_mib": idle_kib / 1024,
        "cpu_us_per_chunk": cpu / max(1, events) * 1e6,
        "events_in_window": events,
        "open_in_window": still_open,
        # Each probe through the proxy less the one straight to the
        # simulator sent right after it: what the proxy added, with the
        # machine's jitter of the moment mostly taken out.
        "added_p50_ms": percentile(added, 0.5),
        "added_p99_ms": percentile(added, 0.99),
        "probe_p50_ms": percentile([t for t, _ in pairs], 0.5),
        "probe_p99_ms": percentile([t for t, _ in pairs], 0.99),
        "direct_p50_ms": percentile([d for _, d in pairs], 0.5),
        "direct_p99_ms": percentile([d for _, d in pairs], 0.99),
        "probes": len(pairs),
        "errors": tally.errors,
    }


def launch(name: str, bins: Path, work: Path, sim_port: int, gateway_bin) -> tuple:
    port = free_port()
    if name == "flexinfer":
        models = work / "models.yaml"
        models.write_text(f"models:\n  - name: {MODEL}\n    endpoints: ['http://127.0.0.1:{sim_port}']\n")
        proc = start([str(gateway_bin or bins / "flexinfer-gateway"), "--config", str(models),
                      "--listen", f"127.0.0.1:{port}", "--metrics-listen", f"127.0.0.1:{free_port()}",
                      "--threads", "1", "--client-header-timeout", "120s"],
                     env={"RUST_LOG": "error"})
        return port, proc
    if name == "pingora":
        return port, start([str(bins / "examples" / "pingora_floor"), f"127.0.0.1:{port}",
                            f"127.0.0.1:{sim_port}", "1"])
    if name == "nginx":
        proxy = nginx_proxy(work, sim_port, MODEL, connections=19_900)
        return proxy.port, proxy.proc
    sys.exit(f"unknown target {name}")


def warm(port: int) -> None:
    async def once():
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(chat(True, 2))
        await writer.drain()
        while True:
            data = await reader.read(65536)
            if not data or b"[DONE]" in data:
                break
        writer.close()
    asyncio.run(once())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--levels", default="1000,2000,4000,8000", help="concurrent streams, comma-separated")
    p.add_argument("--targets", default="flexinfer,pingora,nginx")
    p.add_argument("--tokens", type=int, default=40, help="tokens per held stream (default 40)")
    p.add_argument("--tokens-per-second", type=float, default=1.0,
                   help="the simulator's pace per stream (default 1)")
    p.add_argument("--window", type=float, default=10.0, help="seconds CPU and probes are measured over")
    p.add_argument("--probes", type=int, default=200, help="probe requests per window and side")
    p.add_argument("--gateway-binary", help="measure this flexinfer-gateway instead of the release build")
    p.add_argument("--no-build", action="store_true", help="use existing release binaries")
    p.add_argument("--out", default="benchmark-results", help="folder for concurrency.json")
    args = p.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    levels = [int(v) for v in args.levels.split(",")]
    if 2 * max(levels) + 64 > hard:
        print(f"warning: the open-file limit {hard} is below two sockets per stream", file=sys.stderr)
    if not args.no_build:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "flexinfer-gateway", "-p",
                        "flexinfer-conformance"], cwd=ROOT, check=True)
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "flexinfer-gateway", "--example",
                        "pingora_floor"], cwd=ROOT, check=True)
    bins = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="flexinfer-concurrency-"))
    sim_port = free_port()
    sim = start([str(bins / "flexinfer-sim"), "--port", str(sim_port), "--model", MODEL,
                 "--recorder-capacity", "0", "--tokens-per-second", str(args.tokens_per_second)])
    results = []
    try:
        wait_port(sim_port, "flexinfer-sim")
        for name in args.targets.split(","):
            for level in levels:
                port, proc = launch(name, bins, work, sim_port, args.gateway_binary)
                try:
                    wait_port(port, name)
                    warm(port)
                    time.sleep(0.5)
                    figures = asyncio.run(measure(port, sim_port, children(proc.pid), args, level))
                finally:
                    proc.terminate()
                    proc.wait(timeout=30)
                figures["target"] = name
                results.append(figures)
                print(f"{name:>10} {level:>6} streams: {figures['per_stream_kib']:6.1f} KiB/stream, "
                      f"{figures['cpu_us_per_chunk']:6.1f} µs/chunk, added p50 {figures['added_p50_ms']:6.2f} ms "
                      f"p99 {figures['added_p99_ms']:6.2f} ms, {figures['errors']} errors", flush=True)
                time.sleep(1)
    finally:
        sim.terminate()
        sim.wait(timeout=30)

    print("\n| target | streams | KiB per stream | µs CPU per chunk | added p50 ms | added p99 ms "
          "| probe p50 / p99 ms (direct) | errors |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['target']} | {r['level']} | {r['per_stream_kib']:.1f} | {r['cpu_us_per_chunk']:.1f} | "
              f"{r['added_p50_ms']:.2f} | {r['added_p99_ms']:.2f} | {r['probe_p50_ms']:.2f} / "
              f"{r['probe_p99_ms']:.2f} ({r['direct_p50_ms']:.2f} / {r['direct_p99_ms']:.2f}) | "
              f"{r['errors']} |")
    for name in args.targets.split(","):
        over = [r["level"] for r in results if r["target"] == name and r["added_p99_ms"] > 1.0]
        knee = f"added p99 passes 1 ms at {min(over)} streams" if over else \
            f"added p99 stays under 1 ms up to {max(levels)} streams"
        print(f"{name}: {knee}")
    (out / "concurrency.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
