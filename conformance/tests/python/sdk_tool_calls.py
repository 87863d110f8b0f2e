"""The official OpenAI and Anthropic Python SDKs read the simulator's tool
calls, whole and streamed (through the SDKs' stream helpers too).

    python sdk_tool_calls.py BASE_URL MODEL

Prints the arguments each way got, as JSON.
"""

import json
import sys

import anthropic
import openai

PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city", "days"],
    "additionalProperties": False,
}


def main():
    base, model = sys.argv[1], sys.argv[2]
    user = [{"role": "user", "content": "weather?"}]
    chat_tools = [{"type": "function", "function": {"name": "w", "parameters": PARAMETERS, "strict": True}}]
    client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
    out = {}
    whole = client.chat.completions.create(model=model, messages=user, tools=chat_tools, tool_choice="required")
    out["chat"] = {
        "finish_reason": whole.choices[0].finish_reason,
        "name": whole.choices[0].message.tool_calls[0].function.name,
        "arguments": json.loads(whole.choices[0].message.tool_calls[0].function.arguments),
    }
    with client.chat.completions.stream(model=model, messages=user, tools=chat_tools) as stream:
        final = stream.get_final_completion()
    out["chat_stream"] = final.choices[0].message.tool_calls[0].function.parsed_arguments
    tools = [{"type": "function", "name": "w", "parameters": PARAMETERS, "strict": True}]
    response = client.responses.create(model=model, input="weather?", tools=tools, tool_choice="required")
    out["responses"] = json.loads(response.output[0].arguments)
    with client.responses.stream(model=model, input="weather?", tools=tools) as stream:
        final = stream.get_final_response()
    out["responses_stream"] = json.loads(final.output[0].arguments)
    claude = anthropic.Anthropic(base_url=base, api_key="x", max_retries=0)
    message_tools = [{"name": "w", "input_schema": PARAMETERS}]
    message = claude.messages.create(
        model=model, max_tokens=100, messages=user, tools=message_tools, tool_choice={"type": "any"}
    )
    out["messages"] = {"stop_reason": message.stop_reason, "input": message.content[0].input}
    with claude.messages.stream(model=model, max_tokens=100, messages=user, tools=message_tools) as stream:
        final = stream.get_final_message()
    out["messages_stream"] = final.content[0].input
    print(json.dumps(out))


if __name__ == "__main__":
    main()
