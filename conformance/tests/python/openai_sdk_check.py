"""Drive a flexinfer-sim server with the official OpenAI Python SDK.

Usage: openai_sdk_check.py BASE_URL MODEL

Prints one JSON object with what the SDK saw (models, a chat completion, a
streamed chat completion with chunk arrival times, text completion,
embeddings). Exits 3 with a message on stderr when the `openai` package is
missing, so the caller can fail with a clear reason.
"""

import json
import sys
import time

try:
    import openai
except ImportError as error:  # pragma: no cover - reported to the Rust test
    print(f"cannot import openai: {error}", file=sys.stderr)
    sys.exit(3)


def main() -> None:
    base_url, model = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="not-needed", max_retries=0, timeout=30)
    result = {"sdk_version": openai.__version__}

    result["models"] = [m.id for m in client.models.list()]

    chat = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Say something nice."}],
        max_tokens=6,
    )
    result["chat"] = {
        "id": chat.id,
        "object": chat.object,
        "model": chat.model,
        "content": chat.choices[0].message.content,
        "role": chat.choices[0].message.role,
        "finish_reason": chat.choices[0].finish_reason,
        "usage": chat.usage.model_dump() if chat.usage else None,
    }

    started = time.monotonic()
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Count slowly."}],
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    )
    arrivals, pieces, finish_reason, usage, roles = [], [], None, None, []
    for chunk in stream:
        now = time.monotonic() - started
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        for choice in chunk.choices:
            if choice.delta.role:
                roles.append(choice.delta.role)
            if choice.delta.content:
                arrivals.append(now)
                pieces.append(choice.delta.content)
            if choice.finish_reason:
                finish_reason = choice.finish_reason
    result["stream"] = {
        "arrivals": arrivals,
        "content": "".join(pieces),
        "roles": roles,
        "finish_reason": finish_reason,
        "usage": usage,
    }

    completion = client.completions.create(model=model, prompt="Once upon a time", max_tokens=3)
    result["completion"] = {
        "object": completion.object,
        "text": completion.choices[0].text,
        "usage": completion.usage.model_dump() if completion.usage else None,
    }

    # The SDK asks for base64 by default and decodes it itself.
    embeddings = client.embeddings.create(model=model, input=["hello world", "second input"])
    result["embeddings"] = {
        "count": len(embeddings.data),
        "vectors": [item.embedding for item in embeddings.data],
        "usage": embeddings.usage.model_dump(),
    }

    try:
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
        result["unknown_model"] = None
    except openai.NotFoundError as error:
        result["unknown_model"] = {"status": error.status_code, "message": str(error)}

    print(json.dumps(result))


if __name__ == "__main__":
    main()
