"""One inbound wire format of the gateway against every upstream kind, with that format's official SDK.

Run by tests/upstreams/provider_matrix.rs as `python3 provider_matrix_client.py FORMAT BASE_URL CASES_JSON`, FORMAT one of
`chat` (the `openai` package's Chat Completions), `messages` (the `anthropic` package; BASE_URL without `/v1`) or
`responses` (the `openai` package's Responses). CASES_JSON lists the models to drive, each with the usage its
upstream reports for the tool round and for the answer: `[{"model": "m-openai", "usage": [[20, 9], [12, 5]]}]`.

For every model, streamed and not: the model calls `get_weather`, this client runs it and sends the result back,
the model answers with it. Each round's usage must be the upstream's; each request carries its own
`x-conversation-id` (`matrix-FORMAT-MODEL-STREAM`) so the Rust side finds its records. Prints one
`ok FORMAT MODEL stream=BOOL` line per case; any failure raises, so the exit status is non-zero.
"""

import json
import sys

FORMAT, BASE_URL, CASES = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
QUESTION = "What is the weather in Oslo?"
WEATHER = "sunny-21C"
ANSWER = "In Oslo it is sunny-21C."
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def get_weather(city):
    assert city == "Oslo", city
    return WEATHER


def headers(model, stream):
    return {"x-conversation-id": f"matrix-{FORMAT}-{model}-{stream}"}


def check_usage(what, seen, expected):
    assert list(seen) == list(expected), f"{what}: usage {seen}, the upstream said {expected}"


def chat(model, stream, usage):
    import openai

    client = openai.OpenAI(base_url=BASE_URL, api_key="sk-matrix", max_retries=0, timeout=30)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}]

    def ask(messages):
        kwargs = dict(model=model, messages=messages, tools=tools, extra_headers=headers(model, stream))
        if not stream:
            reply = client.chat.completions.create(**kwargs)
            message = reply.choices[0].message
            calls = [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []]
            return message.content or "", calls, reply.choices[0].finish_reason, reply.usage
        text, calls, finish, used = "", {}, None, None
        for chunk in client.chat.completions.create(
            stream=True, stream_options={"include_usage": True}, **kwargs
        ):
            if chunk.usage is not None:
                used = chunk.usage
            for choice in chunk.choices:
                text += choice.delta.content or ""
                for call in choice.delta.tool_calls or []:
                    entry = calls.setdefault(call.index, ["", "", ""])
                    entry[0] = call.id or entry[0]
                    entry[1] += (call.function.name or "") if call.function else ""
                    entry[2] += (call.function.arguments or "") if call.function else ""
                finish = choice.finish_reason or finish
        return text, [tuple(c) for _, c in sorted(calls.items())], finish, used

    messages = [{"role": "user", "content": QUESTION}]
    _, calls, finish, used = ask(messages)
    assert finish == "tool_calls" and len(calls) == 1, (finish, calls)
    call_id, name, arguments = calls[0]
    assert name == "get_weather", calls
    check_usage("tool round", (used.prompt_tokens, used.completion_tokens), usage[0])
    messages.append({"role": "assistant", "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]})
    messages.append({"role": "tool", "tool_call_id": call_id, "content": get_weather(**json.loads(arguments))})
    text, calls, finish, used = ask(messages)
    assert (text, calls, finish) == (ANSWER, [], "stop"), (text, calls, finish)
    check_usage("answer", (used.prompt_tokens, used.completion_tokens), usage[1])


def messages(model, stream, usage):
    import anthropic

    client = anthropic.Anthropic(base_url=BASE_URL, api_key="sk-matrix", max_retries=0, timeout=30)
    tools = [{"name": "get_weather", "description": "Weather by city", "input_schema": SCHEMA}]

    def ask(conversation):
        kwargs = dict(model=model, max_tokens=256, messages=conversation, tools=tools,
                      extra_headers=headers(model, stream))
        if not stream:
            return client.messages.create(**kwargs)
        with client.messages.stream(**kwargs) as events:
            for _ in events:
                pass
            return events.get_final_message()

    def used(message):
        # Anthropic counts cache reads and writes apart from `input_tokens`.
        u = message.usage
        read, written = u.cache_read_input_tokens or 0, u.cache_creation_input_tokens or 0
        return (u.input_tokens + read + written, u.output_tokens)

    conversation = [{"role": "user", "content": QUESTION}]
    message = ask(conversation)
    uses = [b for b in message.content if b.type == "tool_use"]
    assert message.stop_reason == "tool_use" and len(uses) == 1, message
    assert uses[0].name == "get_weather", uses
    check_usage("tool round", used(message), usage[0])
    conversation.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]})
    conversation.append({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": uses[0].id, "content": get_weather(**uses[0].input)}]})
    message = ask(conversation)
    text = "".join(b.text for b in message.content if b.type == "text")
    assert (text, message.stop_reason) == (ANSWER, "end_turn"), message
    check_usage("answer", used(message), usage[1])


def responses(model, stream, usage):
    import openai

    client = openai.OpenAI(base_url=BASE_URL, api_key="sk-matrix", max_retries=0, timeout=30)
    tools = [{"type": "function", "name": "get_weather", "parameters": SCHEMA}]

    def ask(items):
        kwargs = dict(model=model, input=items, tools=tools, store=False, extra_headers=headers(model, stream))
        if not stream:
            return client.responses.create(**kwargs)
        final = None
        for event in client.responses.create(stream=True, **kwargs):
            assert event.type != "error", event
            if event.type == "response.completed":
                final = event.response
        assert final is not None, "no response.completed event"
        return final

    items = [{"role": "user", "content": QUESTION}]
    response = ask(items)
    calls = [item for item in response.output if item.type == "function_call"]
    assert response.status == "completed" and len(calls) == 1, response
    assert calls[0].name == "get_weather", calls
    check_usage("tool round", (response.usage.input_tokens, response.usage.output_tokens), usage[0])
    items += [item.model_dump(exclude_none=True) for item in response.output]
    items.append({"type": "function_call_output", "call_id": calls[0].call_id,
                  "output": get_weather(**json.loads(calls[0].arguments))})
    response = ask(items)
    assert response.status == "completed" and response.output_text == ANSWER, response
    assert not [item for item in response.output if item.type == "function_call"], response
    check_usage("answer", (response.usage.input_tokens, response.usage.output_tokens), usage[1])


DRIVE = {"chat": chat, "messages": messages, "responses": responses}[FORMAT]
for case in CASES:
    for stream in (False, True):
        try:
            DRIVE(case["model"], stream, case["usage"])
        except Exception as error:
            raise AssertionError(f"{FORMAT} {case['model']} stream={stream}: {error!r}") from error
        print(f"ok {FORMAT} {case['model']} stream={stream}", flush=True)
