"""The official `openai` client against the app of `examples/embed.rs`.

Usage: embed_client.py BASE_URL TOKEN (BASE_URL ends in /v1). Prints one `ok ...` line per check.
"""

import sys

import httpx
import openai

base_url, token = sys.argv[1], sys.argv[2]
question = [{"role": "user", "content": "Weather in Oslo?"}]
expected = "In Oslo it is 4°C, light snow right now."

client = openai.OpenAI(base_url=base_url, api_key=token, max_retries=0)

answer = client.chat.completions.create(model="scripted-model", messages=question)
choice = answer.choices[0]
assert choice.message.content == expected, answer
assert choice.finish_reason == "stop", answer
# The stack ran its own tool: the client sees the answer, not the call.
assert not choice.message.tool_calls, answer
# Usage summed over both model rounds (the call's 20 in and 9 out, the answer's 12 and 5).
assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (32, 14), answer.usage
print("ok non-streaming text")

chunks = list(
    client.chat.completions.create(model="scripted-model", messages=question, stream=True)
)
text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
assert text == expected, chunks
finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
assert finishes == ["stop"], finishes
print("ok streaming text")

# A malformed request is the format's own 400, which the client parses.
try:
    client.chat.completions.create(
        model="scripted-model", messages=[{"role": "user", "content": 7}]
    )
    raise AssertionError("a content of 7 was accepted")
except openai.BadRequestError as error:
    assert error.status_code == 400, error
    assert error.code == "invalid_request_schema", error.body
print("ok format's 400")

# Without the app's token: the app's own 401, before the route.
for key in ["sk-wrong", ""]:
    stranger = openai.OpenAI(base_url=base_url, api_key=key or "none", max_retries=0)
    try:
        stranger.chat.completions.create(model="scripted-model", messages=question)
        raise AssertionError("a request without the token was answered")
    except openai.AuthenticationError as error:
        assert error.status_code == 401, error
        assert error.response.json()["error"]["type"] == "app_auth", error.response.text
        assert error.response.headers["www-authenticate"] == "Bearer"
print("ok app's 401")

health = httpx.get(base_url.removesuffix("/v1") + "/health")
assert (health.status_code, health.text) == (200, "ok"), health
print("ok app's own route")
