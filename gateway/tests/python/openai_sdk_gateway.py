"""Drive the FlexInfer gateway with the official OpenAI Python SDK.

Usage: openai_sdk_gateway.py BASE_URL API_KEY MODEL [RESPONSES_MODEL]

Prints one JSON object with what the SDK saw: the model listing, a chat
completion, a streamed chat completion with chunk arrival times,
embeddings, a multipart image edit, and the errors the SDK raised for an
unknown model and a wrong API key. With RESPONSES_MODEL (a model served by
several pods), also the Responses API (create, streamed create, retrieve,
input items, cancel, delete, each with the pod that answered, from
`X-Served-By`) and Anthropic's Messages API, through the `anthropic` SDK and
a plain HTTP client. Exits 3 with a message on stderr when the `openai` or
`anthropic` package is missing, so the caller can fail with a clear reason.
"""

import base64
import json
import sys
import time
import urllib.error
import urllib.request

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

    if len(sys.argv) > 4:
        result["responses"] = responses_api(client, sys.argv[4])
        result["messages"] = messages_api(base_url, api_key, sys.argv[4])

    print(json.dumps(result))


def served(raw):
    return raw.headers.get("x-served-by")


def responses_api(client, model):
    """The Responses API through the gateway, with the pod behind each call."""
    out = {}
    created = []

    raw = client.responses.with_raw_response.create(
        model=model, input="Tell me about the sea.", instructions="Be brief."
    )
    resp = raw.parse()
    out["create"] = {
        "id": resp.id,
        "object": resp.object,
        "status": resp.status,
        "model": resp.model,
        "output_text": resp.output_text,
        "usage": resp.usage.model_dump() if resp.usage else None,
    }
    created.append((resp.id, served(raw)))

    raw = client.responses.with_raw_response.create(
        model=model, input=[{"role": "user", "content": "Short one."}], max_output_tokens=3
    )
    short = raw.parse()
    out["create_short"] = {
        "status": short.status,
        "incomplete_reason": short.incomplete_details.reason if short.incomplete_details else None,
        "output_tokens": short.usage.output_tokens if short.usage else None,
    }
    created.append((short.id, served(raw)))

    raw = client.responses.with_raw_response.create(model=model, input="Stream please.", stream=True)
    types, deltas, stream_id, final = [], [], None, None
    for event in raw.parse():
        types.append(event.type)
        if event.type == "response.created":
            stream_id = event.response.id
        elif event.type == "response.output_text.delta":
            deltas.append(event.delta)
        elif event.type == "response.completed":
            final = event.response
    out["stream"] = {
        "types": list(dict.fromkeys(types)),
        "text": "".join(deltas),
        "final_text": final.output_text if final else None,
        "final_status": final.status if final else None,
    }
    created.append((stream_id, served(raw)))

    follow_ups = []
    for response_id, pod in created:
        raw = client.responses.with_raw_response.retrieve(response_id)
        retrieved = raw.parse()
        items_raw = client.responses.input_items.with_raw_response.list(response_id)
        items = items_raw.parse()
        cancel_raw = client.responses.with_raw_response.cancel(response_id)
        follow_ups.append(
            {
                "id": response_id,
                "created_on": pod,
                "retrieved_id": retrieved.id,
                "retrieved_on": served(raw),
                "items_on": served(items_raw),
                "items": [item.content[0].text for item in items.data],
                "cancel_on": served(cancel_raw),
                "cancel_status": cancel_raw.parse().status,
            }
        )
    out["follow_ups"] = follow_ups

    deleted_id = created[0][0]
    client.responses.delete(deleted_id)
    try:
        client.responses.retrieve(deleted_id)
        out["after_delete"] = None
    except openai.NotFoundError as error:
        out["after_delete"] = api_error(error)
    try:
        client.responses.retrieve("resp_never_created")
        out["unknown"] = None
    except openai.NotFoundError as error:
        out["unknown"] = api_error(error)

    retrieved = client.models.retrieve(model)
    out["model"] = {"id": retrieved.id, "object": retrieved.object}
    return out


def post_messages(base_url, api_key, body):
    """POST /v1/messages as a plain Anthropic-style client: status, pod, body text."""
    request = urllib.request.Request(
        f"{base_url}/v1/messages",
        data=json.dumps(body).encode(),
        headers={
            "x-api-key": api_key,
            "anthropic-version": "2023-06-01",
            "content-type": "application/json",
        },
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers.get("x-served-by"), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("x-served-by"), error.read().decode()


def messages_api(base_url, api_key, model):
    """Anthropic's Messages API through the gateway: the SDK, then plain HTTP."""
    try:
        import anthropic
    except ImportError as error:  # pragma: no cover - reported to the Rust test
        print(f"cannot import anthropic: {error}", file=sys.stderr)
        sys.exit(3)
    out = {"sdk_version": anthropic.__version__}
    client = anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=0, timeout=30)
    hello = [{"role": "user", "content": "Hello there."}]

    message = client.messages.create(model=model, max_tokens=100, system="Be brief.", messages=hello)
    out["sdk"] = {
        "id": message.id,
        "type": message.type,
        "role": message.role,
        "model": message.model,
        "text": message.content[0].text,
        "stop_reason": message.stop_reason,
        "usage": message.usage.model_dump(),
    }
    short = client.messages.create(model=model, max_tokens=2, messages=hello)
    out["sdk_short"] = {"stop_reason": short.stop_reason, "output_tokens": short.usage.output_tokens}

    with client.messages.stream(model=model, max_tokens=100, messages=hello) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    out["sdk_stream"] = {
        "text": text,
        "final_text": final.content[0].text,
        "stop_reason": final.stop_reason,
        "output_tokens": final.usage.output_tokens,
    }

    status, pod, body = post_messages(base_url, api_key, {"model": model, "max_tokens": 3, "messages": hello})
    out["http"] = {"status": status, "pod": pod, "body": json.loads(body)}
    status, pod, body = post_messages(
        base_url, api_key, {"model": model, "max_tokens": 3, "messages": hello, "stream": True}
    )
    events = [line[len("event: "):] for line in body.splitlines() if line.startswith("event: ")]
    out["http_stream"] = {"status": status, "events": events}
    status, _, body = post_messages(base_url, api_key, {"model": model, "messages": hello})
    out["http_no_max_tokens"] = {"status": status, "body": json.loads(body)}
    return out


if __name__ == "__main__":
    main()
