"""Tool calls through the FlexInfer gateway, with the official SDKs.

Usage: sdk_tool_calls.py BASE_URL API_KEY MODEL

One tool (`get_weather`) offered to every API the gateway relays: chat
completions (JSON, streamed with usage, streamed without asking for it),
the Responses API (JSON, streamed, and the follow-up that hands the call's
output back with `previous_response_id`) and Anthropic's Messages API
(JSON, streamed, and the follow-up with a `tool_result`). Prints one JSON
object: for each call, the tool calls the SDK assembled (name and parsed
arguments), the text, the finish/stop reason, the usage the SDK saw and,
for the JSON chat answer, the gateway's usage headers. Exits 3 with a
message on stderr when the `openai` or `anthropic` package is missing.
"""

import json
import sys

try:
    import anthropic
    import openai
except ImportError as error:  # pragma: no cover - reported to the Rust test
    print(f"cannot import the SDKs: {error}", file=sys.stderr)
    sys.exit(3)

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit"],
}
CHAT_TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather", "parameters": WEATHER},
    }
]
RESPONSES_TOOLS = [
    {"type": "function", "name": "get_weather", "description": "Weather", "parameters": WEATHER}
]
MESSAGES_TOOLS = [{"name": "get_weather", "description": "Weather", "input_schema": WEATHER}]
ASK = "What is the weather in Lisbon?"


def usage_of(usage):
    return usage.model_dump(mode="json") if usage is not None else None


def chat_calls(message_or_delta_calls):
    return [
        {"id": c.id, "name": c.function.name, "arguments": json.loads(c.function.arguments)}
        for c in message_or_delta_calls or []
    ]


def chat_stream(client, model, **extra):
    """A streamed chat answer assembled from its deltas, as SDK users do."""
    calls, text, finish, usage = {}, "", None, None
    for chunk in client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": ASK}],
        tools=CHAT_TOOLS,
        tool_choice="required",
        stream=True,
        **extra,
    ):
        if chunk.usage is not None:
            usage = usage_of(chunk.usage)
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
            for d in choice.delta.tool_calls or []:
                call = calls.setdefault(d.index, {"id": None, "name": None, "arguments": ""})
                call["id"] = d.id or call["id"]
                if d.function is not None:
                    call["name"] = d.function.name or call["name"]
                    call["arguments"] += d.function.arguments or ""
    assembled = [
        {"id": c["id"], "name": c["name"], "arguments": json.loads(c["arguments"])}
        for _, c in sorted(calls.items())
    ]
    return {"tool_calls": assembled, "text": text, "finish_reason": finish, "usage": usage}


def chat(client, model):
    out = {}
    raw = client.chat.completions.with_raw_response.create(
        model=model,
        messages=[{"role": "user", "content": ASK}],
        tools=CHAT_TOOLS,
        tool_choice="required",
    )
    answer = raw.parse()
    message = answer.choices[0].message
    out["json"] = {
        "tool_calls": chat_calls(message.tool_calls),
        "content": message.content,
        "finish_reason": answer.choices[0].finish_reason,
        "usage": usage_of(answer.usage),
        "headers": {
            k: raw.headers.get(k)
            for k in ("x-flexinfer-prompt-tokens", "x-flexinfer-finish-reason")
        },
    }
    out["stream_usage"] = chat_stream(client, model, stream_options={"include_usage": True})
    out["stream_unasked"] = chat_stream(client, model)
    call = message.tool_calls[0]
    follow = client.chat.completions.create(
        model=model,
        messages=[
            {"role": "user", "content": ASK},
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump(mode="json")]},
            {"role": "tool", "tool_call_id": call.id, "content": '{"celsius": 21}'},
        ],
        tools=CHAT_TOOLS,
    )
    out["follow_up"] = {
        "content": follow.choices[0].message.content,
        "tool_calls": chat_calls(follow.choices[0].message.tool_calls),
        "finish_reason": follow.choices[0].finish_reason,
        "usage": usage_of(follow.usage),
    }
    return out


def function_calls(output):
    return [
        {"call_id": i.call_id, "name": i.name, "arguments": json.loads(i.arguments)}
        for i in output
        if i.type == "function_call"
    ]


def responses(client, model):
    out = {}
    created = client.responses.create(
        model=model, input=ASK, tools=RESPONSES_TOOLS, tool_choice="required", store=True
    )
    out["json"] = {
        "status": created.status,
        "types": [i.type for i in created.output],
        "calls": function_calls(created.output),
        "usage": usage_of(created.usage),
    }
    types, final = [], None
    with client.responses.stream(
        model=model, input=ASK, tools=RESPONSES_TOOLS, tool_choice="required"
    ) as stream:
        for event in stream:
            types.append(event.type)
        final = stream.get_final_response()
    out["stream"] = {
        "types": types,
        "calls": function_calls(final.output),
        "usage": usage_of(final.usage),
    }
    call = function_calls(created.output)[0]
    follow = client.responses.create(
        model=model,
        previous_response_id=created.id,
        input=[
            {"type": "function_call_output", "call_id": call["call_id"], "output": '{"celsius": 21}'}
        ],
        tools=RESPONSES_TOOLS,
    )
    out["follow_up"] = {
        "status": follow.status,
        "text": follow.output_text,
        "calls": function_calls(follow.output),
        "usage": usage_of(follow.usage),
    }
    return out


def tool_uses(content):
    return [
        {"id": b.id, "name": b.name, "input": b.input} for b in content if b.type == "tool_use"
    ]


def messages(client, model):
    out = {}
    ask = [{"role": "user", "content": ASK}]
    answer = client.messages.create(
        model=model,
        max_tokens=200,
        messages=ask,
        tools=MESSAGES_TOOLS,
        tool_choice={"type": "any"},
    )
    out["json"] = {
        "stop_reason": answer.stop_reason,
        "types": [b.type for b in answer.content],
        "calls": tool_uses(answer.content),
        "usage": usage_of(answer.usage),
    }
    with client.messages.stream(
        model=model,
        max_tokens=200,
        messages=ask,
        tools=MESSAGES_TOOLS,
        tool_choice={"type": "any"},
    ) as stream:
        events = [e.type for e in stream]
        final = stream.get_final_message()
    out["stream"] = {
        "events": events,
        "stop_reason": final.stop_reason,
        "calls": tool_uses(final.content),
        "usage": usage_of(final.usage),
    }
    use = tool_uses(answer.content)[0]
    follow = client.messages.create(
        model=model,
        max_tokens=200,
        messages=ask
        + [
            {"role": "assistant", "content": [b.model_dump(mode="json") for b in answer.content]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": use["id"], "content": "21 celsius"}
                ],
            },
        ],
        tools=MESSAGES_TOOLS,
    )
    out["follow_up"] = {
        "stop_reason": follow.stop_reason,
        "types": [b.type for b in follow.content],
        "usage": usage_of(follow.usage),
    }
    return out


def main():
    base, key, model = sys.argv[1:4]
    oa = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=30)
    an = anthropic.Anthropic(base_url=base, api_key=key, max_retries=0, timeout=30)
    print(
        json.dumps(
            {
                "versions": {"openai": openai.__version__, "anthropic": anthropic.__version__},
                "chat": chat(oa, model),
                "responses": responses(oa, model),
                "messages": messages(an, model),
            }
        )
    )


if __name__ == "__main__":
    main()
