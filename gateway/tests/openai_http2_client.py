"""Drives the gateway with the official `openai` Python package over HTTP/2 (h2c with prior knowledge).

Run by tests/formats/python_client.rs as `python3 openai_http2_client.py BASE_URL API_KEY`; needs the `h2` package
(`pip install 'httpx[http2]'`). Every response's HTTP version is checked, so a fallback to HTTP/1.1 fails.
Prints one `ok <check>` line per check; any failure raises, so the exit status is non-zero.
"""

import sys

import openai

# The HTTP client the installed `openai` is built on (`httpx`, or its successor `httpx2`).
try:
    import httpx2 as httpx
except ImportError:
    import httpx

base_url, api_key = sys.argv[1], sys.argv[2]
versions = []
http = httpx.Client(
    http1=False,
    http2=True,
    timeout=20,
    event_hooks={"response": [lambda response: versions.append(response.http_version)]},
)
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, http_client=http)


def ask(text, **kwargs):
    return client.chat.completions.create(
        model="test-model", messages=[{"role": "user", "content": text}], **kwargs
    )


completion = ask("text")
assert completion.choices[0].message.content == "Hello from upstream", completion
print("ok non-streaming text")

text, finish = "", None
for chunk in ask("text", stream=True):
    for choice in chunk.choices:
        text += choice.delta.content or ""
        finish = choice.finish_reason or finish
assert text == "Hello from upstream", text
assert finish == "stop", finish
print("ok streaming text")

assert versions == ["HTTP/2", "HTTP/2"], versions
print("ok every answer over HTTP/2")
