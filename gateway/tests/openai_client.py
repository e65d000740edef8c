"""Drives the gateway with the official `openai` Python package: someone else's parser checks our wire format.

Run by tests/formats/python_client.rs as `python3 openai_client.py BASE_URL API_KEY`. The scripted upstream behind the
gateway picks its reply from the last user message (see python_client.rs). Prints one `ok <check>` line per
check; any failure raises, so the exit status is non-zero.
"""

import json
import sys

import openai

base_url, api_key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=20)


def ask(text, **kwargs):
    return client.chat.completions.create(
        model="test-model", messages=[{"role": "user", "content": text}], **kwargs
    )


# Non-streaming text.
completion = ask("text")
assert completion.object == "chat.completion", completion
assert completion.choices[0].message.content == "Hello from upstream", completion
assert completion.choices[0].finish_reason == "stop", completion
assert completion.usage.total_tokens == 17, completion.usage
assert completion.model, completion
print("ok non-streaming text")

# Streaming text with a usage chunk.
text, finish, usage = "", None, None
for chunk in ask("text", stream=True, stream_options={"include_usage": True}):
    assert chunk.object == "chat.completion.chunk", chunk
    if chunk.usage is not None:
        usage = chunk.usage
    for choice in chunk.choices:
        text += choice.delta.content or ""
        finish = choice.finish_reason or finish
assert text == "Hello from upstream", text
assert finish == "stop", finish
assert usage is not None and usage.total_tokens == 17, usage
print("ok streaming text")

# A server-side tool round is invisible: only the answer comes back.
completion = ask("add")
assert completion.choices[0].message.content == "The sum is 5", completion
assert not completion.choices[0].message.tool_calls, completion
print("ok server-side tool round")

# A client tool is handed back, in both shapes.
weather = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}]
completion = ask("weather", tools=weather)
call = completion.choices[0].message.tool_calls[0]
assert completion.choices[0].finish_reason == "tool_calls", completion
assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Oslo"}
calls, finish = {}, None
for chunk in ask("weather", tools=weather, stream=True):
    for choice in chunk.choices:
        finish = choice.finish_reason or finish
        for delta in choice.delta.tool_calls or []:
            entry = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
            entry["id"] = delta.id or entry["id"]
            if delta.function:
                entry["name"] += delta.function.name or ""
                entry["arguments"] += delta.function.arguments or ""
assert finish == "tool_calls", finish
assert calls[0]["id"] == "call_w" and calls[0]["name"] == "get_weather", calls
assert json.loads(calls[0]["arguments"]) == {"city": "Oslo"}, calls
print("ok client tool handed back")

# Approvals: a standard client sees a finished answer; the extension rides in extra fields.
completion = ask("write")
message = completion.choices[0].message
assert completion.choices[0].finish_reason == "stop", completion
assert "[approval required]" in message.content, message
approval = message.model_extra["tower_chat_approvals"][0]
assert approval["tool"] == "write_file", approval
resumed = client.chat.completions.create(
    model="test-model",
    messages=[{"role": "user", "content": "write"}, {"role": "assistant", "content": message.content}],
    extra_body={"tower_chat": {"approvals": [{"id": approval["id"], "approved": True}]}},
)
assert resumed.choices[0].message.content == "written: wrote 2 bytes to py.txt", resumed
print("ok approval flow")

# Errors arrive as the client's typed exceptions, with our messages.
try:
    client.chat.completions.create(model="test-model", messages="not a list")
    raise AssertionError("expected a 400")
except openai.BadRequestError as error:
    assert error.status_code == 400 and "messages" in error.message, error
try:
    ask("ratelimit")
    raise AssertionError("expected a 429")
except openai.RateLimitError as error:
    assert error.status_code == 429 and error.response.headers["retry-after"] == "3", error
try:
    text = ""
    for chunk in ask("abort", stream=True):
        for choice in chunk.choices:
            text += choice.delta.content or ""
    raise AssertionError("expected the stream to fail")
except openai.APIError as error:
    assert text == "partial ", text
try:
    openai.OpenAI(base_url=base_url, api_key="wrong", max_retries=0).chat.completions.create(
        model="test-model", messages=[{"role": "user", "content": "text"}]
    )
    raise AssertionError("expected a 401")
except openai.AuthenticationError as error:
    assert error.status_code == 401, error
print("ok errors")
