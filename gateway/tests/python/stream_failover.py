"""Kill the engine serving a stream mid-answer, with the official OpenAI SDK as the client.

Usage: stream_failover.py CONFIG_JSON

CONFIG_JSON (one argument) holds:
  base       the gateway's base URL
  on, off    a model with stream failover and one without (same engines)
  engines    [{"name", "port", "argv"}]: the engines behind both models;
             this script starts them, kills the one serving a stream
             (SIGKILL) after a random number of text chunks, and starts it
             again on the same port once the stream is over
  streams    how many streams on `on`
  apis       the APIs the streams take turns in (default chat, completions)
  usage      whether streams ask for their usage (two in three do; default true)
  off_streams  how many streams on `off`
  seed       seed of the kill points
  max_tokens optional output limit of every second request
  compare    whether answers must equal the uninterrupted ones
             (deterministic engines)

For each stream on `on`, the uninterrupted answer is asked first (a
stream nobody kills), then the same request again with a kill. Prints one
JSON object: streams completed, answers identical to the uninterrupted ones,
the problems found (one line each), the seconds from the kill to the next
text chunk, and how the streams on `off` ended. Exits 3 when the SDK is
missing.
"""

import json
import random
import signal
import subprocess
import sys
import time
import urllib.request

try:
    import openai
except ImportError as error:  # pragma: no cover - reported to the Rust test
    print(f"cannot import the SDK: {error}", file=sys.stderr)
    sys.exit(3)


