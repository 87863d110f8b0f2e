"""Two tenants of one gateway, each with the official OpenAI Python SDK.

Usage: openai_sdk_tenants.py BASE_URL KEY_A KEY_B MODEL

Tenant a stores a response. Tenant b then tries every follow-up on it
(retrieve, input items, cancel, delete, continue with previous_response_id),
and the same on an id nobody created, of the same length. Tenant a then
uses its response in each way. Prints one JSON object: for each attempt,
what the SDK saw (the status and the raw error body, the id in it written
as ID, or the result). Exits 3 with a message on stderr when the `openai`
package is missing.
"""

import json
import secrets
import sys

try:
    import openai
except ImportError as error:  # pragma: no cover - reported to the Rust test
    print(f"cannot import openai: {error}", file=sys.stderr)
    sys.exit(3)


def attempt(call, response_id):
    """What one SDK call saw: its result, or its HTTP error as sent."""
    try:
        result = call()
    except openai.APIStatusError as error:
        body = error.response.text.replace(response_id, "ID")
        return {"status": error.status_code, "body": json.loads(body)}
    if hasattr(result, "model_dump"):
        result = result.model_dump(mode="json")
    return {"status": 200, "result": result}


def follow_ups(client, model, response_id):
    """Every way the Responses API reaches a stored response."""
    responses = client.responses
    calls = {
        "retrieve": lambda: responses.retrieve(response_id),
        "input_items": lambda: responses.input_items.list(response_id),
        "cancel": lambda: responses.cancel(response_id),
        "continue": lambda: responses.create(
            model=model, input="and then?", previous_response_id=response_id
        ),
        "delete": lambda: responses.delete(response_id),
    }
    return {name: attempt(call, response_id) for name, call in calls.items()}


def main():
    base, key_a, key_b, model = sys.argv[1:5]
    a = openai.OpenAI(base_url=f"{base}/v1", api_key=key_a, max_retries=0)
    b = openai.OpenAI(base_url=f"{base}/v1", api_key=key_b, max_retries=0)

    created = a.responses.create(model=model, input="secret of tenant a", store=True)
    unknown = "resp_" + secrets.token_hex(len(created.id))[: len(created.id) - 5]
    out = {
        "sdk_version": openai.__version__,
        "created": created.id,
        "b_on_a": follow_ups(b, model, created.id),
        "b_on_unknown": follow_ups(b, model, unknown),
    }
    # b's attempts changed nothing: a still reaches its response.
    out["a_retrieve"] = attempt(lambda: a.responses.retrieve(created.id), created.id)
    out["a_input_items"] = attempt(
        lambda: a.responses.input_items.list(created.id), created.id
    )
    out["a_continue"] = attempt(
        lambda: a.responses.create(
            model=model, input="and then?", previous_response_id=created.id
        ),
        created.id,
    )
    out["a_delete"] = attempt(lambda: a.responses.delete(created.id), created.id)
    out["a_after_delete"] = attempt(lambda: a.responses.retrieve(created.id), created.id)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
