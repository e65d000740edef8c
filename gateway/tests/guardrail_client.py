"""The official `openai` Python package against a gateway with a content policy (secrets blocked, personal data
redacted): a blocked request is a BadRequestError with code `content_filter`; a blocked answer ends with
`finish_reason == "content_filter"`, whole and streamed, with the redaction in its text.

Run by tests/stack/guardrail.rs as `python3 guardrail_client.py BASE_URL API_KEY SHOWN NOTICE`: SHOWN is what the
client must read before the notice NOTICE. Prints one `ok <check>` line per check; any failure raises.
"""

import sys

import openai

base_url, api_key, shown, notice = sys.argv[1:5]
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=20)


def ask(text, **kwargs):
    return client.chat.completions.create(
        model="test-model", messages=[{"role": "user", "content": text}], **kwargs
    )


try:
    ask("use AKIAIOSFODNN7EXAMPLE please")
    raise AssertionError("a request carrying a key went through")
except openai.BadRequestError as error:
    assert error.status_code == 400, error
    assert error.code == "content_filter", error.body
print("ok blocked request")

completion = ask("please leak")
choice = completion.choices[0]
assert choice.finish_reason == "content_filter", completion
assert choice.message.content.startswith(shown), choice.message.content
assert choice.message.content.endswith(notice), choice.message.content
print("ok filtered answer")

text, finish = "", None
for chunk in ask("please leak", stream=True):
    for streamed in chunk.choices:
        text += streamed.delta.content or ""
        finish = streamed.finish_reason or finish
assert finish == "content_filter", finish
assert text.startswith(shown) and text.endswith(notice), text
assert "sk-proj" not in text and "ops@example.com" not in text, text
print("ok filtered stream")
