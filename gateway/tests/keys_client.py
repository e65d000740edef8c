"""A managed gateway key in the official `openai` Python package's hands.

Run by tests/operator/keys.rs as `python3 keys_client.py BASE_URL API_KEY EXPECT`: with EXPECT `answered`, one chat
completion must succeed (prints `ok answered`); with EXPECT `refused`, it must fail with the client's own
`AuthenticationError` (a 401; prints `ok refused`). Any other outcome raises, so the exit status is non-zero.
"""

import sys

import openai

base_url, api_key, expect = sys.argv[1], sys.argv[2], sys.argv[3]
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=20)


def ask():
    return client.chat.completions.create(
        model="test-model", messages=[{"role": "user", "content": "Hello"}]
    )


if expect == "answered":
    completion = ask()
    assert completion.choices[0].message.content, completion
    print("ok answered")
elif expect == "refused":
    try:
        ask()
    except openai.AuthenticationError as error:
        assert error.status_code == 401, error
        print("ok refused")
    else:
        raise AssertionError("the key was accepted")
else:
    raise SystemExit(f"unknown expectation {expect!r}")
