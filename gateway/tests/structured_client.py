"""Typed answers through the gateway with the official SDKs' parse helpers: a Pydantic model in, a validated
instance out, over every model named on the command line (each served by another upstream kind).

Run by tests/formats/structured.rs as `python3 structured_client.py BASE_URL API_KEY MODEL...`. The scripted upstreams
answer every JSON request with Oslo. Prints one `ok <check> <model>` line per check; any failure raises, so the
exit status is non-zero. The `anthropic` package is optional here (its check is skipped with a visible line).
"""

import sys

import openai
from pydantic import BaseModel

base_url, api_key, models = sys.argv[1], sys.argv[2], sys.argv[3:]
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=20)


class Place(BaseModel):
    city: str
    population: int


OSLO = Place(city="Oslo", population=709000)
PROMPT = "Norway's capital and its population?"

# `chat.completions.parse` in current versions, `beta.chat.completions.parse` before.
chat_parse = getattr(client.chat.completions, "parse", None) or client.beta.chat.completions.parse

for model in models:
    completion = chat_parse(
        model=model, messages=[{"role": "user", "content": PROMPT}], response_format=Place
    )
    message = completion.choices[0].message
    assert message.parsed == OSLO, completion
    assert message.refusal is None, completion
    print(f"ok chat.completions.parse {model}")

    response = client.responses.parse(model=model, input=PROMPT, text_format=Place)
    assert response.output_parsed == OSLO, response
    print(f"ok responses.parse {model}")

    try:
        import anthropic
    except ImportError:
        print("skip messages.parse: the anthropic package is not installed")
        continue
    messages = anthropic.Anthropic(base_url=base_url.removesuffix("/v1"), api_key=api_key, max_retries=0)
    if not hasattr(messages.messages, "parse"):
        print("skip messages.parse: this anthropic version has no parse helper")
        continue
    parsed = messages.messages.parse(
        model=model,
        max_tokens=200,
        messages=[{"role": "user", "content": PROMPT}],
        output_format=Place,
    )
    assert parsed.parsed_output == OSLO, parsed
    print(f"ok messages.parse {model}")
