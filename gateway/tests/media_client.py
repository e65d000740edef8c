"""Sends an image and a PDF through the gateway with an official client: `openai` against /v1/chat/completions,
`responses` (the `openai` package's Responses API) against /v1/responses, `anthropic` against /v1/messages. The
scripted upstream behind the gateway (tests/formats/media.rs) checks that it got both, in its own wire format, and
answers with what it saw; a part the upstream cannot take comes back as a 400 in the client's own error format.

Run as `python3 media_client.py openai|responses|anthropic BASE_URL API_KEY PNG_BASE64 PDF_BASE64
anthropic|openai` (the last argument names the gateway's upstream). Prints one `ok <check>` line per check; any
failure raises, so the exit status is non-zero.
"""

import sys

client_kind, base_url, api_key, png, pdf, upstream = sys.argv[1:7]

if client_kind == "openai":
    import openai

    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=20)
    answer = client.chat.completions.create(
        model="claude-test",
        messages=[{
            "role": "user",
            "content": [
                {"type": "text", "text": "What are these?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
                {"type": "file", "file": {"filename": "report.pdf", "file_data": f"data:application/pdf;base64,{pdf}"}},
            ],
        }],
    )
    text = answer.choices[0].message.content
    assert text == "saw image/png and application/pdf", text
    print("ok image and pdf answered")

    try:
        client.chat.completions.create(
            model="claude-test",
            messages=[{
                "role": "user",
                "content": [
                    {"type": "text", "text": "Transcribe"},
                    {"type": "input_audio", "input_audio": {"data": "UklGRiQAAABXQVZF", "format": "wav"}},
                ],
            }],
        )
        raise AssertionError("an audio part reached an upstream that cannot take it")
    except openai.BadRequestError as error:
        assert "audio" in error.message, error.message
        assert error.code == "unsupported_content", error.code
    print("ok unsupported part refused")
elif client_kind == "responses":
    import openai

    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=20)
    question = [{
        "role": "user",
        "content": [
            {"type": "input_text", "text": "What are these?"},
            {"type": "input_image", "detail": "auto", "image_url": f"data:image/png;base64,{png}"},
            {"type": "input_file", "filename": "report.pdf", "file_data": f"data:application/pdf;base64,{pdf}"},
        ],
    }]
    response = client.responses.create(model="test-model", input=question)
    assert response.output_text == "saw image/png and application/pdf", response
    with client.responses.stream(model="test-model", input=question) as stream:
        for _ in stream:
            pass
        streamed = stream.get_final_response()
    assert streamed.output_text == "saw image/png and application/pdf", streamed
    print("ok image and pdf answered")

    # What each upstream cannot take: audio for the Messages API, a file by URL for Chat Completions.
    if upstream == "anthropic":
        part, named = {"type": "input_audio", "input_audio": {"data": "UklGRiQAAABXQVZF", "format": "wav"}}, "audio"
    else:
        part, named = {"type": "input_file", "file_url": "https://example.com/report.pdf"}, "file by URL"
    try:
        client.responses.create(
            model="test-model",
            input=[{"role": "user", "content": [{"type": "input_text", "text": "Look"}, part]}],
        )
        raise AssertionError(f"{part['type']} reached an upstream that cannot take it")
    except openai.BadRequestError as error:
        assert named in error.message, error.message
        assert error.code == "unsupported_content", error.code
    print("ok unsupported part refused")
else:
    import anthropic

    client = anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=0, timeout=20)
    message = client.messages.create(
        model="gpt-test",
        max_tokens=64,
        messages=[{
            "role": "user",
            "content": [
                {"type": "text", "text": "What are these?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
                {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": pdf},
                 "title": "report.pdf", "cache_control": {"type": "ephemeral"}},
            ],
        }],
    )
    assert message.content[0].text == "saw image/png and application/pdf", message
    print("ok image and pdf answered")

    try:
        client.messages.create(
            model="gpt-test",
            max_tokens=64,
            messages=[{
                "role": "user",
                "content": [
                    {"type": "document", "source": {"type": "url", "url": "https://example.com/report.pdf"}},
                ],
            }],
        )
        raise AssertionError("a document by URL reached an upstream that cannot take it")
    except anthropic.BadRequestError as error:
        assert "file by URL" in str(error), str(error)
    print("ok unsupported part refused")
