"""Drives a gateway started with `--demo` (no provider, no key) with the official `openai` and `anthropic` Python
packages, as a newcomer following the README would: Chat Completions and Responses through `openai`, Messages
through `anthropic`, each with a plain answer and a server-side tool round (`add`).

Run by tests/demo.rs as `python3 demo_client.py BASE_URL` (BASE_URL like `http://127.0.0.1:PORT`, without
`/v1`). Prints one `ok <check>` line per check; any failure raises, so the exit status is non-zero.
"""

import sys

import anthropic
import openai

base_url = sys.argv[1]
# The demo gateway has no client keys; the SDKs insist on some key, which it ignores.
chat = openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=20)
messages = anthropic.Anthropic(base_url=base_url, api_key="unused", max_retries=0, timeout=20)

completion = chat.chat.completions.create(
    model="gpt-4o-mini", messages=[{"role": "user", "content": "hello there"}]
)
text = completion.choices[0].message.content
assert 'You said: "hello there"' in text and "demo upstream" in text, text
assert completion.choices[0].finish_reason == "stop", completion
print("ok chat completions text")

stream = chat.chat.completions.create(
    model="gpt-4o-mini", messages=[{"role": "user", "content": "add 2 and 3"}], stream=True
)
text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
assert text == "The tool answered: 5. (demo upstream)", text
print("ok chat completions streamed tool round")

response = chat.responses.create(model="gpt-4o-mini", input="hello there")
assert 'You said: "hello there"' in response.output_text, response
print("ok responses text")

response = chat.responses.create(model="gpt-4o-mini", input="please add 40 and 2")
assert response.output_text == "The tool answered: 42. (demo upstream)", response
print("ok responses tool round")

message = messages.messages.create(
    model="claude-sonnet-4-5", max_tokens=64, messages=[{"role": "user", "content": "hello there"}]
)
assert message.content[0].type == "text" and 'You said: "hello there"' in message.content[0].text, message
print("ok messages text")

with messages.messages.stream(
    model="claude-sonnet-4-5", max_tokens=64, messages=[{"role": "user", "content": "add 1.5 and 2"}]
) as stream:
    text = "".join(stream.text_stream)
assert text == "The tool answered: 3.5. (demo upstream)", text
print("ok messages streamed tool round")
