#!/usr/bin/env python3
"""User-space instructions a proxy executes per request and per streamed
answer, counted by valgrind's callgrind: FlexInfer beside the Pingora
floors.

CPU time on a shared machine moves by 5-10 % between runs (compare.py
reports it); an instruction count does not, so a change of 1 % shows. It
leaves out the kernel's share (the reads, writes and wakeups, half or more
of a proxy's CPU) and cache misses: it measures the proxy's own work, not
its whole cost. For each target a proxy runs under callgrind (one worker)
in front of `flexinfer-sim`; after a warm-up the counters are zeroed, the
requests are sent one at a time on one keep-alive connection, and the
counters are dumped:

  1 KiB request     a 1 KiB chat body answered with a short JSON answer
  128-token stream  a streamed chat answer of 128 tokens, from a simulator
                    streaming 2,000 tokens/s

  benchmark/proxy/instructions.py [--targets flexinfer,flexinfer-tenants,pingora,pingora-configured]
      [--requests 2000] [--streams 100] [--top 0] [--no-build] [--base-gateway-bin PATH]

Targets: flexinfer, flexinfer-tenants (an API-key file with budgets),
flexinfer-base (--base-gateway-bin, set up as flexinfer), pingora (the
floor: no logic, Pingora's defaults, the system allocator) and
pingora-configured (the floor with the gateway's allocator and upstream
timeouts). --top N prints each target's N costliest functions (own
instructions per request). Needs valgrind (Debian: valgrind) and release
builds (made on start unless --no-build).
"""

import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compare import FLOORS, ROOT, free_port, start, wait_port

SERVED = "bench-backend"
KEYS = ("tenants:\n  - name: bench\n    keys: [bench-key]\n    models: [bench]\n"
        "    limits: {requestsPerSecond: 1000000000, tokensPerMinute: 1000000000000}\n")


def chat(model: str, stream: bool) -> str:
    if stream:
        return json.dumps({"model": model, "messages": [{"role": "user", "content": "Say hello."}],
                           "max_tokens": 128, "stream": True})
    return json.dumps({"model": model, "messages": [{"role": "user", "content": "Say hello. " + "x" * 904}],
                       "max_tokens": 16}, separators=(",", ":"))


def send(port: int, body: str, count: int) -> None:
    """`count` requests one at a time on one connection, each read whole."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    headers = {"Content-Type": "application/json", "Authorization": "Bearer bench-key"}
    for _ in range(count):
        conn.request("POST", "/v1/chat/completions", body, headers)
        answer = conn.getresponse()
        answer.read()
        if answer.status != 200:
            sys.exit(f"a request through port {port} got {answer.status}")
    conn.close()


def warm_up(port: int, body: str, count: int, limit: float = 120.0) -> None:
    """`count` requests once the proxy answers: under valgrind a proxy
    listens well before it serves."""
    deadline = time.monotonic() + limit
    while True:
        try:
            send(port, body, 1)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    send(port, body, count)


def total_instructions(dump: Path) -> int:
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith("totals:") or line.startswith("summary:"):
            return int(line.split()[1])
    sys.exit(f"no totals in {dump}")


def top_functions(dump: Path, count: int, per: int) -> list:
    """The `count` functions with the most own instructions, per request
    (thread entry points, which callgrind charges with their callees when
    it cannot unwind, are left out)."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--auto=no", "--threshold=100",
                          str(dump)], capture_output=True, text=True).stdout
    rows, total = [], total_instructions(dump)
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\(\s*([\d.]+)%\)\s+(?:\S*?:)?(.+?)(?:\s+\[.*\])?$", line)
        if m and "PROGRAM TOTALS" not in line and float(m.group(2)) < 40:
            rows.append((int(m.group(1).replace(",", "")) / per, m.group(3)[:110]))
    return sorted(rows, reverse=True)[:count] if total else []


