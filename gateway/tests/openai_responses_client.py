"""Drives the gateway's /v1/responses with the official `openai` Python package's Responses API.

Run by tests/formats/python_client.rs as `python3 openai_responses_client.py BASE_URL API_KEY`. The scripted upstream
behind the gateway picks its reply from the first user message (see python_client.rs). Prints one `ok <check>`
line per check; any failure raises, so the exit status is non-zero.
"""

import json
import sys

import openai

base_url, api_key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=20)

# Non-streaming text.
response = client.responses.create(model="test-model", input="text", instructions="be brief")
assert response.object == "response" and response.status == "completed", response
assert response.output_text == "Hello from upstream", response
assert response.usage.total_tokens == 17 and response.usage.input_tokens == 12, response.usage
print("ok non-streaming text")

# Streaming: raw events, and the SDK's accumulating helper.
types, text, completed = [], "", None
for event in client.responses.create(model="test-model", input="text", stream=True):
    types.append(event.type)
    if event.type == "response.output_text.delta":
        text += event.delta
    if event.type == "response.completed":
        completed = event.response
assert types[0] == "response.created" and types[-1] == "response.completed", types
assert text == "Hello from upstream" and completed.output_text == text, (text, completed)
with client.responses.stream(model="test-model", input="text") as stream:
    for _ in stream:
        pass
    final = stream.get_final_response()
assert final.output_text == "Hello from upstream" and final.usage.total_tokens == 17, final
print("ok streaming text")

# A function call round trip: the call is handed back; its output continues the stored turn.
tools = [{
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}]
response = client.responses.create(model="test-model", input="weather", tools=tools)
call = response.output[0]
assert call.type == "function_call" and call.name == "get_weather", response
assert json.loads(call.arguments) == {"city": "Oslo"}, call
with client.responses.stream(model="test-model", input="weather", tools=tools) as stream:
    for _ in stream:
        pass
    streamed = stream.get_final_response()
assert streamed.output[0].type == "function_call" and streamed.output[0].call_id == call.call_id, streamed
answer = client.responses.create(
    model="test-model",
    previous_response_id=response.id,
    tools=tools,
    input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
)
assert answer.output_text == "It is sunny", answer
print("ok function call round trip")

# previous_response_id continues a stored conversation; `store: false` leaves nothing to continue.
first = client.responses.create(model="test-model", input="text")
second = client.responses.create(model="test-model", input="and more?", previous_response_id=first.id)
assert second.previous_response_id == first.id and second.output_text == "Hello from upstream", second
unstored = client.responses.create(model="test-model", input="text", store=False)
try:
    client.responses.create(model="test-model", input="more", previous_response_id=unstored.id)
    raise AssertionError("expected a 404")
except openai.NotFoundError as error:
    assert error.status_code == 404, error
print("ok previous_response_id")

# Errors: a bad request is a typed exception; a failed stream ends with an `error` event.
try:
    client.responses.create(model="test-model", input=[{"type": "message", "role": "user", "content": [
        {"type": "input_image", "image_url": "data:image/png;base64,%%%"}]}])
    raise AssertionError("expected a 400")
except openai.BadRequestError as error:
    assert error.status_code == 400 and "base64" in error.message, error
types = [event.type for event in client.responses.create(model="test-model", input="abort", stream=True)]
assert types[-1] == "error" and "response.completed" not in types, types
print("ok errors")
