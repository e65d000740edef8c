"""The OpenAI Agents SDK, unmodified, against the gateway: an agent with one function tool, run once with the
SDK's Responses model and once with its Chat Completions model for each model name given.

Usage: agents_sdk_client.py BASE_URL KEY MODEL...
Prints `ok <api> <model> <final output>` per run; exits non-zero on the first failure.
"""

import asyncio
import sys

from openai import AsyncOpenAI
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)

# The tool's answer: the model knows it only from the tool's result.
SECRET = "the-secret-is-cobalt-4418"


@function_tool
def secret_word(topic: str) -> str:
    """Look up the secret word for a topic."""
    return f"{SECRET} ({topic})"


async def main(base_url: str, key: str, models: list[str]) -> None:
    # Traces would go to OpenAI's servers: nothing leaves loopback.
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0)
    for name in models:
        for api, model in (
            ("responses", OpenAIResponsesModel(model=name, openai_client=client)),
            ("chat", OpenAIChatCompletionsModel(model=name, openai_client=client)),
        ):
            agent = Agent(
                name="Librarian",
                instructions="Answer with the secret word the tool gives.",
                tools=[secret_word],
                model=model,
            )
            result = await Runner.run(agent, "What is the secret word for boats?")
            print(f"ok {api} {name} {result.final_output}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
