"""A tool round with reasoning through the gateway's /v1/responses, driven by the official `openai` package.

The first round goes to one gateway, the second (the first round's output items handed back as the SDK returns
them, with the tool's output) to another, so only the items themselves can carry the upstream's thinking
signature. tests/formats/responses_reasoning.rs checks what the second upstream received.

Run as `python3 responses_reasoning_client.py FIRST_BASE_URL SECOND_BASE_URL API_KEY`. Prints one `ok <check>`
line per check; any failure raises, so the exit status is non-zero.
"""

import sys

import openai

first_url, second_url, api_key = sys.argv[1:4]
first = openai.OpenAI(base_url=first_url, api_key=api_key, max_retries=0, timeout=20)
second = openai.OpenAI(base_url=second_url, api_key=api_key, max_retries=0, timeout=20)
tools = [{
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}]
question = {"role": "user", "content": "Weather in Oslo?"}
asked = dict(model="claude-test", tools=tools, include=["reasoning.encrypted_content"], store=False)

for stream in (False, True):
    if stream:
        with first.responses.stream(input=[question], **asked) as events:
            for _ in events:
                pass
            response = events.get_final_response()
    else:
        response = first.responses.create(input=[question], **asked)
    reasoning = response.output[0]
    assert reasoning.type == "reasoning" and reasoning.encrypted_content, response
    assert reasoning.summary[0].text.startswith("The user wants"), reasoning
    call = next(item for item in response.output if item.type == "function_call")
    answer = second.responses.create(
        input=[question, *response.output, {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
        **asked,
    )
    assert answer.output_text == "It is sunny in Oslo.", answer
    print(f"ok reasoning round trip (stream={stream})")
