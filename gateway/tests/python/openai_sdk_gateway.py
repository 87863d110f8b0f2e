"""Drive the FlexInfer gateway with the official OpenAI Python SDK.

Usage: openai_sdk_gateway.py BASE_URL API_KEY MODEL

Prints one JSON object with what the SDK saw: the model listing, a chat
completion, a streamed chat completion with chunk arrival times,
embeddings, a multipart image edit, and the errors the SDK raised for an
unknown model and a wrong API key. Exits 3 with a message on stderr when the
`openai` package is missing, so the caller can fail with a clear reason.
"""

import base64
import json
import sys
import time

try:
    import openai
except ImportError as error:  # pragma: no cover - reported to the Rust test
    print(f"cannot import openai: {error}", file=sys.stderr)
    sys.exit(3)

# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def api_error(error):
    return {
        "status": error.status_code,
        "type": getattr(error, "type", None),
        "code": getattr(error, "code", None),
        "message": error.message,
        "request_id": error.response.headers.get("x-request-id"),
    }


def main() -> None:
    base_url, api_key, model = sys.argv[1], sys.argv[2], sys.argv[3]
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=api_key, max_retries=0, timeout=30)
    result = {"sdk_version": openai.__version__}

    result["models"] = [m.id for m in client.models.list()]
    retrieved = client.models.retrieve(model)
    result["retrieved"] = {"id": retrieved.id, "object": retrieved.object}
    try:
        client.models.retrieve("no-such-model")
        result["retrieve_unknown"] = None
    except openai.NotFoundError as error:
        result["retrieve_unknown"] = api_error(error)

    chat = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Say something nice."}],
        max_tokens=5,
    )
    result["chat"] = {
        "object": chat.object,
        "model": chat.model,
        "content": chat.choices[0].message.content,
        "finish_reason": chat.choices[0].finish_reason,
        "usage": chat.usage.model_dump() if chat.usage else None,
    }

    started = time.monotonic()
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Count slowly."}],
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
    )
    arrivals, pieces, finish_reason, usage = [], [], None, None
    for chunk in stream:
        now = time.monotonic() - started
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        for choice in chunk.choices:
            if choice.delta.content:
                arrivals.append(now)
                pieces.append(choice.delta.content)
            if choice.finish_reason:
                finish_reason = choice.finish_reason
    result["stream"] = {
        "arrivals": arrivals,
        "content": "".join(pieces),
        "finish_reason": finish_reason,
        "usage": usage,
    }

    # The SDK asks for base64 by default and decodes it itself.
    embeddings = client.embeddings.create(model=model, input=["hello world", "second input"])
    result["embeddings"] = {
        "count": len(embeddings.data),
        "dims": [len(item.embedding) for item in embeddings.data],
    }

    edit = client.images.edit(
        model=model,
        image=("cat.png", PNG, "image/png"),
        prompt="a cat wearing a hat",
        n=2,
    )
    result["image_edit"] = {
        "count": len(edit.data),
        "png": [base64.b64decode(item.b64_json)[:8] == b"\x89PNG\r\n\x1a\n" for item in edit.data],
    }

    try:
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
        result["unknown_model"] = None
    except openai.NotFoundError as error:
        result["unknown_model"] = api_error(error)

    try:
        bad = openai.OpenAI(base_url=f"{base_url}/v1", api_key="wrong-key", max_retries=0, timeout=30)
        bad.models.list()
        result["wrong_key"] = None
    except openai.AuthenticationError as error:
        result["wrong_key"] = api_error(error)

    print(json.dumps(result))


if __name__ == "__main__":
    main()