class Engines:
    def __init__(self, specs):
        self.specs = {spec["name"]: spec for spec in specs}
        self.procs = {}
        for name in self.specs:
            self.start(name)
        for name in self.specs:
            self.wait(name)

    def start(self, name):
        self.procs[name] = subprocess.Popen(
            self.specs[name]["argv"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def wait(self, name, limit=300):
        port = self.specs[name]["port"]
        deadline = time.monotonic() + limit
        health = self.specs[name].get("health", "/health")
        while time.monotonic() < deadline:
            try:
                url = f"http://127.0.0.1:{port}{health}"
                with urllib.request.urlopen(url, timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"engine {name} did not come up on port {port}")

    def kill(self, name):
        proc = self.procs[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def restart(self, name):
        if self.procs[name].poll() is not None:
            self.start(name)
            self.wait(name)

    def stop(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def served_by(headers, engines):
    """The engine that answers: the simulator names itself, else the route header."""
    name = headers.get("x-served-by", "")
    if name in engines.specs:
        return name
    route = headers.get("x-flexinfer-route", "")
    for spec in engines.specs.values():
        if f"127.0.0.1:{spec['port']}" in route:
            return spec["name"]
    return None


def request(api, model, i, max_tokens, usage):
    args = {"model": model, "stream": True, "temperature": 0}
    if max_tokens:
        args["max_tokens"] = max_tokens
    if usage:
        args["stream_options"] = {"include_usage": True}
    if api == "chat":
        args["messages"] = [{"role": "user", "content": f"Tell me story number {i}."}]
    else:
        args["prompt"] = f"Story number {i}:"
    return args


def text_of(api, chunk):
    if not chunk.choices:
        return ""
    choice = chunk.choices[0]
    if api == "chat":
        return choice.delta.content or ""
    return choice.text or ""


def run(client, engines, api, args, kill_after=None):
    """Streams one answer; kills its engine after `kill_after` text chunks."""
    create = client.chat.completions if api == "chat" else client.completions
    seen = {"text": "", "ids": set(), "created": set(), "roles": 0, "finishes": 0,
            "usage": [], "chunks": 0, "texts": 0, "resumed_after_s": None, "engine": None}
    killed_at = None
    with create.with_streaming_response.create(**args) as response:
        seen["engine"] = served_by(response.headers, engines)
        for chunk in response.parse():
            seen["chunks"] += 1
            seen["ids"].add(chunk.id)
            seen["created"].add(chunk.created)
            if chunk.usage is not None:
                seen["usage"].append(chunk.usage.model_dump())
            if chunk.choices:
                choice = chunk.choices[0]
                if api == "chat" and choice.delta.role:
                    seen["roles"] += 1
                if choice.finish_reason:
                    seen["finishes"] += 1
            piece = text_of(api, chunk)
            if piece:
                if killed_at is not None and seen["resumed_after_s"] is None:
                    seen["resumed_after_s"] = time.monotonic() - killed_at
                seen["text"] += piece
                seen["texts"] += 1
                if kill_after is not None and killed_at is None and seen["texts"] >= kill_after:
                    engines.kill(seen["engine"])
                    killed_at = time.monotonic()
    seen["killed"] = killed_at is not None
    return seen


def main():
    config = json.loads(sys.argv[1])
    rng = random.Random(config.get("seed", 1))
    client = openai.OpenAI(base_url=f"{config['base']}/v1", api_key="unused",
                           max_retries=0, timeout=600)
    engines = Engines(config["engines"])
    out = {"streams": 0, "completed": 0, "identical": 0, "killed": 0, "problems": [],
           "resumed_after_s": [], "off": []}
    try:
        for i in range(config["streams"]):
            apis = config.get("apis", ["chat", "completions"])
            api = apis[i % len(apis)]
            max_tokens = config.get("max_tokens") if i % 4 < 2 else None
            usage = config.get("usage", True) and i % 3 != 2
            args = request(api, config["on"], i, max_tokens, usage)
            reference = run(client, engines, api, args)
            # A kill point among the answer's text chunks, a few before the
            # last: an engine killed after its last chunk has finished.
            kill_after = rng.randint(1, max(1, reference["texts"] - 3))
            out["streams"] += 1
            try:
                got = run(client, engines, api, args, kill_after)
            except Exception as error:  # noqa: BLE001 - any failure is the finding
                out["problems"].append(f"stream {i} ({api}): {type(error).__name__}: {error}")
                for name in engines.specs:
                    engines.restart(name)
                continue
            problems = []
            if len(got["ids"]) != 1 or len(got["created"]) != 1:
                problems.append(f"ids {got['ids']} created {got['created']}")
            if api == "chat" and got["roles"] != 1:
                problems.append(f"{got['roles']} role chunks")
            if got["finishes"] != 1:
                problems.append(f"{got['finishes']} finish reasons")
            if "stream_options" in args:
                if len(got["usage"]) != 1:
                    problems.append(f"usage chunks {got['usage']}")
                elif config.get("compare") and got["killed"]:
                    usage, ref = got["usage"][0], reference["usage"][0]
                    if usage["completion_tokens"] != ref["completion_tokens"]:
                        problems.append(f"usage {usage} against uninterrupted {ref}")
                    if usage["prompt_tokens"] <= ref["prompt_tokens"]:
                        problems.append(f"usage {usage} counts one prefill ({ref})")
            if got["killed"]:
                out["killed"] += 1
                if got["resumed_after_s"] is not None:
                    out["resumed_after_s"].append(got["resumed_after_s"])
            if problems:
                out["problems"].append(f"stream {i} ({api}): " + "; ".join(problems))
            else:
                out["completed"] += 1
            if got["text"] == reference["text"]:
                out["identical"] += 1
            elif config.get("compare"):
                out["problems"].append(
                    f"stream {i} ({api}) text differs: {got['text']!r} vs {reference['text']!r}")
            for name in engines.specs:
                engines.restart(name)
        for i in range(config.get("off_streams", 0)):
            apis = config.get("apis", ["chat", "completions"])
            api = apis[i % len(apis)]
            args = request(api, config["off"], 1000 + i, config.get("max_tokens"),
                           config.get("usage", True))
            try:
                got = run(client, engines, api, args, kill_after=3)
                out["off"].append({"completed": True, "killed": got["killed"],
                                   "text": got["text"]})
            except Exception as error:  # noqa: BLE001 - the expected outcome
                out["off"].append({"completed": False, "error": type(error).__name__})
            for name in engines.specs:
                engines.restart(name)
    finally:
        engines.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