def measure(cmd: list, port: int, body: str, count: int, work: Path, name: str, top: int):
    """Runs `cmd` under callgrind and counts the instructions of `count`
    requests with `body`."""
    dumps = work / name
    dumps.mkdir()
    proc = start(["valgrind", "--tool=callgrind", f"--callgrind-out-file={dumps}/out.%p", *cmd],
                 env={"RUST_LOG": "error"})
    try:
        wait_port(port, name, limit=120)
        warm_up(port, body, max(10, count // 10))
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], capture_output=True, check=True)
        send(port, body, count)
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], capture_output=True, check=True)
        deadline = time.monotonic() + 30
        while not (found := sorted(dumps.glob("out.*.*"))) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait()
    if not found:
        sys.exit(f"callgrind wrote no dump for {name}")
    per = total_instructions(found[-1]) / count
    return per, (top_functions(found[-1], top, count) if top else [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", default="flexinfer,flexinfer-tenants,pingora,pingora-configured")
    parser.add_argument("--requests", type=int, default=2000, help="1 KiB requests counted (default 2000)")
    parser.add_argument("--streams", type=int, default=100, help="128-token answers counted (default 100)")
    parser.add_argument("--top", type=int, default=0, help="print each target's N costliest functions")
    parser.add_argument("--base-gateway-bin", default=None, help="another build, as target flexinfer-base")
    parser.add_argument("--no-build", action="store_true", help="use existing release binaries")
    args = parser.parse_args()
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate"):
        if not shutil.which(tool):
            sys.exit(f"missing {tool}: apt-get install valgrind")
    if not args.no_build:
        examples = [a for name in FLOORS.values() for a in ("--example", name)]
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "flexinfer-gateway", "-p",
                        "flexinfer-conformance", *examples], cwd=ROOT, check=True)
    bins = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release"
    work = Path(tempfile.mkdtemp(prefix="flexinfer-instructions-"))
    (work / "keys.yaml").write_text(KEYS)
    sims = {}
    for shape, pace in (("request", ()), ("stream", ("--tokens-per-second", "2000"))):
        port = free_port()
        sims[shape] = (port, start([str(bins / "flexinfer-sim"), "--port", str(port), "--model", SERVED,
                                    "--recorder-capacity", "0", *pace]))
    try:
        for port, _ in sims.values():
            wait_port(port, "flexinfer-sim")
        rows = []
        for name in args.targets.split(","):
            figures = []
            for shape, count in (("request", args.requests), ("stream", args.streams)):
                upstream, port = sims[shape][0], free_port()
                if name in FLOORS:
                    cmd = [str(bins / "examples" / FLOORS[name]), f"127.0.0.1:{port}",
                           f"127.0.0.1:{upstream}", "1"]
                    model = SERVED
                else:
                    models = work / f"models-{shape}.yaml"
                    models.write_text(f"models:\n  - name: bench\n    backendModel: {SERVED}\n"
                                      f"    endpoints: ['http://127.0.0.1:{upstream}']\n")
                    binary = bins / "flexinfer-gateway"
                    if name.startswith("flexinfer-base"):
                        if not args.base_gateway_bin:
                            sys.exit("target flexinfer-base needs --base-gateway-bin")
                        binary = Path(args.base_gateway_bin)
                    extra = ["--api-key-file", str(work / "keys.yaml")] if name.endswith("tenants") else []
                    cmd = [str(binary), "--config", str(models), "--listen", f"127.0.0.1:{port}",
                           "--metrics-listen", f"127.0.0.1:{free_port()}", "--threads", "1", *extra]
                    model = "bench"
                per, top = measure(cmd, port, chat(model, shape == "stream"), count, work,
                                   f"{name}-{shape}", args.top)
                figures.append(per)
                for instructions, function in top:
                    print(f"  {name} {shape}: {instructions:10.0f}  {function}")
            rows.append((name, *figures))
            print(f"{name}: {figures[0]:,.0f} instructions per 1 KiB request, "
                  f"{figures[1]:,.0f} per 128-token stream", flush=True)
        floor = next((r for r in rows if r[0] == "pingora"), None)
        print("\n| target | 1 KiB request | 128-token stream | ÷ floor (request, stream) |")
        print("|---|---|---|---|")
        for name, request, stream in rows:
            ratio = f"{request / floor[1]:.2f}, {stream / floor[2]:.2f}" if floor else "—"
            print(f"| {name} | {request:,.0f} | {stream:,.0f} | {ratio} |")
    finally:
        for _, proc in sims.values():
            os.killpg(proc.pid, 15)


if __name__ == "__main__":
    main()
