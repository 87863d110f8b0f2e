#!/usr/bin/env python3
"""Memory of flexinfer-gateway under many streams, idle connections and
slow clients, on loopback.

Against one `flexinfer-sim` that streams slowly, it prints the gateway's
resident memory (VmRSS):
  idle            after start and one request
  streams         with --streams concurrent SSE answers in flight
  after           --settle seconds after they all ended (with a readiness
                  probe every second, as a kubelet sends)
  keep-alive      with --idle idle keep-alive connections open (per connection)
  slow clients    with --slow clients each holding a partial request header

  benchmark/proxy/memory.py [--streams 1000] [--settle 30] [--idle 1000] [--slow 200]

Builds release binaries of flexinfer-gateway and flexinfer-sim on start.
Raise the open-file limit first for large counts (`ulimit -n 65536`).
"""

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compare import free_port, wait_port

ROOT = Path(__file__).resolve().parents[2]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def chat(model: str, stream: bool, max_tokens: int) -> bytes:
    body = json.dumps(
        {"model": model, "messages": [{"role": "user", "content": "hello"}],
         "max_tokens": max_tokens, "stream": stream}
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


async def stream_once(port: int, started: asyncio.Event, counter: list, request: bytes):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    first = True
    while True:
        data = await reader.read(65536)
        if not data:
            break
        if first:
            first = False
            counter[0] += 1
            if counter[0] == counter[1]:
                started.set()
        if b"[DONE]" in data:
            break
    writer.close()


async def probe(port: int):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    await writer.drain()
    await reader.read()
    writer.close()


async def hold_idle(port: int, n: int, request: bytes):
    conns = []
    for _ in range(n):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")
        )
        await reader.readexactly(length)
        conns.append(writer)
    return conns


async def hold_slow(port: int, n: int, header_bytes: int):
    conns = []
    for _ in range(n):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * header_bytes)
        await writer.drain()
        conns.append(writer)
    return conns


async def main_async(args, gw_pid: int, port: int):
    model = "m"
    # Idle: after one request.
    await hold_idle(port, 1, chat(model, False, 4))
    await asyncio.sleep(1)
    figures = {"idle": rss_mib(gw_pid)}

    started = asyncio.Event()
    counter = [0, args.streams]
    request = chat(model, True, args.stream_tokens)
    tasks = [asyncio.create_task(stream_once(port, started, counter, request))
             for _ in range(args.streams)]
    await asyncio.wait_for(started.wait(), timeout=120)
    await asyncio.sleep(1)
    figures["streams"] = rss_mib(gw_pid)
    await asyncio.gather(*tasks)
    # What a deployed gateway sees when no client sends anything: a
    # readiness probe and a metrics scrape now and then.
    for _ in range(int(args.settle)):
        await probe(port)
        await asyncio.sleep(1)
    figures["after"] = rss_mib(gw_pid)
    figures["after_open_fds"] = len(os.listdir(f"/proc/{gw_pid}/fd"))
    if os.environ.get("MEMORY_SMAPS"):
        print(Path(f"/proc/{gw_pid}/smaps_rollup").read_text())

    before = rss_mib(gw_pid)
    idle = await hold_idle(port, args.idle, chat(model, False, 4))
    await asyncio.sleep(1)
    figures["keepalive_per_conn_kib"] = (rss_mib(gw_pid) - before) * 1024 / max(1, args.idle)
    for w in idle:
        w.close()
    await asyncio.sleep(2)

    before = rss_mib(gw_pid)
    slow = await hold_slow(port, args.slow, args.slow_header_bytes)
    await asyncio.sleep(1)
    figures["slow_clients_mib"] = rss_mib(gw_pid) - before
    for w in slow:
        w.close()
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", type=int, default=1000)
    p.add_argument("--stream-tokens", type=int, default=40, help="tokens per streamed answer")
    p.add_argument("--tokens-per-second", type=float, default=8.0)
    p.add_argument("--settle", type=float, default=30.0)
    p.add_argument("--idle", type=int, default=1000)
    p.add_argument("--slow", type=int, default=200)
    p.add_argument("--slow-header-bytes", type=int, default=30 * 1024)
    p.add_argument("--gateway-flag", action="append", default=[], help="extra gateway flag (repeatable)")
    p.add_argument("--gateway-binary", help="measure this gateway binary instead of building one")
    args = p.parse_args()

    if not args.gateway_binary:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "flexinfer-gateway", "-p",
                        "flexinfer-conformance"], cwd=ROOT, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release"
    gateway = args.gateway_binary or str(target / "flexinfer-gateway")
    sim_port, gw_port = free_port(), free_port()
    work = Path(tempfile.mkdtemp())
    procs = []
    try:
        procs.append(subprocess.Popen(
            [str(target / "flexinfer-sim"), "--port", str(sim_port), "--model", "m",
             "--tokens-per-second", str(args.tokens_per_second), "--recorder-capacity", "0",
             "--max-model-len", "100000000"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        (work / "models.yaml").write_text(
            f"models:\n- name: m\n  endpoints: [\"http://127.0.0.1:{sim_port}\"]\n")
        gw = subprocess.Popen(
            [gateway, "--config", str(work / "models.yaml"),
             "--listen", f"127.0.0.1:{gw_port}", "--threads", "2",
             "--client-header-timeout", "120s", *args.gateway_flag],
            env={**os.environ, "RUST_LOG": "warn"},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(gw)
        wait_port(sim_port, "flexinfer-sim")
        wait_port(gw_port, "flexinfer-gateway")
        figures = asyncio.run(main_async(args, gw.pid, gw_port))
        print(f"RSS idle:                         {figures['idle']:.1f} MiB")
        print(f"RSS with {args.streams} streams in flight:   {figures['streams']:.1f} MiB")
        print(f"RSS {args.settle:.0f} s after they ended:         {figures['after']:.1f} MiB "
              f"({figures['after'] / figures['idle']:.2f}x idle, {figures['after_open_fds']} open fds)")
        print(f"per idle keep-alive connection:   {figures['keepalive_per_conn_kib']:.1f} KiB")
        print(f"{args.slow} slow clients ({args.slow_header_bytes // 1024} KiB of header each): "
              f"{figures['slow_clients_mib']:.1f} MiB")
        print(json.dumps(figures))
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)


if __name__ == "__main__":
    main()
