"""Drives the gateway's /v1/responses with the official `openai` Python package as Codex would: a freeform
`custom` tool with a Lark grammar, streamed, then the tool's output in the next request.

Run by tests/codex_tools.rs as `python3 codex_tools_client.py BASE_URL API_KEY MODEL PATCH GRAMMAR`. The
scripted upstream behind MODEL calls `apply_patch` with PATCH, then answers "Patched." once it sees the
output. Prints one `ok <check>` line per check; any failure raises, so the exit status is non-zero.
"""

import sys

import openai

base_url, api_key, model, patch, grammar = sys.argv[1:6]
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=20)

tools = [
    {"type": "function", "name": "shell", "description": "Runs a shell command.",
     "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}},
                    "required": ["command"]}},
    {"type": "custom", "name": "apply_patch", "description": "Edit files with a patch.",
     "format": {"type": "grammar", "syntax": "lark", "definition": grammar}},
]
user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Create hello.txt."}]}

# Streamed: the SDK's accumulating helper types each event and the final output item.
deltas, done_input, added = "", None, None
with client.responses.stream(model=model, input=[user], tools=tools, store=False) as stream:
    for event in stream:
        if event.type == "response.output_item.added" and event.item.type == "custom_tool_call":
            added = event.item
        if event.type == "response.custom_tool_call_input.delta":
            deltas += event.delta
        if event.type == "response.custom_tool_call_input.done":
            done_input = event.input
    final = stream.get_final_response()
calls = [item for item in final.output if item.type == "custom_tool_call"]
assert added is not None and added.name == "apply_patch", final
assert len(calls) == 1, final.output
call = calls[0]
assert isinstance(call, openai.types.responses.ResponseCustomToolCall), type(call)
assert call.name == "apply_patch" and call.input == patch, call
assert deltas == patch and done_input == patch, (deltas, done_input)
print("ok streamed custom tool call")

# The output goes back as Codex sends it; the answer is text.
response = client.responses.create(
    model=model,
    input=[
        user,
        {"type": "custom_tool_call", "call_id": call.call_id, "name": call.name, "input": call.input},
        {"type": "custom_tool_call_output", "call_id": call.call_id,
         "output": "Success. Updated the following files:\nA hello.txt\n"},
    ],
    tools=tools,
    store=False,
)
assert response.output_text == "Patched.", response
print("ok custom tool call output round")
