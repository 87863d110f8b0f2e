"""Stream through a proxy that cuts idle connections, with the official SDKs.

Usage: held_stream_sdks.py BASE_URL OPENAI_MODEL ANTHROPIC_MODEL

Sends, at the same time, one streamed chat completion with the `openai` SDK
and one streamed message with the `anthropic` SDK (each model cold, so the
gateway holds the stream while it starts), and prints one JSON object with
what each SDK saw: the text, the number of chunks or events, the seconds
until the first token and in all, or the error it raised (its class, status
and message). Exits 3 with a message on stderr when an SDK is missing.
"""

import json
import sys
import threading
import time

try:
    import anthropic
    import openai
except ImportError as error:  # pragma: no cover - reported to the Rust test
    print(f"cannot import an SDK: {error}", file=sys.stderr)
    sys.exit(3)


def failure(error):
    return {
        "error": type(error).__name__,
        "status": getattr(error, "status_code", None),
        "message": str(error)[:300],
    }


def with_openai(base, model, out):
    start = time.monotonic()
    try:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=300)
        stream = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Tell me about held streams."}],
            max_tokens=16,
            stream=True,
        )
        text, chunks, first = "", 0, None
        for chunk in stream:
            chunks += 1
            if chunk.choices and chunk.choices[0].delta.content:
                first = first or time.monotonic() - start
                text += chunk.choices[0].delta.content
        out["openai"] = {"text": text, "chunks": chunks, "first_token_s": first,
                         "total_s": time.monotonic() - start}
    except Exception as error:  # noqa: BLE001 - the test reads what failed
        out["openai"] = failure(error) | {"total_s": time.monotonic() - start}


def with_anthropic(base, model, out):
    start = time.monotonic()
    try:
        client = anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0, timeout=300)
        text, events, first = "", 0, None
        with client.messages.stream(
            model=model,
            max_tokens=16,
            messages=[{"role": "user", "content": "Tell me about held streams."}],
        ) as stream:
            for event in stream:
                events += 1
                if event.type == "content_block_delta" and event.delta.type == "text_delta":
                    first = first or time.monotonic() - start
                    text += event.delta.text
            final = stream.get_final_message()
        out["anthropic"] = {"text": text, "events": events, "first_token_s": first,
                            "stop_reason": final.stop_reason,
                            "total_s": time.monotonic() - start}
    except Exception as error:  # noqa: BLE001 - the test reads what failed
        out["anthropic"] = failure(error) | {"total_s": time.monotonic() - start}


def main():
    base, openai_model, anthropic_model = sys.argv[1:4]
    out = {}
    threads = [
        threading.Thread(target=with_openai, args=(base, openai_model, out)),
        threading.Thread(target=with_anthropic, args=(base, anthropic_model, out)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
