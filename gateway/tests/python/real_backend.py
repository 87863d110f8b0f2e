"""One OpenAI SDK operation against the gateway, for the real-backend lane.

Usage:
  real_backend.py chat BASE_URL MODEL MAX_TOKENS
  real_backend.py stream BASE_URL MODEL MAX_TOKENS
  real_backend.py stream-until-error BASE_URL MODEL MAX_TOKENS SIGNAL_FILE

Prints one JSON object. `chat` reports the answer and its usage; `stream`
the number of content chunks, the text and the finish reason;
`stream-until-error` streams a long completion, creates SIGNAL_FILE after the
first chunk (the caller then kills the backend) and reports how the stream
ended: the exception the SDK raised, or the finish reason if it did not fail.
Exits 3 when the `openai` package is missing.
"""

import json
import pathlib
import sys
import time

try:
    import openai
except ImportError as error:  # pragma: no cover - reported to the Rust test
    print(f"cannot import openai: {error}", file=sys.stderr)
    sys.exit(3)

PROMPT = [{"role": "user", "content": "Name three colours."}]
# A raw continuation that keeps going, for the stream that is cut.
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"


def client(base_url: str) -> "openai.OpenAI":
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=300)


def chat(base_url: str, model: str, max_tokens: int) -> dict:
    started = time.monotonic()
    answer = client(base_url).chat.completions.create(
        model=model, messages=PROMPT, max_tokens=max_tokens, temperature=0
    )
    return {
        "content": answer.choices[0].message.content,
        "finish_reason": answer.choices[0].finish_reason,
        "completion_tokens": answer.usage.completion_tokens if answer.usage else None,
        "seconds": time.monotonic() - started,
    }


def stream(base_url: str, model: str, max_tokens: int) -> dict:
    chunks, text, finish = 0, "", None
    for chunk in client(base_url).chat.completions.create(
        model=model, messages=PROMPT, max_tokens=max_tokens, temperature=0, stream=True
    ):
        for choice in chunk.choices:
            if choice.delta.content:
                chunks += 1
                text += choice.delta.content
            finish = choice.finish_reason or finish
    return {"chunks": chunks, "content": text, "finish_reason": finish}


def stream_until_error(base_url: str, model: str, max_tokens: int, signal: str) -> dict:
    chunks, finish, error = 0, None, None
    try:
        for chunk in client(base_url).completions.create(
            model=model, prompt=COUNTING, max_tokens=max_tokens, temperature=0, stream=True
        ):
            for choice in chunk.choices:
                if choice.text:
                    chunks += 1
                    if chunks == 1:
                        pathlib.Path(signal).touch()
                finish = choice.finish_reason or finish
    except Exception as raised:  # what the SDK user sees
        error = f"{type(raised).__name__}: {raised}"
    return {"chunks": chunks, "finish_reason": finish, "error": error}


def main() -> None:
    action, base_url, model, max_tokens = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if action == "chat":
        result = chat(base_url, model, max_tokens)
    elif action == "stream":
        result = stream(base_url, model, max_tokens)
    elif action == "stream-until-error":
        result = stream_until_error(base_url, model, max_tokens, sys.argv[5])
    else:
        sys.exit(f"unknown action {action}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
