"""Drives the gateway's /v1/messages with the official `anthropic` Python package: someone else's parser checks
our Anthropic wire format.

Run by tests/formats/python_client.rs as `python3 anthropic_client.py BASE_URL API_KEY` (BASE_URL without `/v1`: the
SDK adds it). The scripted upstream behind the gateway picks its reply from the first user message (see
python_client.rs). Prints one `ok <check>` line per check; any failure raises, so the exit status is non-zero.
"""

import sys

import anthropic

base_url, api_key = sys.argv[1], sys.argv[2]
client = anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=0, timeout=20)


def ask(text, **kwargs):
    return client.messages.create(
        model="claude-test", max_tokens=64, messages=[{"role": "user", "content": text}], **kwargs
    )


# Non-streaming text.
message = ask("text", system="be brief")
assert message.type == "message" and message.role == "assistant", message
assert message.content[0].type == "text" and message.content[0].text == "Hello from upstream", message
assert message.stop_reason == "end_turn", message
assert message.usage.input_tokens == 12 and message.usage.output_tokens == 5, message.usage
print("ok non-streaming text")

# Streaming text through the SDK's accumulating helper, and the raw event types.
with client.messages.stream(
    model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "text"}]
) as stream:
    text = "".join(stream.text_stream)
    final = stream.get_final_message()
assert text == "Hello from upstream", text
assert final.stop_reason == "end_turn" and final.content[0].text == text, final
assert final.usage.output_tokens == 5 and final.usage.input_tokens == 12, final.usage
# (The SDK drops `ping` events itself.)
types = [event.type for event in ask("text", stream=True)]
assert types == ["message_start", "content_block_start"] + ["content_block_delta"] * 3 + [
    "content_block_stop", "message_delta", "message_stop"], types
print("ok streaming text")

# A server-side tool round is invisible; usage is summed over both model calls.
message = ask("add")
assert [b.type for b in message.content] == ["text"] and message.content[0].text == "The sum is 5", message
assert message.usage.input_tokens == 32 and message.usage.output_tokens == 14, message.usage
print("ok server-side tool round")

# A client tool round: tool_use handed back (both shapes), tool_result continues the turn.
tools = [{
    "name": "get_weather",
    "description": "Weather by city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}]
message = ask("weather", tools=tools)
assert message.stop_reason == "tool_use", message
call = message.content[0]
assert call.type == "tool_use" and call.name == "get_weather" and call.input == {"city": "Oslo"}, call
with client.messages.stream(
    model="claude-test", max_tokens=64, tools=tools, messages=[{"role": "user", "content": "weather"}]
) as stream:
    streamed = stream.get_final_message()
assert streamed.stop_reason == "tool_use" and streamed.content[0].input == {"city": "Oslo"}, streamed
answer = client.messages.create(
    model="claude-test",
    max_tokens=64,
    tools=tools,
    messages=[
        {"role": "user", "content": "weather"},
        {"role": "assistant", "content": message.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}]},
    ],
)
assert answer.content[0].text == "It is sunny", answer
print("ok client tool round")

# Approvals: a standard client sees a finished answer; the extension rides in extra fields.
message = ask("write")
assert message.stop_reason == "end_turn", message
assert "[approval required]" in message.content[0].text, message
approval = message.model_extra["tower_chat"]["approval_requests"][0]
assert approval["tool"] == "write_file", approval
resumed = client.messages.create(
    model="claude-test",
    max_tokens=64,
    messages=[{"role": "user", "content": "write"}, {"role": "assistant", "content": message.content}],
    extra_body={"tower_chat": {"approvals": [{"id": approval["id"], "approved": True}]}},
)
assert resumed.content[0].text == "written: wrote 2 bytes to py.txt", resumed
print("ok approval flow")

# Errors arrive as the client's typed exceptions, with Anthropic's error types.
try:
    client.messages.create(
        model="claude-test",
        max_tokens=64,
        messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "%%%"}}]}],
    )
    raise AssertionError("expected a 400")
except anthropic.BadRequestError as error:
    assert error.status_code == 400 and error.body["error"]["type"] == "invalid_request_error", error.body
    assert "base64" in error.message, error.message
try:
    ask("ratelimit")
    raise AssertionError("expected a 429")
except anthropic.RateLimitError as error:
    assert error.body["error"]["type"] == "rate_limit_error", error.body
    assert error.response.headers["retry-after"] == "3", error
try:
    anthropic.Anthropic(base_url=base_url, api_key="wrong", max_retries=0).messages.create(
        model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "text"}]
    )
    raise AssertionError("expected a 401")
except anthropic.AuthenticationError as error:
    assert error.body["error"]["type"] == "authentication_error", error.body
try:
    text = ""
    for event in ask("abort", stream=True):
        if event.type == "content_block_delta":
            text += event.delta.text
    raise AssertionError("expected the stream to fail")
except anthropic.APIStatusError as error:
    assert text == "partial ", text
    assert error.body["error"]["type"] == "api_error", error.body
print("ok errors")
